"""Draft verification on the rk backend: a final pass's streamed text checked in one GET_LOGITS
run, then only the rest generated (RKLLMTextDecoder.generate(draft=...), docs/rkllm_abi.md
"Draft verification").

The runtime is the C double of librkllmrt.so (tests/c/fake_rkllm.c) behind the capture shim; its
GET_LOGITS rows are what the ONNX decoder computes for the same prompt + draft (the oracle: a
runtime that does what the header says returns those), and its GENERATE run replays the ids the
ONNX one-pass decode gives after the kept ones. So each test checks the binding's part: which
runs it makes with which rows (bit for bit), how many draft ids it keeps, and that the result is
the one-pass decode's. The model is the bundled demo model (real text, an end of sequence).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the encoder double runs the ONNX graphs")
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

from qwen3asr import Qwen3ASREngine, RKOptions  # noqa: E402
from qwen3asr.audio import prepare_audio  # noqa: E402
from qwen3asr.backends.rk import backend as rk_backend  # noqa: E402
from qwen3asr.backends.rk import rkllm  # noqa: E402
from qwen3asr.decoding import DecodingOptions  # noqa: E402
from qwen3asr.onepass import transcribe_one_pass  # noqa: E402
from qwen3asr.options import TranscribeOptions  # noqa: E402
from qwen3asr.work import NO_WORK  # noqa: E402
from doubles import rkllm_c, rknnlite  # noqa: E402
from doubles.rkllm_c import N, Shim, runtime_script  # noqa: E402
from doubles.rknnlite import BoardRKNNLite, add_rk_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "models" / "default"
CLIPS = {"en": ROOT / "audio" / "en_1.wav", "zh": ROOT / "audio" / "zh_2.wav"}
SOC = "rk3588"


@pytest.fixture(scope="module")
def oracle():
    """The ONNX engine on the demo model: prompt rows, one-pass ids, and the logits after the
    prompt and after each id of a draft, per clip."""
    ref = Qwen3ASREngine(str(DEMO), backend="onnx", decoder_dtype="fp32")
    out = {}
    for name, path in CLIPS.items():
        pcm = prepare_audio(str(path))
        prompt = ref.prepare(pcm, TranscribeOptions()).embeds
        want = transcribe_one_pass(ref, pcm, TranscribeOptions(), work=NO_WORK)
        assert want.finish_reason == "eos" and len(want.token_ids) >= 5
        out[name] = (pcm, prompt, want)

    def logits(prompt, draft):
        x = np.concatenate([prompt, ref.embeddings(np.asarray(draft, dtype=np.int64))]).astype(np.float32)
        kv = ref.decoder.kv
        rows, _ = kv.forward(x, kv.new_cache(), np.arange(len(prompt) - 1, len(x)))
        kv.release_binding()
        return rows

    yield out, logits, ref
    ref.close()


@pytest.fixture
def board(tmp_path, monkeypatch, tmp_path_factory):
    rknnlite.install(monkeypatch, BoardRKNNLite)
    BoardRKNNLite.reset(expected_mask=7)
    d = str(tmp_path / "bundle")
    shutil.copytree(DEMO, d)
    add_rk_section(d, SOC)
    yield d
    assert BoardRKNNLite.violations == []


@pytest.fixture(scope="session")
def build_lib(tmp_path_factory):
    return rkllm_c.Builds(tmp_path_factory.mktemp("fake_rkllm_drafts")).capturing


@pytest.fixture(params=["1.2", "1.3"])
def shim(request, build_lib, monkeypatch, oracle):
    path = build_lib(request.param)
    monkeypatch.setenv(rkllm.ENV_LIB, path)
    monkeypatch.delenv(rkllm.ENV_ABI, raising=False)
    monkeypatch.setenv(rk_backend.ENV_SOC, SOC)
    s = Shim(path, hidden=oracle[2].bundle.text_config["hidden_size"])
    s.expect(mode_mask=0b101, keep_history=0, keep_system_prompt=0)
    return s


def runs_of_mode(shim, mode: int) -> list:
    return [e for e in shim.lines("EVENT") if e.startswith("run ") and f"mode={mode} " in e]


def rows_of(ref, prompt, ids) -> np.ndarray:
    return np.concatenate([prompt, ref.embeddings(np.asarray(ids, dtype=np.int64))]).astype(np.float32) \
        if len(ids) else prompt


def same_bits(a, b) -> bool:
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("clip", ["en", "zh"])
def test_a_draft_confirmed_to_the_end_of_the_text_takes_one_logits_run(board, shim, oracle, clip):
    cases, logits, ref = oracle
    pcm, prompt, want = cases[clip]
    draft = list(want.token_ids)
    shim.logits(logits(prompt, draft))
    tok = ref.tokenizer
    shim.script(*runtime_script(tok, tok.encode("not this") + [tok.im_end]))  # what a needless GENERATE would say
    engine = Qwen3ASREngine(board, backend="rk")
    pieces = []
    got = transcribe_one_pass(engine, pcm, TranscribeOptions(), work=NO_WORK, draft=draft, on_text=pieces.append)
    assert got.token_ids == want.token_ids and got.text == want.text and "".join(pieces) == want.text
    assert (got.stats.draft_tokens, got.stats.verified_tokens, got.stats.decode_tokens) == (len(draft), len(draft), 0)
    assert got.finish_reason == "eos"
    runs = shim.runs()
    assert len(runs) == 1 and same_bits(runs[0], rows_of(ref, prompt, draft))
    assert runs_of_mode(shim, 2) == [f"run handle=0 mode=2 n_tokens={len(prompt) + len(draft)}"]
    assert runs_of_mode(shim, 0) == []
    assert got.stats.runtime_perf["logits_run"]["prefill_tokens"] == len(prompt) + len(draft)
    engine.close()
    assert shim.violations == []


@pytest.mark.parametrize("clip, wrong_at", [("en", 3), ("zh", 0), ("en", 6)])
def test_a_draft_wrong_from_one_id_is_kept_up_to_it_and_the_rest_generated(board, shim, oracle, clip, wrong_at):
    cases, logits, ref = oracle
    pcm, prompt, want = cases[clip]
    ids = list(want.token_ids)
    eos = ref.bundle.eos_token_ids
    other = next(t for t in range(ids[wrong_at] + 1, ids[wrong_at] + 50) if t not in eos and t not in ids)
    draft = ids[:wrong_at] + [other] + ids[wrong_at + 1:] + ids[:2]  # wrong at one id, and too long
    shim.logits(logits(prompt, draft))
    tok = ref.tokenizer
    # the one-pass decode after the kept ids and the next one (known from the logits run)
    shim.script(*runtime_script(tok, ids[wrong_at + 1:] + [tok.im_end]))
    engine = Qwen3ASREngine(board, backend="rk")
    pieces = []
    got = transcribe_one_pass(engine, pcm, TranscribeOptions(), work=NO_WORK, draft=draft, on_text=pieces.append)
    assert got.token_ids == want.token_ids and got.text == want.text and "".join(pieces) == want.text
    assert (got.stats.draft_tokens, got.stats.verified_tokens) == (len(draft), wrong_at)
    runs = shim.runs()
    assert len(runs) == 2
    assert same_bits(runs[0], rows_of(ref, prompt, draft))
    assert same_bits(runs[1], rows_of(ref, prompt, ids[:wrong_at + 1]))  # prompt + kept + next, then GENERATE
    assert runs_of_mode(shim, 2) == [f"run handle=0 mode=2 n_tokens={len(prompt) + len(draft)}"]
    assert runs_of_mode(shim, 0) == [f"run handle=0 mode=0 n_tokens={len(prompt) + wrong_at + 1}"]
    assert shim.calls.count("rkllm_clear_kv_cache keep_system_prompt=0") == 2  # before each run
    engine.close()
    assert shim.violations == []


def test_the_budget_ending_after_the_kept_ids_needs_no_generate_run(board, shim, oracle):
    """max_new_tokens 4 and a draft wrong at id 3: the draft is verified up to the budget's last
    id (3 ids), the fourth is the logits run's choice, and the budget ends there ("length"),
    as the step-by-step decode ends."""
    cases, logits, ref = oracle
    pcm, prompt, want = cases["en"]
    ids = list(want.token_ids)
    draft = ids[:3] + [ids[3] + 1] + ids[4:]
    shim.logits(logits(prompt, draft[:3]))
    shim.script(N(5, "x"))
    engine = Qwen3ASREngine(board, backend="rk")
    tokens, stats = engine.generate(prompt, DecodingOptions(max_new_tokens=4), draft=draft)
    assert tokens == ids[:4] and stats.finish_reason == "length"
    assert (stats.draft_tokens, stats.verified_tokens) == (3, 3)
    assert runs_of_mode(shim, 0) == [] and len(runs_of_mode(shim, 2)) == 1
    ref_tokens, ref_stats = ref.generate(prompt, DecodingOptions(max_new_tokens=4))
    assert ref_tokens == tokens and ref_stats.finish_reason == "length"
    engine.close()
    assert shim.violations == []


@pytest.mark.parametrize("fault, says", [({"logits_rows": 1}, "did not return logits for the last 8 input rows"),
                                         ({"logits_error": 1}, "GET_LOGITS) reported RKLLM_RUN_ERROR")])
def test_a_runtime_without_per_row_logits_turns_verification_off(board, shim, oracle, caplog, fault, says):
    """A runtime whose GET_LOGITS run returns only the last row, or fails: one warning, the
    decode made without the draft (the same ids), and no GET_LOGITS run after that."""
    cases, logits, ref = oracle
    pcm, prompt, want = cases["en"]
    draft = list(want.token_ids)
    shim.logits(logits(prompt, draft))
    shim.option(**fault)
    tok = ref.tokenizer
    engine = Qwen3ASREngine(board, backend="rk")
    for _ in range(2):
        shim.script(*runtime_script(tok, draft + [tok.im_end]))
        with caplog.at_level(logging.WARNING, logger="qwen3asr.backends.rk.backend"):
            got = transcribe_one_pass(engine, pcm, TranscribeOptions(), work=NO_WORK, draft=draft)
        assert got.token_ids == want.token_ids and got.stats.verified_tokens == 0
    warned = [r.getMessage() for r in caplog.records if "draft verification is off" in r.getMessage()]
    assert len(warned) == 1 and says in warned[0]
    assert len(runs_of_mode(shim, 2)) == 1 and len(runs_of_mode(shim, 0)) == 2
    assert engine.decoder.drafts is False
    # texts are then not scored either (qwen3asr.aligner.checked), unless the run only failed
    assert bool(engine.decoder.no_logits) == ("logits_rows" in fault)
    engine.close()
    assert shim.violations == []


def test_no_logits_run_when_drafts_are_off_or_not_greedy(board, shim, oracle):
    cases, logits, ref = oracle
    pcm, prompt, want = cases["en"]
    draft = list(want.token_ids)
    tok = ref.tokenizer
    engine = Qwen3ASREngine(board, backend="rk", rk=RKOptions(drafts=False))
    shim.script(*runtime_script(tok, draft + [tok.im_end]))
    got = transcribe_one_pass(engine, pcm, TranscribeOptions(), work=NO_WORK, draft=draft)
    assert got.token_ids == want.token_ids and got.stats.draft_tokens == 0
    assert runs_of_mode(shim, 2) == [] and shim.violations == []
    engine.close()
    dec = Qwen3ASREngine(board, backend="rk").decoder
    assert dec.drafts and dec._usable_draft(draft, DecodingOptions()) == draft
    assert dec._usable_draft(draft, DecodingOptions(max_new_tokens=4)) == draft[:3]  # never the budget's last id
    # the runtime applies its penalty to its own window of ids; sampling has nothing to verify
    assert dec._usable_draft(draft, DecodingOptions(repetition_penalty=1.1)) == []
    assert dec._usable_draft(draft, DecodingOptions(temperature=0.5)) == []
    dec.close()

    from qwen3asr.cli.common import backend_options_from_args
    from qwen3asr.cli.transcribe import build_parser

    args = build_parser().parse_args(["--audio", "x.wav", "--no-rk-drafts"])
    assert backend_options_from_args(args).rk.drafts is False
    assert backend_options_from_args(build_parser().parse_args(["--audio", "x.wav"])).rk.drafts is True
    with pytest.raises(ValueError, match="drafts"):
        RKOptions(drafts="no")


def test_on_token_stopping_inside_the_confirmed_ids(board, shim, oracle):
    cases, logits, ref = oracle
    pcm, prompt, want = cases["zh"]
    draft = list(want.token_ids)
    shim.logits(logits(prompt, draft))
    shim.script(N(5, "x"))
    engine = Qwen3ASREngine(board, backend="rk")
    seen = []
    tokens, stats = engine.generate(prompt, DecodingOptions(), on_token=lambda t: seen.append(t) or len(seen) < 3,
                                    draft=draft)
    assert tokens == draft[:3] == seen and stats.finish_reason == "stopped"
    assert runs_of_mode(shim, 0) == [] and len(runs_of_mode(shim, 2)) == 1
    engine.close()
    assert shim.violations == []


@pytest.mark.parametrize("clip", ["zh_3.wav", "zh_2.wav"])
def test_a_stream_final_pass_on_the_rk_backend_verifies_its_streamed_draft(board, shim, oracle, clip):
    """A command streamed in 2 s chunks with final passes, as Wyoming streams it: the ONNX
    engine's stream is recorded (its chunk's ids, its final pass's prompt and draft), the rk
    engine's chunk is scripted with the same ids, and its final pass (a GET_LOGITS run on the
    ONNX logits of the same rows, then a GENERATE run for the rest unless the draft was the whole
    text) gives the same final text. zh_3's draft is confirmed in part, zh_2's to its end."""
    cases, logits, ref = oracle
    pcm = prepare_audio(str(ROOT / "audio" / clip))
    runs, generate = [], ref.decoder.generate

    def spy(prompt_embeds, options, on_token=None, prefix_len=None, guard=None, **kw):
        out = generate(prompt_embeds, options, on_token, prefix_len=prefix_len, guard=guard, **kw)
        runs.append((np.array(prompt_embeds), list(kw.get("draft", ())), list(out[0]), out[1]))
        return out

    ref.decoder.generate = spy
    try:
        s = ref.create_stream(chunk_size=2.0, final_pass=True)
        s.feed_audio(pcm)
        want = s.finish()
    finally:
        del ref.decoder.generate
    assert len(runs) == 2 and runs[0][1] == [] and runs[1][1], [len(r[1]) for r in runs]
    chunk_ids, (prompt, draft, final_ids, final_stats) = runs[0][2], runs[1]
    kept = final_stats.verified_tokens
    whole = kept == len(final_ids)  # the draft was the whole text: no GENERATE run after the logits run
    assert whole == (clip == "zh_2.wav") and kept > 0

    tok = ref.tokenizer
    engine = Qwen3ASREngine(board, backend="rk")
    s = engine.create_stream(chunk_size=2.0, final_pass=True)
    shim.script(*runtime_script(tok, chunk_ids + [tok.im_end]))
    s.feed_audio(pcm)
    shim.logits(logits(prompt, draft))
    shim.script(*runtime_script(tok, (tok.encode("not this") if whole else final_ids[kept + 1:]) + [tok.im_end]))
    got = s.finish()
    assert got.text == want.text and got.text
    runs_rk = shim.runs()
    assert len(runs_rk) == (2 if whole else 3)  # the chunk, the logits run, the rest
    assert same_bits(runs_rk[1], rows_of(ref, prompt, draft))
    if not whole:
        assert same_bits(runs_rk[2], rows_of(ref, prompt, final_ids[:kept + 1]))
    assert len(runs_of_mode(shim, 2)) == 1 and len(runs_of_mode(shim, 0)) == (1 if whole else 2)
    engine.close()
    assert shim.violations == []


# ------------------------------------------------------------------ texts scored for the pieces at pauses

def test_each_text_the_pieces_check_reads_is_one_logits_run_of_the_prompt_and_the_text(board, shim, oracle):
    """word_spans="checked" (qwen3asr.aligner.checked) on the board: a text read from a piece's
    audio is one GET_LOGITS run of exactly the prompt (the piece's audio, the language given) and
    the text's embedding rows, its logits read back as the ONNX reader reads its own: the same
    log-likelihood and the same verdict on the greedy reading, with the end of text after it or
    as a prefix; the piece's greedy reading one GENERATE run of the same prompt."""
    from qwen3asr.aligner.checked import AsrReader

    cases, logits, ref = oracle
    pcm, _, want = cases["en"]
    emb = ref.encode(ref.features(pcm))
    prompt = ref.embed_prompt(ref.prompt(emb.shape[0], language="English"), emb)
    cpu = AsrReader(ref).piece(pcm, "English")
    engine = Qwen3ASREngine(board, backend="rk")
    reader = AsrReader(engine)
    read = reader.piece(pcm, "English")
    tok = ref.tokenizer
    # a text, one that begins it (read from the first run's rows), one that does not (a run of its own)
    for text, n_runs in ((want.text, 1), (" ".join(want.text.split()[:-1]), 1), ("", 1), ("please " + want.text, 2)):
        ids = tok.encode(text) if text else []
        shim.logits(logits(prompt, ids))
        for end in (True, False):  # a piece's text, and the start of the audio after a boundary (a prefix)
            got, expected = read(text, end=end), cpu(text, end=end)
            assert got.exact == expected.exact
            assert abs(got.log_p - expected.log_p) < 1e-3 * max(1.0, abs(expected.log_p))
        assert len(runs_of_mode(shim, 2)) == n_runs == reader.runs
        if text:
            assert same_bits(shim.runs()[-1], rows_of(ref, prompt, tok.encode(text if n_runs == 2 else want.text)))
    assert runs_of_mode(shim, 0) == []
    # the piece's greedy reading: one GENERATE run of the same prompt, what the runtime says decoded
    shim.script(*runtime_script(tok, tok.encode(want.text) + [tok.im_end]))
    assert read.heard(64) == cpu.heard(64) == want.text and reader.decodes == 1
    assert len(runs_of_mode(shim, 0)) == 1 and same_bits(shim.runs()[-1], prompt)
    engine.close()
    assert shim.violations == []


def test_a_runtime_without_per_row_logits_leaves_the_pieces_their_default_words(board, shim, oracle, caplog):
    """A runtime whose GET_LOGITS run returns only the last row: the pieces keep the words the
    default gave them, with a warning naming why, and no alignment is run again."""
    from qwen3asr.aligner.checked import AsrReader, checked_pieces
    from qwen3asr.aligner.refine import Levels, pieces_at_pauses
    from qwen3asr.results import Word

    cases, logits, ref = oracle
    a = cases["en"][0]
    pcm = np.concatenate([a, np.zeros(16000, np.float32), a])
    levels = Levels.of(pcm, 0.0)
    pieces = pieces_at_pauses(levels)
    assert len(pieces) == 2
    words = (Word("open", 0.1, 0.3), Word("door", 0.3, 0.6), Word("open", 2.6, 2.9))
    shim.option(logits_rows=1)
    shim.logits(np.zeros((2, ref.bundle.text_config["vocab_size"]), np.float32))

    class NoAligner:
        def align(self, *args, **kw):
            raise AssertionError("aligned again")

    engine = Qwen3ASREngine(board, backend="rk")
    with caplog.at_level(logging.WARNING, logger="qwen3asr.aligner.checked"):
        for _ in range(2):  # the second segment makes no run: the decoder knows
            got = checked_pieces(NoAligner(), pcm, words, [2, 1], "English", levels, pieces, AsrReader(engine))
            assert got == words
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2 and all("could not check" in w and "did not return logits" in w for w in warned)
    assert len(runs_of_mode(shim, 2)) == 1 and engine.decoder.no_logits
    engine.close()
