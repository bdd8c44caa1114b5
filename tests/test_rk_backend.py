"""The engine with backend="rk" end to end on x86, with test doubles for the NPU parts only.

- librkllmrt.so: the C double tests/c/fake_rkllm.c (doubles/rkllm_c.py), linked with a small
  shim whose ``rkllm_run`` keeps a copy of the embeddings it is handed, so the test can compare
  them bit for bit with the ONNX engine's spliced prompt embeddings.
- rknnlite: doubles.rknnlite.BoardRKNNLite as ``rknnlite.api.RKNNLite``, which checks the call
  contract (load_rknn, init_runtime with the SoC's core mask, inference(inputs=[...]) with the
  stored shapes, release) and computes with our ONNX Runtime encoder runner on the bundle's graphs.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

from qwen3asr.decoding import DecodingOptions

pytest.importorskip("onnxruntime", reason="the encoder double runs the ONNX graphs")
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

import bundles  # noqa: E402
from qwen3asr import Qwen3ASREngine  # noqa: E402
from qwen3asr.backends.rk import backend as rk_backend  # noqa: E402
from qwen3asr.backends.rk import options as rk_options  # noqa: E402
from qwen3asr.backends.rk import rkllm  # noqa: E402
from qwen3asr.audio import prepare_audio  # noqa: E402
from qwen3asr.bundle import BundleError  # noqa: E402
from qwen3asr.encoder import tokens_for_frames  # noqa: E402
from doubles import rkllm_c  # noqa: E402
from doubles import rknnlite  # noqa: E402
from doubles.rkllm_c import Shim, runtime_script  # noqa: E402
from doubles.rknnlite import BoardRKNNLite, add_rk_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CLIP = str(ROOT / "audio" / "en_1.wav")
SOC = "rk3588"
CORE_MASK = {"rk3588": 7, "rk3576": 3}


@pytest.fixture(scope="session")
def build_lib(tmp_path_factory):
    return rkllm_c.Builds(tmp_path_factory.mktemp("fake_rkllm_shim")).capturing


@pytest.fixture
def fake_rknnlite(monkeypatch):
    rknnlite.install(monkeypatch, BoardRKNNLite)
    BoardRKNNLite.reset(expected_mask=CORE_MASK[SOC])
    yield BoardRKNNLite
    assert BoardRKNNLite.violations == []


@pytest.fixture(scope="module")
def base_bundle():
    return bundles.bundle("tiny-a", "bfloat16")[1]


@pytest.fixture
def rk_bundle(base_bundle, tmp_path, fake_rknnlite):
    d = str(tmp_path / "bundle")
    shutil.copytree(base_bundle, d)
    add_rk_section(d, SOC)
    return d


@pytest.fixture(params=["1.2", "1.3"])
def shim(request, build_lib, monkeypatch):
    path = build_lib(request.param)
    monkeypatch.setenv(rkllm.ENV_LIB, path)
    monkeypatch.delenv(rkllm.ENV_ABI, raising=False)
    monkeypatch.setenv(rk_backend.ENV_SOC, SOC)
    s = Shim(path, hidden=96)
    s.abi = request.param
    return s


def expect_init(shim, decoder_file, max_context=1024, max_new=256, top_k=1, top_p=1.0, temperature=1.0,
                repeat_penalty=1.0):
    shim.lib.fake_expect_model_path(decoder_file.encode())
    shim.expect(max_context_len=max_context, max_new_tokens=max_new, top_k=top_k, top_p=top_p,
                temperature=temperature, repeat_penalty=repeat_penalty, base_domain_id=1, embed_flash=1,
                skip_special_token=1, is_async=0, n_batch=1, use_cross_attn=0, keep_history=0,
                keep_system_prompt=0)


def transcript_ids(tok, text="Hello 世界𠀀 end"):
    return tok.encode("language English") + [tok.asr_text] + tok.encode(text)


# ------------------------------------------------------------------------ end to end

def test_engine_rk_end_to_end(rk_bundle, shim, fake_rknnlite):
    ref = Qwen3ASREngine(rk_bundle, backend="onnx", decoder_dtype="fp32")
    tok = ref.tokenizer
    ids = transcript_ids(tok)
    script = runtime_script(tok, ids + [tok.im_end])
    assert any(item.startswith("W ") for item in script)  # a character split over two tokens
    shim.script(*script)
    decoder_file = os.path.join(rk_bundle, "rk", f"decoder_{SOC}_w8a8.rkllm")
    expect_init(shim, decoder_file)

    engine = Qwen3ASREngine(rk_bundle, backend="rk")
    assert engine.backend == "rk" and engine.decoder.runtime.abi == shim.abi
    pieces = []
    res = engine.transcribe(CLIP, on_text=pieces.append)

    assert res.language == "English" and res.language_code == "en"
    assert res.text == "Hello 世界𠀀 end"
    assert "".join(pieces) == res.text and len(pieces) > 1
    assert res.token_ids == tuple(ids)  # end-of-sequence dropped
    assert not res.truncated
    # the decoder got the ONNX engine's spliced prompt embeddings, bit for bit
    pcm = prepare_audio(CLIP)
    mel = ref.features(pcm)
    want = ref.embed_prompt(ref.prompt(tokens_for_frames(mel.shape[1])), ref.encode(mel))
    got = shim.embeds()
    assert got.shape == want.shape
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    # runtime figures in the stats
    s = res.stats
    assert (s.backend, s.prefill_ms, s.prefill_tokens, s.decode_ms, s.decode_tokens) == ("rk", 12.5, 40, 250.25, 9)
    assert s.runtime_perf["memory_usage_mb"] == 512.75 and s.runtime_perf["finish_reason"] == "eos"
    assert s.runtime_perf["abi"] == shim.abi and s.runtime_perf["soc"] == SOC
    assert s.encoder_calls >= 1 and s.audio_seconds == pytest.approx(pcm.shape[0] / 16000)
    # protocol: template cleared, role "", EMBED, cache cleared before the run; encoder contract
    assert shim.violations == []
    calls = shim.calls
    assert calls.index("rkllm_set_chat_template") < calls.index("rkllm_clear_kv_cache keep_system_prompt=0") \
        < calls.index("rkllm_run")
    assert [m.core_mask for m in fake_rknnlite.instances] == [7] * len(fake_rknnlite.instances)
    used = [m for m in fake_rknnlite.instances if m.shapes_seen]
    assert used and used[0].shapes_seen[0][0] == [1, 128, 200]  # 1.8 s clip -> 2 s merged variant
    engine.close()
    assert all(m.state == "released" for m in fake_rknnlite.instances)
    assert shim.calls[-1] == "rkllm_destroy"


def test_forced_language_and_second_run_clears_cache(rk_bundle, shim, fake_rknnlite):
    engine = Qwen3ASREngine(rk_bundle, backend="rk")
    tok = engine.tokenizer
    decoder_file = os.path.join(rk_bundle, "rk", f"decoder_{SOC}_w8a8.rkllm")
    expect_init(shim, decoder_file)
    shim.script(*runtime_script(tok, tok.encode("你好")))
    pieces = []
    res = engine.transcribe(CLIP, language="zh", on_text=pieces.append)
    assert (res.language, res.text, "".join(pieces)) == ("Chinese", "你好", "你好")
    res2 = engine.transcribe(CLIP, language="Chinese")
    assert res2.text == "你好"
    runs = [c for c in shim.calls if c in ("rkllm_run", "rkllm_clear_kv_cache keep_system_prompt=0")]
    assert runs == ["rkllm_clear_kv_cache keep_system_prompt=0", "rkllm_run"] * 2
    assert shim.violations == []


def test_sampling_options_reinitialise_the_runtime(rk_bundle, shim, fake_rknnlite, monkeypatch):
    engine = Qwen3ASREngine(rk_bundle, backend="rk")
    probes = []
    monkeypatch.setattr(rkllm, "version_in_file", lambda path: probes.append(path))
    tok = engine.tokenizer
    shim.script(*runtime_script(tok, transcript_ids(tok, "hi")))
    decoder_file = os.path.join(rk_bundle, "rk", f"decoder_{SOC}_w8a8.rkllm")
    expect_init(shim, decoder_file, max_new=100, top_k=5, top_p=0.9, temperature=0.7, repeat_penalty=1.15)
    res = engine.transcribe(CLIP, max_new_tokens=100, temperature=0.7, top_k=5, top_p=0.9, repetition_penalty=1.15)
    assert res.text == "hi"
    assert shim.violations == []
    assert shim.calls.count("rkllm_init") == 2 and shim.calls.count("rkllm_destroy") == 1
    # the second init reuses the library and ABI found by the first: no second probe of the .so
    assert probes == [] and engine.decoder.runtime.abi == shim.abi
    assert engine.decoder.runtime.lib_path == os.environ[rkllm.ENV_LIB]


def test_truncated_when_the_runtime_hits_max_new_tokens(rk_bundle, shim, fake_rknnlite):
    engine = Qwen3ASREngine(rk_bundle, backend="rk")
    tok = engine.tokenizer
    ids = transcript_ids(tok, "one two three four five six seven")
    assert len(ids) > 6
    shim.script(*runtime_script(tok, ids + [tok.im_end]))
    res = engine.transcribe(CLIP, max_new_tokens=6)
    assert res.truncated and res.token_ids == tuple(ids[:6])
    assert res.stats.runtime_perf["finish_reason"] == "length"
    shim.script(*runtime_script(tok, ids + [tok.im_end]))
    tokens, stats = engine.generate(engine.embeddings(np.arange(20)), DecodingOptions(max_new_tokens=6))
    assert tokens == ids[:6] and stats.finish_reason == "length"
    assert shim.violations == []


def test_rk_context_is_the_rkllm_models(base_bundle, tmp_path, fake_rknnlite, shim):
    """The .rkllm model's max_context (not the ONNX decoder's) bounds one-pass audio and engine.generate."""
    d = str(tmp_path / "bundle")
    shutil.copytree(base_bundle, d)
    add_rk_section(d, SOC, max_context=1024)
    onnx = Qwen3ASREngine(d, backend="onnx", decoder_dtype="fp32")
    engine = Qwen3ASREngine(d, backend="rk")
    assert onnx.max_context == 4096 and engine.max_context == 1024
    long_pcm = np.zeros(16000 * 70, dtype=np.float32)  # 70 s: about 910 audio tokens
    assert onnx.fits_one_pass(long_pcm) and not engine.fits_one_pass(long_pcm)
    assert engine.fits_one_pass(long_pcm[:16000 * 10])
    with pytest.raises(ValueError, match="prompt of 1000 tokens \\+ max_new_tokens=128 exceeds the RKLLM decoder's "
                                         "context of 1024 tokens"):
        engine.generate(engine.embeddings(np.arange(1000)), DecodingOptions(max_new_tokens=128))
    assert "rkllm_run" not in shim.calls
    engine.close()


def test_every_end_of_sequence_id_is_dropped_from_the_text(rk_bundle, shim, fake_rknnlite):
    """The runtime may hand back <|endoftext|> as well as <|im_end|>: both are the manifest's
    end-of-sequence ids and neither reaches the transcript."""
    from qwen3asr.bundle import Bundle

    b = Bundle.load(rk_bundle)
    assert b.eos_token_ids == frozenset({151645, 151643})
    engine = Qwen3ASREngine(rk_bundle, backend="rk")
    tok = engine.tokenizer
    for end in (tok.endoftext, tok.im_end):
        shim.script(*runtime_script(tok, transcript_ids(tok, "one two") + [end]))
        res = engine.transcribe(CLIP)
        assert res.text == "one two" and end not in res.token_ids
    engine.close()
    del b.manifest["eos_token_ids"]
    with pytest.raises(BundleError, match="no eos_token_ids; re-export the bundle"):
        b.eos_token_ids


def test_auto_backend_detects_the_soc_once(rk_bundle, shim, fake_rknnlite, monkeypatch):
    """backend="auto" on a board: the SoC read from the device tree picks the rk backend and is
    handed to it (one detection, and no "not a board" check against the machine name)."""
    from qwen3asr.backends.rk import soc

    monkeypatch.delenv(rk_backend.ENV_SOC, raising=False)
    calls = []
    monkeypatch.setattr(soc, "detect_soc", lambda *a: calls.append(a) or SOC)
    engine = Qwen3ASREngine(rk_bundle, backend="auto")
    assert engine.backend == "rk" and engine.decoder.soc == SOC
    assert len(calls) == 1
    engine.close()


def test_runaway_repetition_is_aborted(rk_bundle, shim, fake_rknnlite):
    engine = Qwen3ASREngine(rk_bundle, backend="rk")
    tok = engine.tokenizer
    loop = tok.encode(" la")
    assert len(loop) == 1
    shim.script(*runtime_script(tok, transcript_ids(tok, "x") + loop * 60))
    res = engine.transcribe(CLIP)
    assert "rkllm_abort" in shim.calls
    assert res.stats.runtime_perf["finish_reason"] == "repetition"
    assert len(res.token_ids) < 40 and res.language == "English"
    assert shim.violations == []


def test_the_engine_guard_and_fallback_run_on_the_rk_backend(rk_bundle, shim, fake_rknnlite):
    """The loop guard is the engine's on every backend (here passed into the binding per run),
    and a loop is decoded again with the fallback settings: the runtime is initialised anew
    with each fallback's repeat_penalty (RKLLM fixes sampling at init)."""
    engine = Qwen3ASREngine(rk_bundle, backend="rk")
    tok = engine.tokenizer
    loop = tok.encode(" la")
    shim.script(*runtime_script(tok, transcript_ids(tok, "x") + loop * 60))
    res = engine.transcribe(CLIP)
    assert res.finish_reason == "repetition" and res.stats.loops == 1
    assert res.stats.fallback_tries == 3  # every try replays the same loop: all three were made
    assert shim.calls.count("rkllm_abort") == 4  # the guard stopped every try
    assert shim.calls.count("rkllm_init") == 1 + 3 and shim.violations == []
    off = engine.transcribe(CLIP, fallback=False)
    assert off.stats.fallback_tries == 0 and off.finish_reason == "repetition"


def test_mapping_of_decoding_options():
    from qwen3asr.decoding import DecodingOptions

    o = rk_backend.rkllm_options(DecodingOptions(), 4096, 151936, 1024)
    assert (o.top_k, o.repeat_penalty, o.max_new_tokens, o.base_domain_id, o.embed_flash) == (1, 1.0, 256, 1, True)
    o = rk_backend.rkllm_options(DecodingOptions(temperature=0.5, top_k=0, top_p=0.8), 4096, 151936, 1024)
    assert (o.top_k, o.temperature, o.top_p) == (151936, 0.5, 0.8)
    with pytest.raises(ValueError, match="does not fit the RKLLM decoder's context of 512"):
        rk_backend.rkllm_options(DecodingOptions(max_new_tokens=600), 512, 151936, 1024)


# ---------------------------------------------------------------------------- errors

def test_off_board_error(base_bundle, monkeypatch):
    if os.uname().machine in ("aarch64", "arm64"):
        pytest.skip("this checks the message on a PC")
    monkeypatch.delenv(rk_backend.ENV_SOC, raising=False)
    with pytest.raises(rk_backend.RKBackendError, match="runs on Rockchip RK3576/RK3588 boards only.*backend 'onnx'"):
        Qwen3ASREngine(base_bundle, backend="rk")


def test_no_rk_section(base_bundle, monkeypatch, fake_rknnlite):
    monkeypatch.setenv(rk_backend.ENV_SOC, SOC)
    with pytest.raises(rk_backend.RKBackendError,
                       match=r'no "rk" section.*scripts/onnx2rknn.py.*scripts/export_rkllm.py'):
        Qwen3ASREngine(base_bundle, backend="rk")


def test_wrong_soc(rk_bundle, monkeypatch):
    monkeypatch.setenv(rk_backend.ENV_SOC, "rk3566")
    with pytest.raises(ValueError, match="unsupported SoC 'rk3566'.*rk3576, rk3588"):
        Qwen3ASREngine(rk_bundle, backend="rk")
    monkeypatch.setenv(rk_backend.ENV_SOC, "rk3576")  # converted for rk3588 only
    with pytest.raises(rk_backend.RKBackendError, match=r"no RKLLM decoder for rk3576 \(it has: rk3588\).*--target "
                                                        "rk3576"):
        Qwen3ASREngine(rk_bundle, backend="rk")


def test_missing_and_lfs_decoder(rk_bundle, monkeypatch):
    monkeypatch.setenv(rk_backend.ENV_SOC, SOC)
    path = os.path.join(rk_bundle, "rk", f"decoder_{SOC}_w8a8.rkllm")
    with open(path, "w") as f:
        f.write("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n")
    with pytest.raises(BundleError, match="Git LFS pointer.*git lfs pull"):
        Qwen3ASREngine(rk_bundle, backend="rk")
    os.remove(path)
    with pytest.raises(BundleError, match=r"RKLLM decoder for rk3588 missing: .*rk/decoder_rk3588_w8a8\.rkllm\. "
                                          "Copy it .*export_rkllm.py --target rk3588"):
        Qwen3ASREngine(rk_bundle, backend="rk")


def test_missing_sdks(rk_bundle, monkeypatch, build_lib, tmp_path):
    monkeypatch.setenv(rk_backend.ENV_SOC, SOC)
    monkeypatch.setitem(sys.modules, "rknnlite", None)
    monkeypatch.setitem(sys.modules, "rknnlite.api", None)
    with pytest.raises(RuntimeError, match="needs rknnlite.*pip install rknn-toolkit-lite2"):
        Qwen3ASREngine(rk_bundle, backend="rk")
    monkeypatch.setitem(sys.modules, "rknnlite", types.SimpleNamespace())
    api = types.ModuleType("rknnlite.api")
    api.RKNNLite = BoardRKNNLite
    monkeypatch.setitem(sys.modules, "rknnlite.api", api)
    monkeypatch.setenv(rkllm.ENV_LIB, str(tmp_path / "librkllmrt.so"))
    with pytest.raises(rkllm.RKLLMError, match="not a file.*airockchip/rknn-llm"):
        Qwen3ASREngine(rk_bundle, backend="rk")
    assert all(m.state == "released" for m in BoardRKNNLite.instances)  # encoder freed on failure


def test_stream_session_on_rk_backend(rk_bundle, shim, fake_rknnlite):
    """StreamSession reaches the RKLLM runtime through engine.generate: one EMBED run per chunk
    on the session's prompt, cache cleared first, end-of-sequence dropped."""
    engine = Qwen3ASREngine(rk_bundle, backend="rk")
    tok = engine.tokenizer
    expect_init(shim, os.path.join(rk_bundle, "rk", f"decoder_{SOC}_w8a8.rkllm"), max_new=128)
    ids = tok.encode("你好")
    shim.script(*runtime_script(tok, ids + [tok.im_end]))
    pcm = prepare_audio(CLIP)
    got = []
    tokens, stats = engine.generate(engine.embeddings(np.arange(20)), DecodingOptions(max_new_tokens=128),
                                             on_token=got.append)
    assert tokens == ids and got == ids and stats.finish_reason == "eos"
    assert (stats.prefill_tokens, stats.decode_tokens) == (40, 9)  # the runtime's own figures
    assert shim.embeds().shape == (20, engine.embeddings.hidden_size)
    # a whole stream on the rk backend: the session's prompts go to the runtime
    shim.script(*runtime_script(tok, ids + [tok.im_end]))
    session = engine.create_stream(language="Chinese", chunk_size=2.0)
    session.feed_audio(pcm)
    final = session.finish()
    assert "你好" in final.text
    assert shim.violations == []
    engine.close()


def test_a_4_gb_board_runs_the_decoder_at_1024_positions(base_bundle, tmp_path, fake_rknnlite, shim, monkeypatch):
    """Under SMALL_BOARD_RAM of MemTotal (a "4 GB" board) an RKLLM handle converted for more gets
    rkllm_init's max_context_len 1024 (the memory budget's high estimate then fits, docs/board.md
    section 8); a larger board gets the converted context; max_context always decides."""
    from qwen3asr import RKOptions

    d = str(tmp_path / "bundle")
    shutil.copytree(base_bundle, d)
    add_rk_section(d, SOC, max_context=4096)
    decoder_file = os.path.join(d, "rk", f"decoder_{SOC}_w8a8.rkllm")
    for ram, rk, context in ((3_900_000_000, RKOptions(), 1024), (7_800_000_000, RKOptions(), 4096),
                             (None, RKOptions(), 4096), (3_900_000_000, RKOptions(max_context=2048), 2048)):
        monkeypatch.setattr(rk_backend, "board_ram_bytes", lambda ram=ram: ram)
        expect_init(shim, decoder_file, max_context=context)
        with Qwen3ASREngine(d, backend="rk", rk=rk) as engine:
            assert engine.max_context == context
        assert shim.violations == []


def test_board_ram_is_memtotal(tmp_path):
    from qwen3asr.backends.rk.soc import board_ram_bytes

    (tmp_path / "meminfo").write_text("MemTotal:        3903164 kB\nMemFree:          101 kB\n")
    assert board_ram_bytes(str(tmp_path / "meminfo")) == 3903164 * 1024
    (tmp_path / "bad").write_text("MemFree: 1 kB\n")
    assert board_ram_bytes(str(tmp_path / "bad")) is None and board_ram_bytes(str(tmp_path / "none")) is None


# ---------------------------------------------------------------------------- board knobs

def test_every_rk_option_reaches_the_runtimes(rk_bundle, shim, fake_rknnlite, monkeypatch):
    """RKOptions -> rkllm_init's RKLLMParam (max_context_len, embed_flash, enabled_cpus_*), the
    library path and ABI the binding loads, and the encoder's RKNNLite core mask."""
    from qwen3asr import RKOptions

    lib = os.environ.pop(rkllm.ENV_LIB)  # given only through RKOptions
    monkeypatch.delenv(rk_backend.ENV_SOC)
    fake_rknnlite.expected_mask = 3  # NPU_CORE_0_1
    decoder_file = os.path.join(rk_bundle, "rk", f"decoder_{SOC}_w8a8.rkllm")
    expect_init(shim, decoder_file, max_context=512)
    shim.expect(embed_flash=0, enabled_cpus_mask=0x0F, enabled_cpus_num=4)  # the double's default is 0xF0
    rk = RKOptions(soc=SOC, npu_cores="0_1", cpus="0-3", lib_path=lib, abi=shim.abi, max_context=512,
                   embed_flash=False)
    engine = Qwen3ASREngine(rk_bundle, backend="rk", rk=rk)
    tok = engine.tokenizer
    shim.script(*runtime_script(tok, transcript_ids(tok, "hi") + [tok.im_end]))
    assert engine.transcribe(CLIP).text == "hi"
    assert shim.violations == []
    assert engine.decoder.runtime.lib_path == lib and engine.decoder.runtime.abi == shim.abi
    assert engine.max_context == 512 and engine.decoder.soc == SOC
    assert {m.core_mask for m in fake_rknnlite.instances} == {3}
    engine.close()
    with pytest.raises(ValueError, match="max_context=2048 is over the 1024 tokens the RKLLM model was converted for"):
        Qwen3ASREngine(rk_bundle, backend="rk", rk=RKOptions(soc=SOC, lib_path=lib, max_context=2048))


def test_a_cpu_count_takes_the_fastest_cores(rk_bundle, shim, fake_rknnlite, monkeypatch):
    """The reference design's (docs/reference_design.md) Qwen3ASREngine(..., platform=, enabled_cpus=2, repeat_penalty=1.15)
    on a board: two big cores (RK3588: CPUs 4-7 are the A76s), the penalty in RKLLMParam."""
    monkeypatch.setattr(rk_options, "cpu_capacities", lambda: [414.0] * 4 + [1024.0] * 4)
    monkeypatch.delenv(rk_backend.ENV_SOC)
    decoder_file = os.path.join(rk_bundle, "rk", f"decoder_{SOC}_w8a8.rkllm")
    expect_init(shim, decoder_file, repeat_penalty=1.15)
    shim.expect(enabled_cpus_mask=0x30, enabled_cpus_num=2)
    engine = Qwen3ASREngine(rk_bundle, platform=SOC, encoder_sizes=[2, 3], enabled_cpus=2, repeat_penalty=1.15)
    assert engine.backend == "rk"
    tok = engine.tokenizer
    shim.script(*runtime_script(tok, transcript_ids(tok, "hi") + [tok.im_end]))
    result = engine.transcribe(CLIP)
    assert (result["text"], result["stats"]["backend"]) == ("hi", "rk")
    assert shim.violations == []
    engine.close()
    engine.close()


def test_cli_board_flags_reach_the_runtimes(rk_bundle, shim, fake_rknnlite, monkeypatch, capsys):
    from qwen3asr.cli import transcribe as cli

    lib = os.environ[rkllm.ENV_LIB]
    monkeypatch.delenv(rk_backend.ENV_SOC)
    fake_rknnlite.expected_mask = 1
    expect_init(shim, os.path.join(rk_bundle, "rk", f"decoder_{SOC}_w8a8.rkllm"), max_context=768)
    shim.expect(embed_flash=0, enabled_cpus_mask=0xC0, enabled_cpus_num=2)
    tok = Qwen3ASREngine(rk_bundle, backend="onnx").tokenizer
    shim.script(*runtime_script(tok, transcript_ids(tok, "hi") + [tok.im_end]))
    rc = cli.main(["--audio", CLIP, "--model", rk_bundle, "--backend", "rk", "--soc", SOC, "--npu-cores", "0",
                   "--cpus", "6,7", "--rkllm-lib", lib, "--rkllm-abi", shim.abi, "--max-context", "768",
                   "--no-embed-flash"])
    assert rc == 0 and capsys.readouterr().out.strip() == "hi"
    assert shim.violations == []
    assert shim.calls[-1] == "rkllm_destroy"  # the CLI closes its engine


def test_rk_options_are_validated_with_the_accepted_values():
    from qwen3asr import RKOptions

    for kw, msg in [({"soc": "rk3399"}, "soc must be one of rk3576, rk3588"),
                    ({"npu_cores": "0_3"}, "unknown NPU core mask '0_3'; use one of auto, 0, 1, 2, 0_1, 0_1_2"),
                    ({"cpus": 9}, r"a CPU count must be 1..8"), ({"cpus": "a-b"}, r"not like \"4-7\""),
                    ({"cpus": [8]}, "CPU numbers must be 0..7"), ({"abi": "1.1"}, r'abi must be "1.2", "1.3"'),
                    ({"max_context": 4}, "max_context must be an integer >= 16"),
                    ({"embed_flash": 1}, "embed_flash must be True or False")]:
        with pytest.raises(ValueError, match=msg):
            RKOptions(**kw)
    assert RKOptions(cpus="4").cpus == 4 and RKOptions(cpus=[7, 4, 5]).cpus == (4, 5, 7)
    assert RKOptions(cpus=2).cpu_mask(capacities=[1, 1, 2, 2]) == 0b1100
    assert RKOptions(cpus="0,2").cpu_mask() == 0b101 and RKOptions().cpu_mask() == 0
    with pytest.raises(ValueError, match="cpus=4 but this machine has 2 CPUs"):
        RKOptions(cpus=4).cpu_mask(capacities=[1, 1])


def test_on_token_gets_every_id_including_the_runtimes_waiting_ones(rk_bundle, shim, fake_rknnlite):
    engine = Qwen3ASREngine(rk_bundle, backend="rk")
    tok = engine.tokenizer
    ids = tok.encode("世界𠀀")
    script = runtime_script(tok, ids + [tok.im_end])
    assert any(item.startswith("W ") for item in script)
    shim.script(*script)
    got = []
    tokens, stats = engine.generate(engine.embeddings(np.arange(20)), DecodingOptions(max_new_tokens=50),
                                    on_token=got.append)
    assert got == tokens == ids and stats.finish_reason == "eos"
    # a False from on_token stops the run (rkllm_abort), as a cancelled request does
    shim.script(*runtime_script(tok, ids + [tok.im_end]))
    tokens, stats = engine.generate(engine.embeddings(np.arange(20)), DecodingOptions(max_new_tokens=50),
                                    on_token=lambda t: False)
    assert len(tokens) == 1 and stats.finish_reason == "stopped" and "rkllm_abort" in shim.calls
    engine.close()


# ---------------------------------------------------------------------------- overlap

def test_the_encoder_runs_the_next_chunk_while_the_decoder_works(rk_bundle, shim, fake_rknnlite, monkeypatch):
    """Overlap (on by default with the rk backend): with an encoder double and a decoder double
    that each take 150 ms per call, encoder calls run during decoder runs, the text is the same
    as without overlap, and the wall time drops below the serial sum (printed, not asserted:
    no timed assertions)."""
    engine = Qwen3ASREngine(rk_bundle, backend="rk")
    tok = engine.tokenizer
    runs = []
    real_run = rkllm.RKLLMRuntime.run_embed

    def timed_run(self, *a, **kw):
        t0 = time.perf_counter()
        try:
            return real_run(self, *a, **kw)
        finally:
            runs.append((t0, time.perf_counter()))

    monkeypatch.setattr(rkllm.RKLLMRuntime, "run_embed", timed_run)
    shim.script(*runtime_script(tok, tok.encode(" one two") + [tok.im_end]))
    shim.lib.shim_set_delay_ms(150)
    fake_rknnlite.delay = 0.15
    pcm = np.tile(prepare_audio(CLIP), 5)[:16000 * 8]  # 8 s: four fixed 2 s chunks
    out, walls, spans = {}, {}, {}
    for overlap in (False, True):
        runs.clear()
        fake_rknnlite.intervals.clear()
        t0 = time.perf_counter()
        r = engine.transcribe(pcm, chunk_size=2.0, vad=False, pause_db=None, overlap=overlap)
        walls[overlap] = time.perf_counter() - t0
        out[overlap] = r.token_ids
        enc = list(fake_rknnlite.intervals)
        spans[overlap] = sum(1 for a0, a1 in enc for b0, b1 in runs if a0 < b1 and b0 < a1)
        assert len(runs) == 4 and len(enc) == 4
        serial = sum(b - a for a, b in enc) + sum(b - a for a, b in runs)
        print(f"overlap={overlap}: wall {walls[overlap]:.2f} s, serial sum {serial:.2f} s")
    assert out[True] == out[False] and len(out[True]) > 0
    assert spans[False] == 0  # serial: no encoder call inside a decoder run
    # chunks 2 and 3 were encoded while chunks 1 and 2 were decoded (the last, flushed at the
    # end of the audio, has no chunk after it to overlap with)
    assert spans[True] == 2
    assert shim.violations == []
    s = engine.create_stream(chunk_size=2.0)
    assert s.overlap and not engine.create_stream(chunk_size=2.0, overlap=False).overlap
    engine.close()


def test_auto_falls_back_to_the_cpu_naming_what_is_missing(rk_bundle, fake_rknnlite, monkeypatch, tmp_path, caplog):
    """backend="auto" on a board whose NPU backend cannot start (here: no librkllmrt.so) runs on
    the CPU with a warning that names the missing piece; backend="rk" fails with that error."""
    import logging

    from qwen3asr import RKOptions
    from qwen3asr.backends.rk import soc

    monkeypatch.delenv(rk_backend.ENV_SOC, raising=False)
    monkeypatch.setattr(soc, "detect_soc", lambda *a: SOC)
    monkeypatch.setenv(rkllm.ENV_LIB, str(tmp_path / "librkllmrt.so"))
    with caplog.at_level(logging.WARNING, logger="qwen3asr.backends"):
        engine = Qwen3ASREngine(rk_bundle, backend="auto")
    assert engine.backend == "onnx" and engine.soc is None
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert "NPU backend cannot start on this rk3588 board" in warning and "librkllmrt.so" in warning
    assert "using the CPU backend" in warning
    assert all(m.state == "released" for m in fake_rknnlite.instances)  # the NPU encoder was freed
    assert engine.transcribe(CLIP, max_new_tokens=4).stats.backend == "onnx"
    with pytest.raises(rkllm.RKLLMError, match="librkllmrt.so"):
        Qwen3ASREngine(rk_bundle, backend="rk", rk=RKOptions(soc=SOC))
    # no rknn-toolkit-lite2 on the board: the same fallback, with the install command
    monkeypatch.setitem(sys.modules, "rknnlite", None)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="qwen3asr.backends"):
        assert Qwen3ASREngine(rk_bundle, backend="auto").backend == "onnx"
    assert "pip install 'rknn-toolkit-lite2>=2.3'" in caplog.text


def test_a_library_that_cannot_be_this_machines_is_named_for_what_it_is(build_lib, tmp_path, monkeypatch):
    """A Git LFS pointer, a file that is no library, and a library for the other CPU each get
    their own message (the loader says "invalid ELF header" or "No such file or directory")."""
    real = build_lib("1.2")  # built here: loads
    assert rkllm.describe_library_file(real) is None
    lfs = tmp_path / "lfs.so"
    lfs.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n")
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not a library at all" * 4)
    other = tmp_path / "other.so"
    data = bytearray(open(real, "rb").read())
    here = os.uname().machine
    data[18:20] = (62 if here in ("aarch64", "arm64") else 183).to_bytes(2, "little")  # the other CPU
    other.write_bytes(bytes(data))
    cases = [(lfs, "is a Git LFS pointer, not the library"), (junk, r"is not a shared library \(no ELF header\)"),
             (other, "is built for (aarch64|x86_64), this machine is")]
    for path, msg in cases:
        with pytest.raises(rkllm.RKLLMError, match=msg):
            rkllm.load_library(str(path))
        monkeypatch.setenv(rkllm.ENV_LIB, str(path))
        with pytest.raises(rkllm.RKLLMError, match=msg):
            rkllm.load_library()
        monkeypatch.delenv(rkllm.ENV_LIB)


def test_the_real_rknnlite_is_not_called_without_its_runtime_library(rk_bundle, monkeypatch, tmp_path):
    """rknnlite loads /usr/lib/librknnrt.so itself and prints its own traceback when it is not
    there (seen in the arm64 rehearsal): the backend checks the file first and says what to do."""
    from qwen3asr.backends.rk import rknn

    calls = []

    class RKNNLite:  # stands in for rknnlite.api.rknn_lite.RKNNLite: must not even be created
        def __init__(self, *a, **kw):
            calls.append("created")

    RKNNLite.__module__ = "rknnlite.api.rknn_lite"
    rknnlite.install(monkeypatch, RKNNLite)
    missing = tmp_path / "librknnrt.so"
    monkeypatch.setattr(rknn, "RKNN_RUNTIME", str(missing))
    monkeypatch.setattr(rknn.check_rknn_runtime, "__defaults__", (str(missing),))
    with pytest.raises(RuntimeError, match=r"the RKNN NPU runtime .*librknnrt.so is missing: copy librknnrt.so from "
                                           r"rknn-toolkit2's rknpu2/runtime"):
        rknn.create_rknn_encoder(rk_bundle, soc=SOC)
    missing.write_text("version https://git-lfs.github.com/spec/v1\n")
    with pytest.raises(RuntimeError, match="is a Git LFS pointer"):
        rknn.create_rknn_encoder(rk_bundle, soc=SOC)
    assert calls == []


def test_the_rknnlite_hint_names_the_python_versions_it_has_wheels_for():
    from qwen3asr.backends.rk import rknn

    assert "wheels for Python 3.7-3.12 only and this is 3.13" in rknn.install_hint((3, 13, 5))
    assert rknn.install_hint((3, 11)).startswith("pip install rknn-toolkit-lite2")


def test_a_cancelled_scheduler_client_aborts_the_rkllm_run(rk_bundle, shim, fake_rknnlite):
    """What the server does when a client disconnects mid-generation, on the rk backend: the
    scheduler client's cancel stops the running RKLLM generation with rkllm_abort at the next
    token, the request raises Cancelled, and the runtime serves the next request normally."""
    from qwen3asr.server.scheduler import Scheduler
    from qwen3asr.work import Cancelled

    engine = Qwen3ASREngine(rk_bundle, backend="rk")
    tok = engine.tokenizer
    ids = transcript_ids(tok, "one two three four five six")
    scheduler = Scheduler(max_clients=2)
    gone = scheduler.admit("gone")
    shim.script(*runtime_script(tok, ids + [tok.im_end]))
    pieces = []

    def on_text(piece):  # the client disconnects once the first text has reached it
        pieces.append(piece)
        gone.cancel()

    with pytest.raises(Cancelled):
        engine.transcribe(CLIP, work=gone.work, on_text=on_text)
    assert len(pieces) == 1 and "rkllm_abort" in shim.calls
    assert shim.violations == []
    gone.close()
    shim.script(*runtime_script(tok, ids + [tok.im_end]))
    with scheduler.client("next") as c:
        assert engine.transcribe(CLIP, work=c.work).text == "one two three four five six"
    assert scheduler.stats().cancelled == 1 and scheduler.stats().active == 0
    engine.close()


# ------------------------------------------------------------------------ RKNN shape kinds

def test_both_shape_kinds_encode_alike(base_bundle, tmp_path, fake_rknnlite):
    """The rk encoder on dynamic-shape stand-ins (onnx2rknn's default: one file per part) and on
    fixed ones (one per size) gives the ONNX backend's embeddings; a dynamic model loads once and
    takes each call in the shape of the size picked, and the board double refuses any other."""
    ref = Qwen3ASREngine(base_bundle, backend="onnx", decoder_dtype="fp32")
    mel = ref.features(prepare_audio(CLIP))  # 1.8 s: the 2 s graph
    long_mel = np.concatenate([mel] * 4, axis=1)  # 7.1 s: the 8 s graph
    want = {k: ref.encode(m) for k, m in (("short", mel), ("long", long_mel))}
    from qwen3asr.backends.rk.rknn import create_rknn_encoder

    for shapes in ("dynamic", "fixed"):
        d = str(tmp_path / shapes)
        shutil.copytree(base_bundle, d)
        add_rk_section(d, SOC, shapes=shapes)
        BoardRKNNLite.instances = []
        enc = create_rknn_encoder(d, "merged", soc=SOC)
        assert enc.runner.shapes == shapes
        assert len(BoardRKNNLite.instances) == (1 if shapes == "dynamic" else 5)
        for k, m in (("short", mel), ("long", long_mel)):
            np.testing.assert_array_equal(enc.encode(m), want[k])
        seen = [s[0] for h in BoardRKNNLite.instances for s in h.shapes_seen]
        assert seen == [[1, 128, 200], [1, 128, 800]]
        enc.close()
    h = BoardRKNNLite.instances[0]  # a fixed 2 s model: a 3 s input is not its shape
    h.state = "ready"
    bad = [np.zeros(s, np.float32) for s in ([1, 128, 300], [3, 1, 1, 50], [3, 1, 1, 25], [1, 1, 39, 39])]
    assert h.inference(inputs=bad, data_format="nchw") is None
    assert len(BoardRKNNLite.violations) == 1 and "are none of" in BoardRKNNLite.violations[0]
    BoardRKNNLite.violations.clear()
