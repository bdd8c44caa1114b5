"""Engine API on a random-weight bundle: results, stats, streaming text, generation state,
sampling options and error paths (the outputs are meaningless; the mechanics are not); the
engine's lifetime (close()) on the bundled default model."""

from __future__ import annotations

import json
import os
import shutil
import threading

import numpy as np
import pytest

from qwen3asr import TranscribeOptions, AudioError, BundleError, DecodingOptions, Qwen3ASREngine
from qwen3asr import EngineClosed
from qwen3asr import prepare_audio
from qwen3asr.engine import TextStreamer
from qwen3asr.languages import LanguageError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIP = os.path.join(ROOT, "audio", "en_1.wav")
EN2 = os.path.join(ROOT, "audio", "en_2.wav")


def test_transcription_fields_and_stats(engine):
    r = engine.transcribe(CLIP, max_new_tokens=6)
    assert r.truncated and len(r.token_ids) == 6  # random weights never say end-of-sequence
    assert r.raw_text == engine.tokenizer.decode(r.token_ids)
    s = r.stats
    assert s.audio_seconds == pytest.approx(1.782, abs=0.01)
    assert s.prefill_tokens == 9 + 6 + 23  # prompt template + audio tokens of 1.78 s
    assert s.decode_tokens == 5  # the sixth token needs no forward pass
    assert s.encoder_calls == 1 and s.backend == "onnx"
    assert s.real_time_factor > 0 and s.total_ms >= s.encoder_ms
    d = r.to_dict()
    assert set(d) >= {"text", "language", "language_code", "truncated", "stats"}
    json.dumps(d)


def test_a_transcription_without_context_builds_no_bpe(bundle_dir):
    """The exporter's token table answers every prompt without context and all decoding: a
    one-shot run never builds the `tokenizers` pipeline (0.3-0.5 s, 65 MB on the real vocabulary;
    docs/benchmarks.md); context text builds it, and the ids are the pipeline's."""
    with Qwen3ASREngine(bundle_dir, backend="onnx", decoder_dtype="int8") as e:
        assert "token_table.npz" in e.bundle.manifest["files"]
        auto = e.transcribe(CLIP, max_new_tokens=4)
        forced = e.transcribe(CLIP, language="zh", max_new_tokens=4)
        assert e.tokenizer._pipeline is None
        assert forced.stats.prefill_tokens == auto.stats.prefill_tokens + 3  # language, " Chinese", <asr_text>
        with_context = e.transcribe(CLIP, context="hot words", max_new_tokens=4)
        assert e.tokenizer._pipeline is not None
        assert with_context.stats.prefill_tokens == auto.stats.prefill_tokens + 2


def test_forced_language_and_context(engine):
    r = engine.transcribe(CLIP, language="zh", context="hot words", max_new_tokens=4)
    assert r.language == "Chinese" and r.language_code == "zh"
    with pytest.raises(LanguageError, match="accepted"):
        engine.transcribe(CLIP, language="Klingon")


def test_on_text_gets_exactly_the_text_with_forced_language(engine):
    pieces = []
    r = engine.transcribe(CLIP, language="English", max_new_tokens=12, on_text=pieces.append)
    assert "".join(pieces).strip() == r.text
    assert all("\ufffd" not in p for p in pieces)


def test_text_streamer_hides_prefix_and_never_splits_characters(engine):
    tok = engine.tokenizer
    ids = tok.encode("language Chinese<asr_text>打开厨房的灯 and 𝄞 done")
    pieces = []
    s = TextStreamer(tok, pieces.append, forced=False)
    for t in ids + [tok.im_end]:
        s.push(t)
    s.finish()
    assert "".join(pieces) == "打开厨房的灯 and 𝄞 done"
    assert all("\ufffd" not in p and "language" not in p for p in pieces)
    # nothing is emitted before <asr_text> arrives
    early = []
    s2 = TextStreamer(tok, early.append, forced=False)
    for t in tok.encode("language English"):
        s2.push(t)
    assert early == []


def test_generation_pause_resume_and_clone(engine):
    opts = DecodingOptions(max_new_tokens=10)
    g_full, _ = engine.start(CLIP, options=opts)
    full = g_full.run()
    g, _ = engine.start(CLIP, options=opts)
    first = g.run(max_steps=3)
    assert len(first) == 3 and not g.finished
    fork = g.clone()
    rest = g.run()
    assert first + rest == full and g.finish_reason == "length"
    assert fork.run() == rest  # the clone continues identically and independently
    assert fork.tokens == g.tokens


def test_clone_branches_with_sampling(engine):
    g, _ = engine.start(CLIP, options=DecodingOptions(max_new_tokens=8, temperature=1.0, seed=1))
    g.run(max_steps=2)
    a, b = g.clone(), g.clone()
    assert a.run() == b.run()  # same rng state copied
    s1 = engine.transcribe(CLIP, max_new_tokens=8, temperature=1.0, top_k=50, top_p=0.9, seed=7)
    s2 = engine.transcribe(CLIP, max_new_tokens=8, temperature=1.0, top_k=50, top_p=0.9, seed=7)
    assert s1.token_ids == s2.token_ids


def test_repetition_penalty_changes_greedy_output(engine):
    plain = engine.transcribe(CLIP, max_new_tokens=8)
    penal = engine.transcribe(CLIP, max_new_tokens=8, repetition_penalty=5.0)
    assert len(set(penal.token_ids)) > len(set(plain.token_ids))


@pytest.mark.parametrize("kw,msg", [({"max_new_tokens": 0}, "max_new_tokens"), ({"temperature": -1}, "temperature"),
                                    ({"top_k": -2}, "top_k"), ({"top_p": 0.0}, "top_p"),
                                    ({"repetition_penalty": 0}, "repetition_penalty")])
def test_bad_decoding_options(engine, kw, msg):
    with pytest.raises(ValueError, match=msg):
        engine.transcribe(CLIP, **kw)


def test_too_long_names_the_limit(bundle_dir):
    eng = Qwen3ASREngine(bundle_dir, backend="onnx", decoder_dtype="int8")
    eng.max_context = 200
    x = np.zeros(16000 * 20, np.float32)
    with pytest.raises(AudioError, match=r"too long.*context of 200 tokens \(about \d+ s of audio\)"):
        eng.start(x, max_new_tokens=50)  # one pass, as asked
    # transcribe() decodes it in chunks instead, as large as this small context allows
    mode, o = eng.plan(x, TranscribeOptions(max_new_tokens=50, vad=False))
    assert (mode, o.chunk_size) == ("chunks", 2.0)
    r = eng.transcribe(x, max_new_tokens=50, vad=False)
    assert r.stats.encoder_calls >= 10 and r.stats.audio_seconds == 20.0


def test_split_and_merged_forms_agree(bundle_dir):
    a = Qwen3ASREngine(bundle_dir, backend="onnx", encoder_form="merged", decoder_dtype="fp32")
    b = Qwen3ASREngine(bundle_dir, backend="onnx", encoder_form="split", decoder_dtype="fp32")
    assert a.transcribe(CLIP, max_new_tokens=8).token_ids == b.transcribe(CLIP, max_new_tokens=8).token_ids


# ----------------------------------------------------------------------------- bundle faults
def _copy(bundle_dir, tmp_path):
    dst = tmp_path / "bundle"
    shutil.copytree(bundle_dir, dst)
    return dst


def test_missing_model_dir(tmp_path):
    with pytest.raises(BundleError, match="model directory not found.*export_onnx.py"):
        Qwen3ASREngine(str(tmp_path / "nope"), backend="onnx")


def test_not_a_bundle(tmp_path):
    with pytest.raises(BundleError, match="no model.json"):
        Qwen3ASREngine(str(tmp_path), backend="onnx")


def test_lfs_pointer_files(bundle_dir, tmp_path):
    dst = _copy(bundle_dir, tmp_path)
    (dst / "decoder" / "decoder_int8.onnx").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n")
    with pytest.raises(BundleError, match="Git LFS pointer.*git lfs pull"):
        Qwen3ASREngine(str(dst), backend="onnx", decoder_dtype="int8")


def test_missing_decoder_file_and_dtype(bundle_dir, tmp_path):
    dst = _copy(bundle_dir, tmp_path)
    os.remove(dst / "decoder" / "decoder_fp32.onnx")
    with pytest.raises(BundleError, match="decoder \\(fp32\\) missing"):
        Qwen3ASREngine(str(dst), backend="onnx", decoder_dtype="fp32")
    man = json.loads((dst / "model.json").read_text())
    man["decoder"]["variants"] = [v for v in man["decoder"]["variants"] if v["dtype"] != "int4"]
    (dst / "model.json").write_text(json.dumps(man))
    with pytest.raises(BundleError, match="no int4 decoder"):
        Qwen3ASREngine(str(dst), backend="onnx", decoder_dtype="int4")


def test_wrong_format_and_bad_json(bundle_dir, tmp_path):
    dst = _copy(bundle_dir, tmp_path)
    man = json.loads((dst / "model.json").read_text())
    man["format"] = "something-else/9"
    (dst / "model.json").write_text(json.dumps(man))
    with pytest.raises(BundleError, match="Re-export"):
        Qwen3ASREngine(str(dst), backend="onnx")
    (dst / "model.json").write_text("{not json")
    with pytest.raises(BundleError, match="not valid JSON"):
        Qwen3ASREngine(str(dst), backend="onnx")


def test_missing_encoder_graph(bundle_dir, tmp_path):
    dst = _copy(bundle_dir, tmp_path)
    os.remove(dst / "encoder" / "merged_2s.onnx")
    eng = Qwen3ASREngine(str(dst), backend="onnx", decoder_dtype="int8")
    with pytest.raises(FileNotFoundError, match="merged_2s.onnx.*export_onnx.py"):
        eng.transcribe(CLIP, max_new_tokens=2)


def test_unknown_options(bundle_dir):
    with pytest.raises(ValueError, match="unknown backend"):
        Qwen3ASREngine(bundle_dir, backend="gpu")
    with pytest.raises(ValueError, match="encoder form"):
        Qwen3ASREngine(bundle_dir, backend="onnx", encoder_form="fused")
    with pytest.raises(BundleError, match=r"encoder sizes \[7\] s not in the bundle"):
        Qwen3ASREngine(bundle_dir, backend="onnx", encoder_sizes=[7])


def test_checksums_detect_corruption(bundle_dir, tmp_path):
    from qwen3asr.bundle import Bundle

    dst = _copy(bundle_dir, tmp_path)
    assert Bundle.load(str(dst)).verify_checksums() == []
    with open(dst / "embed_tokens.npy", "r+b") as f:
        f.seek(-4, 2)
        f.write(b"\x01\x02\x03\x04")
    assert Bundle.load(str(dst)).verify_checksums() == ["embed_tokens.npy"]


def test_export_refuses_head_dim_gqa_cannot_run(tmp_path):
    """ONNX Runtime's GroupQueryAttention needs a head size that is a multiple of 16: the exporter
    says so instead of writing a decoder that crashes on its first call."""
    pytest.importorskip("torch", reason="random checkpoints are built with the official code (torch)")
    import json as _json

    from qwen3asr_tools import export_onnx
    import fixtures
    from qwen3asr_tools.checkpoint import CheckpointError

    ck = tmp_path / "ck"
    shutil.copytree(fixtures.checkpoint("tiny-a", dtype="bfloat16"), ck)
    cfg = _json.loads((ck / "config.json").read_text())
    cfg["thinker_config"]["text_config"]["head_dim"] = 40
    (ck / "config.json").write_text(_json.dumps(cfg))
    with pytest.raises(CheckpointError, match="head_dim 40 is not a multiple of 16"):
        export_onnx.export(str(ck), str(tmp_path / "out"))


def test_manifest_eos_ids_must_match_the_tokenizer(bundle_dir, tmp_path):
    """Both backends stop on the manifest's end-of-sequence ids; a bundle whose ids disagree with its
    tokenizer is refused at load."""
    dst = _copy(bundle_dir, tmp_path)
    man = json.loads((dst / "model.json").read_text())
    man["eos_token_ids"] = [man["eos_token_ids"][0]]
    (dst / "model.json").write_text(json.dumps(man))
    with pytest.raises(RuntimeError, match="end-of-sequence ids .* differ from the tokenizer's"):
        Qwen3ASREngine(str(dst), backend="onnx")


def test_a_tokenizer_that_disagrees_with_the_manifest_is_a_bundle_error(bundle_dir, tmp_path):
    """A bundle put together from two exports: a special token's id differs between the tokenizer
    files and model.json."""
    from qwen3asr import BundleError

    dst = _copy(bundle_dir, tmp_path)
    man = json.loads((dst / "model.json").read_text())
    name = sorted(man["special_tokens"])[0]
    man["special_tokens"][name] += 1
    (dst / "model.json").write_text(json.dumps(man))
    with pytest.raises(BundleError, match=f"the tokenizer and model.json disagree on {name}.*re-export"):
        Qwen3ASREngine(str(dst), backend="onnx")


def test_every_library_error_is_a_qwen3asr_error_and_keeps_its_builtin_base():
    import qwen3asr
    from qwen3asr.backends.rk.backend import RKBackendError
    from qwen3asr.backends.rk.rkllm import RKLLMError
    from qwen3asr.languages import LanguageError
    from qwen3asr.tokenizer import TokenizerError

    for cls, builtin in ((qwen3asr.AudioError, ValueError), (qwen3asr.BundleError, RuntimeError),
                         (qwen3asr.EngineClosed, RuntimeError), (qwen3asr.Cancelled, RuntimeError),
                         (LanguageError, ValueError), (TokenizerError, RuntimeError),
                         (RKBackendError, RuntimeError), (RKLLMError, RuntimeError)):
        assert issubclass(cls, qwen3asr.Qwen3ASRError) and issubclass(cls, builtin), cls


def test_one_pass_limit_is_read_and_checked(bundle_dir, tmp_path):
    """model.json ``limits.one_pass_seconds``: absent = None (as long as the context holds)."""
    from qwen3asr.bundle import Bundle

    assert Bundle.load(bundle_dir).one_pass_seconds is None
    dst = _copy(bundle_dir, tmp_path)
    man = json.loads((dst / "model.json").read_text())
    for bad in (0, -3, "10", True, None):
        man["limits"] = {"one_pass_seconds": bad}
        (dst / "model.json").write_text(json.dumps(man))
        if bad is None:
            assert Bundle.load(str(dst)).one_pass_seconds is None
            continue
        with pytest.raises(BundleError, match=r"limits.one_pass_seconds must be a positive number"):
            Qwen3ASREngine(str(dst), backend="onnx")
    man["limits"] = {"one_pass_seconds": 12}
    (dst / "model.json").write_text(json.dumps(man))
    assert Bundle.load(str(dst)).one_pass_seconds == 12.0


# ------------------------------------------------------------------ lifetime

def test_close_is_harmless_twice_and_use_after_close_is_a_clear_error():
    with Qwen3ASREngine(backend="onnx", threads=1) as e:
        assert e.transcribe(EN2).text
        s = e.create_stream()
    assert e.closed
    e.close()
    for call in (lambda: e.transcribe(EN2), lambda: e.create_stream(), lambda: s.feed_audio(prepare_audio(EN2)),
                 lambda: e.start(EN2)):
        with pytest.raises(EngineClosed, match=r"was closed \(engine.close\(\)\); create a new one"):
            call()


# ----------------------------------------------------------------- preload_seconds


class _Recording:
    """An EncoderRunner that records the variants each call runs (shapes as the real graphs')."""

    def __init__(self, out_dim=8):
        self.runs, self.loaded, self.out_dim = [], [], out_dim

    def load(self, variant):
        self.loaded.append(variant)

    def run_merged(self, variant, mel, conv_mask1, conv_mask2, attn_bias):
        self.runs.append(variant)
        return np.zeros((1, variant.tokens, self.out_dim), np.float32)

    def close(self):
        pass


def test_variants_for_are_the_variants_encode_runs():
    from qwen3asr.encoder import AudioEncoder, EncoderVariant

    rng = np.random.default_rng(3)
    for sizes, window in (((2, 3, 4, 5, 8), 104), ((1, 3), 104), ((2, 3), 13 * 4)):
        runner = _Recording()
        enc = AudioEncoder(runner, [EncoderVariant("merged", n, f"m{n}") for n in sizes], window, 4)
        for n in list(range(1, 1700, 7)) + [int(x) for x in rng.integers(1, 6000, 60)] + [800, 1600, 2400]:
            runner.runs.clear()
            enc.encode(np.zeros((4, n), np.float32))
            assert enc.variants_for(n) == list(dict.fromkeys(runner.runs)), (sizes, n)
        assert enc.preload(2.5) == [enc.pick(250)] and runner.loaded == [enc.pick(250)]
        # frames as the front end counts them (floor(n / 160)): 48090 samples are 300 frames, the 3 s graph
        assert enc.preload(48090 / 16000) == [enc.pick(300)]


def test_preload_loads_the_clips_graphs_with_the_engine(bundle_dir):
    """preload_seconds: the encoder session a one-pass decode of that length runs is made during
    the engine's load (beside the decoder's) and the call makes none; the result is unchanged."""
    seconds = 1.78175  # CLIP
    with Qwen3ASREngine(bundle_dir, backend="onnx", decoder_dtype="int8", preload_seconds=seconds) as e, \
            Qwen3ASREngine(bundle_dir, backend="onnx", decoder_dtype="int8") as plain:
        want = [v.path for v in e.encoder.variants_for(int(seconds * 100))]
        assert list(e.encoder.runner._sessions) == want and len(want) == 1
        assert list(plain.encoder.runner._sessions) == []
        got = e.transcribe(CLIP, max_new_tokens=6)
        assert list(e.encoder.runner._sessions) == want  # the call found its graph loaded
        assert got.token_ids == plain.transcribe(CLIP, max_new_tokens=6).token_ids


def test_preload_over_the_one_pass_limit_loads_nothing():
    """models/default declares a 10 s one-pass limit: longer audio goes in chunks, whose graphs
    are not the whole length's, so nothing is preloaded."""
    with Qwen3ASREngine(backend="onnx", preload_seconds=60.0) as e:
        assert e.bundle.one_pass_seconds == 10.0 and list(e.encoder.runner._sessions) == []
    with Qwen3ASREngine(backend="onnx", preload_seconds=9.0) as e:  # one pass: the 8 s graph chained, then 2 s
        assert [os.path.basename(p) for p in e.encoder.runner._sessions] == ["merged_8s.onnx", "merged_2s.onnx"]


def test_a_preload_that_fails_fails_the_load_and_frees_the_decoder(bundle_dir, monkeypatch):
    from qwen3asr.backends import onnx as onnx_backend

    closed = []
    monkeypatch.setattr(onnx_backend.OnnxEncoderRunner, "load",
                        lambda self, v: (_ for _ in ()).throw(RuntimeError(f"ONNX Runtime cannot load {v.path}: bad")))
    real_close = onnx_backend.OnnxTextDecoder.close
    monkeypatch.setattr(onnx_backend.OnnxTextDecoder, "close", lambda self: (closed.append(self), real_close(self)))
    with pytest.raises(RuntimeError, match="cannot load .*merged_2s.onnx: bad"):
        Qwen3ASREngine(bundle_dir, backend="onnx", decoder_dtype="int8", preload_seconds=1.5)
    assert len(closed) == 1


def test_with_preload_the_decoder_loads_during_the_first_call(bundle_dir, monkeypatch):
    """preload_seconds: the engine is ready once the encoder's graphs are; the decoder loads in a
    thread (backends/pending.py) and the first request waits for it where it first decodes."""
    from qwen3asr.backends import onnx as onnx_backend
    from qwen3asr.backends.pending import PendingDecoder

    real = onnx_backend.create_onnx_decoder
    release = threading.Event()
    monkeypatch.setattr(onnx_backend, "create_onnx_decoder", lambda *a, **k: (release.wait(60), real(*a, **k))[1])
    with Qwen3ASREngine(bundle_dir, backend="onnx", decoder_dtype="int8", preload_seconds=1.78175) as e:
        assert isinstance(e.decoder, PendingDecoder) and not e.decoder.loaded
        assert e.decoder_dtype == "int8" and e.max_context == e.bundle.max_context
        mel = e.features(prepare_audio(CLIP))
        e.encode(mel)  # the encoder runs while the decoder is still loading
        assert not e.decoder.loaded
        release.set()
        got = e.transcribe(CLIP, max_new_tokens=6)
        assert e.decoder.loaded and e.decoder.kv is e.decoder.result().kv
    with Qwen3ASREngine(bundle_dir, backend="onnx", decoder_dtype="int8") as plain:
        assert not isinstance(plain.decoder, PendingDecoder)
        assert got.token_ids == plain.transcribe(CLIP, max_new_tokens=6).token_ids


def test_a_decoder_that_fails_to_load_fails_the_first_request(bundle_dir, monkeypatch):
    from qwen3asr.backends import onnx as onnx_backend

    def broken(*a, **k):
        raise RuntimeError("ONNX Runtime cannot load decoder_int8.onnx: bad")

    monkeypatch.setattr(onnx_backend, "create_onnx_decoder", broken)
    with Qwen3ASREngine(bundle_dir, backend="onnx", decoder_dtype="int8", preload_seconds=1.5) as e:
        with pytest.raises(RuntimeError, match="cannot load decoder_int8.onnx: bad"):
            e.transcribe(CLIP, max_new_tokens=4)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "3", True, 1e9])
def test_preload_seconds_is_checked(bundle_dir, bad):
    with pytest.raises(ValueError, match="preload_seconds"):
        Qwen3ASREngine(bundle_dir, backend="onnx", preload_seconds=bad)
