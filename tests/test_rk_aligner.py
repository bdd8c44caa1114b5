"""The forced aligner with backend="rk" on x86, with test doubles for the NPU parts only.

- librkllmrt.so: the C double tests/c/fake_rkllm.c behind the capture shim (doubles/rkllm_c.py).
  In GET_LAST_HIDDEN_LAYER mode it returns ``hidden_of(x)`` for the EMBED input x (pre-norm
  rows) or the final RMSNorm of it (post-norm rows, ``Fake.hidden_norm``), and the shim keeps
  x, so every slot logit can be recomputed here as head(norm(hidden_of(x)))[rows].
- rknnlite: doubles.rknnlite.BoardRKNNLite, computing with ONNX Runtime on the bundle's graphs, so
  the rk path's input embeddings can be compared bit for bit with the ONNX aligner's.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the encoder double runs the ONNX graphs")
pytest.importorskip("torch", reason="the random aligner checkpoints are built with the official code (torch)")
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

import bundles  # noqa: E402
from qwen3asr import BundleError, Qwen3ASREngine, RKOptions  # noqa: E402
from qwen3asr.aligner import AlignmentError, ForcedAligner  # noqa: E402
from qwen3asr.backends import BackendOptions, create_aligner_backend  # noqa: E402
from qwen3asr.backends.rk import aligner as rk_aligner  # noqa: E402
from qwen3asr.backends.rk import backend as rk_backend  # noqa: E402
from qwen3asr.backends.rk import rkllm  # noqa: E402
from qwen3asr.bundle import Bundle  # noqa: E402
from doubles import rkllm_c, rknnlite  # noqa: E402
from doubles.rkllm_c import F, N, Shim, hidden_of  # noqa: E402
from doubles.rknnlite import BoardRKNNLite, add_rk_section  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EN = str(ROOT / "audio" / "en_1.wav")
ZH = str(ROOT / "audio" / "zh_1.wav")
SOC = "rk3588"
HIDDEN = 96  # fa-tiny-a and tiny-a
CASES = (("open the back door, please! It's 2026.", "English", EN), ("把客厅的灯打开 ok", "Chinese", ZH))


@pytest.fixture(scope="session")
def build_lib(tmp_path_factory):
    return rkllm_c.Builds(tmp_path_factory.mktemp("fake_rkllm_aligner")).capturing


@pytest.fixture
def fake_rknnlite(monkeypatch):
    rknnlite.install(monkeypatch, BoardRKNNLite)
    BoardRKNNLite.reset(expected_mask=7)
    yield BoardRKNNLite
    assert BoardRKNNLite.violations == []


@pytest.fixture(scope="module")
def base_aligner():
    return bundles.aligner_bundle("fa-tiny-a", decoders=("fp32",))[1]


@pytest.fixture
def aligner_dir(base_aligner, tmp_path, fake_rknnlite):
    d = str(tmp_path / "aligner")
    shutil.copytree(base_aligner, d)
    add_rk_section(d, SOC)
    return d


def decoder_file(bundle_dir: str) -> str:
    return os.path.join(bundle_dir, "rk", f"decoder_{SOC}_w8a8.rkllm")


@pytest.fixture(params=["1.2", "1.3"])
def shim(request, build_lib, monkeypatch):
    path = build_lib(request.param)
    monkeypatch.setenv(rkllm.ENV_LIB, path)
    monkeypatch.delenv(rkllm.ENV_ABI, raising=False)
    monkeypatch.delenv(rk_aligner.ENV_HIDDEN_NORM, raising=False)
    monkeypatch.setenv(rk_backend.ENV_SOC, SOC)
    s = Shim(path, hidden=HIDDEN)
    s.abi = request.param
    s.option(embd_size=HIDDEN)
    return s


def expect_aligner(shim, bundle_dir: str, max_context: int = 1024) -> None:
    """What the aligner's handle must get: its model file, no sampling, one token, hidden-state
    mode on a cleared cache, the board settings."""
    fields = dict(mode=1, keep_history=0, keep_system_prompt=0, max_context_len=max_context, max_new_tokens=1,
                  top_k=1, repeat_penalty=1.0, base_domain_id=1, embed_flash=1, n_batch=1, use_cross_attn=0,
                  is_async=0)
    if shim.abi == "1.3":
        fields["run_max_new_tokens"] = 1
    shim.expect_for(decoder_file(bundle_dir), **fields)


def head_and_norm(bundle_dir: str):
    man = json.load(open(os.path.join(bundle_dir, "model.json")))["aligner"]
    head = np.load(os.path.join(bundle_dir, man["head"]["file"])).astype(np.float64)
    norm = np.load(os.path.join(bundle_dir, man["norm"]["file"])).astype(np.float64)
    return head, norm, float(man["norm"]["eps"])


def expected_logits(bundle_dir: str, embeds: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """head(norm(hidden_of(embeds)))[rows] in float64, from the bundle's files."""
    head, w, eps = head_and_norm(bundle_dir)
    h = hidden_of(embeds).astype(np.float64)[rows]
    normed = w * h / np.sqrt((h * h).mean(axis=1, keepdims=True) + eps)
    return normed @ head.T


class ReferenceScorer:
    """What the rk path must compute with the C double, in float64 (the SlotScorer seam)."""

    name = "reference"

    def __init__(self, bundle_dir: str, max_positions: int):
        self.bundle_dir, self.max_positions = bundle_dir, max_positions

    def score(self, embeds, rows):
        return expected_logits(self.bundle_dir, embeds, rows).astype(np.float32)

    def close(self):
        pass


class CapturingScorer:
    """Wraps the ONNX aligner's scorer and keeps the input it is handed."""

    def __init__(self, inner):
        self.inner, self.name, self.max_positions = inner, inner.name, inner.max_positions
        self.calls = []

    def score(self, embeds, rows):
        self.calls.append((np.array(embeds), np.array(rows)))
        return self.inner.score(embeds, rows)

    def close(self):
        self.inner.close()


# ------------------------------------------------------------------------ slot logits

@pytest.mark.parametrize("norm", ["pre", "post"])
def test_slot_logits_are_the_head_of_the_normalised_states(aligner_dir, shim, fake_rknnlite, norm, caplog):
    """Pre-norm rows are normalised on the host, post-norm rows are not normalised twice: both
    give head(norm(f(x)))[rows] for the very input the ONNX aligner scores."""
    _, w, eps = head_and_norm(aligner_dir)
    if norm == "post":
        shim.hidden_norm(w, eps)
    expect_aligner(shim, aligner_dir)
    onnx = ForcedAligner(aligner_dir, backend="onnx", options=BackendOptions(decoder_dtype="fp32"))
    onnx.scorer = CapturingScorer(onnx.scorer)
    caplog.set_level(logging.INFO, logger="qwen3asr.backends.rk.aligner")
    with ForcedAligner(aligner_dir, backend="rk") as al:
        assert al.backend == "rk" and al.scorer.soc == SOC and al.scorer.runtime.abi == shim.abi
        assert al.scorer.max_positions == 1023
        for text, lang, audio in CASES:
            layout, logits = al.slot_logits(audio, text, lang)
            ref_layout, ref_logits = onnx.slot_logits(audio, text, lang)
            embeds, rows = onnx.scorer.calls[-1]
            # the rk path fed the runtime the ONNX aligner's input, bit for bit
            got = shim.embeds()
            assert got.shape == embeds.shape and np.array_equal(got.view(np.uint32), embeds.view(np.uint32))
            assert layout.words == ref_layout.words and logits.shape == ref_logits.shape == (len(rows), al.classes)
            assert logits.dtype == np.float32
            np.testing.assert_allclose(logits, expected_logits(aligner_dir, embeds, rows), rtol=1e-4, atol=1e-4)
            assert al.scorer.last_norm.found == norm
    onnx.close()
    assert shim.violations == []
    runs = [e for e in shim.lines("EVENT") if e.startswith("run ")]
    assert runs == [f"run handle=0 mode=1 n_tokens={len(c[0])}" for c in onnx.scorer.calls]
    calls = shim.calls
    assert calls.count("rkllm_clear_kv_cache keep_system_prompt=0") == calls.count("rkllm_run") == len(CASES)
    assert calls[-1] == "rkllm_destroy"
    found = [r.getMessage() for r in caplog.records if "RKLLM hidden states" in r.getMessage()]
    assert len(found) == 1 and f"({norm}-norm)" in found[0]  # logged once, with what was found


def test_align_gives_the_words(aligner_dir, shim, fake_rknnlite):
    """align() on the rk path equals the aligner's own orchestration over the reference scorer,
    with the official times and with the times between the bins."""
    expect_aligner(shim, aligner_dir)
    ref = ForcedAligner(aligner_dir, backend="onnx", options=BackendOptions(decoder_dtype="fp32"))
    ref.scorer = ReferenceScorer(aligner_dir, ref.scorer.max_positions)
    with ForcedAligner(aligner_dir, backend="rk") as al:
        for text, lang, audio in CASES:
            words = al.align(audio, text, lang, offset=1.5)
            assert words == ref.align(audio, text, lang, offset=1.5)
            # the times between the bins (every span but "raw") from the board's logits (host head)
            assert al.align(audio, text, lang, offset=1.5, between_bins=True) == \
                ref.align(audio, text, lang, offset=1.5, between_bins=True)
            assert [w.word for w in words] == list(al.slot_logits(audio, text, lang)[0].words)
            assert all(1.5 <= w.start <= w.end for w in words)
        assert al.align(EN, "", "English") == ()
    ref.close()
    assert shim.violations == []


def test_the_engine_transcribes_and_aligns_on_two_rkllm_handles(aligner_dir, shim, fake_rknnlite, tmp_path):
    """Qwen3ASREngine(backend="rk", aligner=...): the ASR decoder (GENERATE) and the aligner
    (GET_LAST_HIDDEN_LAYER) are two handles of one librkllmrt in one process, both alive."""
    asr_dir = str(tmp_path / "asr")
    shutil.copytree(bundles.bundle("tiny-a", "bfloat16")[1], asr_dir)
    add_rk_section(asr_dir, SOC)
    expect_aligner(shim, aligner_dir)
    shim.expect_for(decoder_file(asr_dir), mode=0, max_new_tokens=256, keep_history=0)
    engine = Qwen3ASREngine(asr_dir, backend="rk", aligner=aligner_dir)
    tok = engine.tokenizer
    ids = tok.encode("language English") + [tok.asr_text] + tok.encode("open the back door")
    shim.script(*[N(t, tok.token_bytes(t, True).decode()) for t in ids + [tok.im_end]], F())
    res = engine.transcribe(EN, word_timestamps=True, word_spans="raw")  # the official times: one aligner run
    assert (res.text, res.language) == ("open the back door", "English")
    assert engine.aligner.backend == "rk"
    ref = ForcedAligner(aligner_dir, backend="onnx", options=BackendOptions(decoder_dtype="fp32"))
    ref.scorer = ReferenceScorer(aligner_dir, ref.scorer.max_positions)
    assert res.words == ref.align(EN, "open the back door", "English")
    assert [w.word for w in res.words] == ["open", "the", "back", "door"]
    ref.close()
    # a second request: both handles are reused, each run on its own handle
    assert engine.transcribe(EN, word_timestamps=True, word_spans="raw").words == res.words
    events = shim.lines("EVENT")
    assert [e for e in events if e.startswith("init ")] == [
        f"init handle=0 model={decoder_file(asr_dir)} live=1", f"init handle=1 model={decoder_file(aligner_dir)} live=2"]
    assert [e for e in events if e.startswith("run ")] == [
        f"run handle=0 mode=0 n_tokens={n}" if h == 0 else f"run handle=1 mode=1 n_tokens={n}"
        for h, n in _runs(events)]
    assert [h for h, _ in _runs(events)] == [0, 1, 0, 1]
    engine.close()
    assert shim.calls.count("rkllm_destroy") == 2
    assert shim.violations == []


@pytest.mark.slow
def test_ten_minutes_on_the_board_path_get_monotonic_words(aligner_dir, shim, fake_rknnlite, tmp_path):
    """Issue 35 item 4 on the board path: ten minutes through the RKNN encoder double, the RKLLM C
    double (every decoder run says "open the back door") and Silero VAD segments. The doubles'
    aligner is no trained model (hidden_of is a fixed map), so its words often collapse: they are
    aligned again or flagged, and in every case in order, inside their segments and the audio."""
    from long_audio import LONG_SECONDS, check_long, ten_minutes

    asr_dir = str(tmp_path / "asr")
    shutil.copytree(bundles.bundle("tiny-a", "bfloat16")[1], asr_dir)
    add_rk_section(asr_dir, SOC)
    expect_aligner(shim, aligner_dir)
    shim.expect_for(decoder_file(asr_dir), mode=0, max_new_tokens=256, keep_history=0)
    with Qwen3ASREngine(asr_dir, backend="rk", aligner=aligner_dir) as engine:
        tok = engine.tokenizer
        ids = tok.encode("language English") + [tok.asr_text] + tok.encode("open the back door")
        shim.script(*[N(t, tok.token_bytes(t, True).decode()) for t in ids + [tok.im_end]], F())
        r = engine.transcribe(ten_minutes(), word_timestamps=True, vad=True)
        assert engine.aligner.backend == "rk"
        assert r.stats.audio_seconds == LONG_SECONDS and len(r.segments) >= 100
        assert all([w.word for w in s.words] == ["open", "the", "back", "door"] for s in r.segments)
        check_long(r, engine.aligner.segment_ms / 1000)
    assert shim.violations == []


def _runs(events):
    out = []
    for e in events:
        if e.startswith("run handle="):
            parts = dict(p.split("=") for p in e[4:].split())
            out.append((int(parts["handle"]), int(parts["n_tokens"])))
    return out


def test_the_asr_model_and_the_aligner_choose_their_backend_alike(aligner_dir, shim, fake_rknnlite, tmp_path,
                                                                   monkeypatch, caplog):
    """create_backend and create_aligner_backend share one choice: for each situation of a
    machine, backend="auto" picks the same backend for both, with the same log lines (naming the
    part), and backend="rk" / an unknown name fail with the same error."""
    import sys

    from qwen3asr.backends.rk import soc as soc_mod

    asr_dir = str(tmp_path / "asr")
    shutil.copytree(bundles.bundle("tiny-a", "bfloat16")[1], asr_dir)
    add_rk_section(asr_dir, SOC)
    expect_aligner(shim, aligner_dir)
    shim.expect_for(decoder_file(asr_dir), mode=0, max_new_tokens=256, keep_history=0)
    monkeypatch.delenv(rk_backend.ENV_SOC, raising=False)

    def not_a_board(*a):
        raise RuntimeError("not a Rockchip board")

    def choices(backend="auto"):
        """(backend the ASR model took, its log lines), (the same for the aligner)."""
        out = []
        for part, load in (("the ASR model", lambda: Qwen3ASREngine(asr_dir, backend=backend)),
                           ("the aligner", lambda: ForcedAligner(aligner_dir, backend=backend))):
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="qwen3asr.backends"):
                loaded = load()
            loaded.close()
            lines = [r.getMessage().replace(part, "PART") for r in caplog.records if r.name == "qwen3asr.backends"]
            out.append((loaded.backend, lines))
        return out

    monkeypatch.setattr(soc_mod, "detect_soc", not_a_board)
    asr, al = choices()
    assert asr == al == ("onnx", [])  # not a board: the CPU, nothing to say
    monkeypatch.setattr(soc_mod, "detect_soc", lambda *a: "rk3576")
    asr, al = choices()
    assert asr == al and asr[0] == "onnx" and "rk3576 board found but the bundle has no RKLLM decoder" in asr[1][0]
    monkeypatch.setattr(soc_mod, "detect_soc", lambda *a: SOC)
    assert choices() == [("rk", []), ("rk", [])]
    assert choices("onnx") == [("onnx", []), ("onnx", [])]
    with monkeypatch.context() as m:  # no rknn-toolkit-lite2
        m.setitem(sys.modules, "rknnlite", None)
        asr, al = choices()
    assert asr == al and asr[0] == "onnx"
    assert asr[1] == [f"{SOC} board found but rknn-toolkit-lite2 is not installed (pip install "
                      "'rknn-toolkit-lite2>=2.3'; deploy/setup_board.sh does it); using the CPU backend (ONNX "
                      "Runtime) for PART"]
    monkeypatch.setenv(rkllm.ENV_LIB, str(tmp_path / "librkllmrt.so"))  # the NPU backend cannot start
    asr, al = choices()
    assert asr == al and asr[0] == "onnx" and len(asr[1]) == 1
    assert asr[1][0].startswith(f"the NPU backend cannot start on this {SOC} board (")
    assert "librkllmrt.so" in asr[1][0] and asr[1][0].endswith("using the CPU backend (ONNX Runtime) for PART. "
                                                                "backend='rk' reports this as an error.")
    monkeypatch.setenv(rk_backend.ENV_SOC, SOC)  # backend="rk" does not detect the board
    errors = []
    for backend in ("rk", "npu"):
        for load in (lambda: Qwen3ASREngine(asr_dir, backend=backend),
                     lambda: ForcedAligner(aligner_dir, backend=backend)):
            with pytest.raises((rkllm.RKLLMError, ValueError)) as info:
                load()
            errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1] and errors[0][0] is rkllm.RKLLMError
    assert errors[2] == errors[3] == (ValueError, "unknown backend 'npu'; choose one of auto, onnx, rk")
    assert all(m.state == "released" for m in fake_rknnlite.instances)
    assert shim.violations == []


# ------------------------------------------------------------------------ norm detection

def test_norm_detection_rules():
    rng = np.random.default_rng(0)
    w = (1 + 0.2 * rng.standard_normal(64)).astype(np.float32)
    pre = (8 * rng.standard_normal((50, 64))).astype(np.float32)
    post = rk_aligner.rms_norm(pre, w, 1e-6)
    assert rk_aligner.check_norm(post, w).found == "post"
    assert rk_aligner.check_norm(post, w).median_rms == pytest.approx(1.0, abs=1e-5)
    assert rk_aligner.check_norm(pre, w).found == "pre"
    # quantised-NPU-like noise of 0.5 % on post-norm rows still reads as post-norm
    noisy = post * (1 + 0.005 * rng.standard_normal(post.shape)).astype(np.float32)
    assert rk_aligner.check_norm(noisy, w).found == "post"
    mixed = np.concatenate([pre[:25], post[25:]])
    with pytest.raises(rk_backend.RKBackendError, match=r"cannot tell whether the RKLLM hidden states are before or "
                                                        r"after the final norm: 50% of 50 rows.*QWEN3ASR_RK_HIDDEN_NORM"):
        rk_aligner.check_norm(mixed, w)
    with pytest.raises(rk_backend.RKBackendError, match="norm weight is all zeros"):
        rk_aligner.check_norm(pre, np.zeros(64, np.float32))


@pytest.mark.parametrize("forced", ["pre", "post"])
def test_the_norm_can_be_forced(aligner_dir, shim, fake_rknnlite, monkeypatch, forced):
    """$QWEN3ASR_RK_HIDDEN_NORM skips the detection: forcing the wrong one gives other logits."""
    monkeypatch.setenv(rk_aligner.ENV_HIDDEN_NORM, forced)
    expect_aligner(shim, aligner_dir)  # the double returns pre-norm rows
    onnx = ForcedAligner(aligner_dir, backend="onnx", options=BackendOptions(decoder_dtype="fp32"))
    onnx.scorer = CapturingScorer(onnx.scorer)
    onnx.slot_logits(EN, *CASES[0][:2])
    embeds, rows = onnx.scorer.calls[-1]
    onnx.close()
    with ForcedAligner(aligner_dir, backend="rk") as al:
        _, logits = al.slot_logits(EN, *CASES[0][:2])
        assert al.scorer.last_norm is None and al.scorer.norm_mode == forced
    ok = np.allclose(logits, expected_logits(aligner_dir, embeds, rows), rtol=1e-4, atol=1e-4)
    assert ok == (forced == "pre")
    monkeypatch.setenv(rk_aligner.ENV_HIDDEN_NORM, "sometimes")
    with pytest.raises(ValueError, match="QWEN3ASR_RK_HIDDEN_NORM must be one of auto, pre, post"):
        ForcedAligner(aligner_dir, backend="rk")


def test_a_bfloat16_head_is_widened(aligner_dir):
    b = Bundle.load(aligner_dir)
    head, norm, eps = rk_aligner.load_head(b)
    bits = (head.view(np.uint32) >> 16).astype(np.uint16)
    np.save(os.path.join(aligner_dir, "aligner_head.npy"), bits)
    man = json.load(open(os.path.join(aligner_dir, "model.json")))
    man["aligner"]["head"]["dtype"] = "bfloat16"
    json.dump(man, open(os.path.join(aligner_dir, "model.json"), "w"))
    widened, _, _ = rk_aligner.load_head(Bundle.load(aligner_dir))
    assert widened.dtype == np.float32 and widened.shape == head.shape
    assert np.array_equal(widened.view(np.uint32), bits.astype(np.uint32) << 16)
    assert np.abs(widened - head).max() <= np.abs(head).max() * 2 ** -7


# ------------------------------------------------------------------------ errors

def test_rkllm_errors_reach_the_caller(aligner_dir, shim, fake_rknnlite):
    expect_aligner(shim, aligner_dir)
    with ForcedAligner(aligner_dir, backend="rk") as al:
        shim.option(hidden_rows=10)
        with pytest.raises(rkllm.RKLLMRunError, match=r"hidden states of 10 x 96 \(rows x width\), not the \d+ x 96 "
                                                      r"of the input: the runtime did not return a row for every"):
            al.align(EN, "open the door", "English")
        shim.option(hidden_rows=0)
        with pytest.raises(rkllm.RKLLMRunError, match="returned no hidden states"):
            al.align(EN, "open the door", "English")
        shim.option(hidden_rows=-1, run_rc=-3)
        with pytest.raises(rkllm.RKLLMRunError, match=r"rkllm_run \(GET_LAST_HIDDEN_LAYER\) failed with code -3"):
            al.align(EN, "open the door", "English")
        shim.option(run_rc=0)
        assert len(al.align(EN, "open the door", "English")) == 3  # still usable
    assert shim.violations == []


def test_context_of_the_conversion_bounds_one_pass(base_aligner, tmp_path, shim, fake_rknnlite):
    d = str(tmp_path / "aligner")
    shutil.copytree(base_aligner, d)
    add_rk_section(d, SOC, max_context=32)
    expect_aligner(shim, d, max_context=32)
    with ForcedAligner(d, backend="rk") as al:
        assert al.scorer.max_positions == 31
        with pytest.raises(AlignmentError, match="aligner positions, over its 31; align shorter pieces"):
            al.align(EN, "open the back door, please", "English")
    assert "rkllm_run" not in shim.calls
    with pytest.raises(ValueError, match="max_context=64 is over the 32 tokens the aligner's RKLLM model was "
                                         "converted for"):
        ForcedAligner(d, backend="rk", options=BackendOptions(rk=RKOptions(max_context=64)))


def test_a_4_gb_board_runs_the_aligner_at_1024_positions(base_aligner, tmp_path, shim, fake_rknnlite, monkeypatch):
    """The small-board default of the ASR decoder (test_rk_backend) holds for the aligner's handle:
    1024 positions, and the engine then cuts word requests to 27 s pieces (piece_seconds)."""
    from qwen3asr.backends.rk import backend as rk_backend

    d = str(tmp_path / "aligner")
    shutil.copytree(base_aligner, d)
    add_rk_section(d, SOC, max_context=2048)
    monkeypatch.setattr(rk_backend, "board_ram_bytes", lambda: 3_900_000_000)
    expect_aligner(shim, d, max_context=1024)
    with ForcedAligner(d, backend="rk") as al:
        assert al.scorer.max_positions == 1023 and al.piece_seconds == 27.0
        assert len(al.align(EN, "open the door", "English")) == 3
    assert shim.violations == []


def test_missing_files(aligner_dir, shim, fake_rknnlite):
    os.remove(os.path.join(aligner_dir, "aligner_head.npy"))
    with pytest.raises(BundleError, match=r"aligner head missing: .*aligner_head\.npy\. Re-export the bundle"):
        ForcedAligner(aligner_dir, backend="rk")
    os.remove(decoder_file(aligner_dir))
    with pytest.raises(BundleError, match=r"RKLLM decoder for rk3588 missing: .*Copy it .*export_rkllm.py --target "
                                          r"rk3588"):
        ForcedAligner(aligner_dir, backend="rk")
    assert not fake_rknnlite.instances  # nothing loaded before the files were checked


def test_no_rk_models(base_aligner, shim, fake_rknnlite, tmp_path):
    with pytest.raises(rk_backend.RKBackendError, match=r'no "rk" section.*scripts/onnx2rknn.py.*export_rkllm.py'):
        ForcedAligner(base_aligner, backend="rk")
    d = str(tmp_path / "a")
    shutil.copytree(base_aligner, d)
    add_rk_section(d, SOC)
    with pytest.raises(rk_backend.RKBackendError, match=r"no RKLLM decoder for rk3576 \(it has: rk3588\)"):
        ForcedAligner(d, backend="rk", options=BackendOptions(rk=RKOptions(soc="rk3576")))


def test_missing_runtime_frees_the_encoder(aligner_dir, shim, fake_rknnlite, monkeypatch, tmp_path):
    monkeypatch.setenv(rkllm.ENV_LIB, str(tmp_path / "librkllmrt.so"))
    with pytest.raises(rkllm.RKLLMError, match="not a file.*airockchip/rknn-llm"):
        ForcedAligner(aligner_dir, backend="rk")
    assert fake_rknnlite.instances and all(m.state == "released" for m in fake_rknnlite.instances)


def test_auto_takes_the_npu_on_a_board(aligner_dir, shim, fake_rknnlite, monkeypatch):
    from qwen3asr.backends.rk import soc

    monkeypatch.delenv(rk_backend.ENV_SOC, raising=False)
    monkeypatch.setattr(soc, "detect_soc", lambda *a: SOC)
    expect_aligner(shim, aligner_dir)
    loaded = create_aligner_backend("auto", Bundle.load(aligner_dir))
    assert (loaded.name, loaded.soc) == ("rk", SOC)
    loaded.close()
    assert shim.violations == []
