"""Silero VAD wrapper, offline segmentation and streaming detector on real (synthetic) speech."""

import dataclasses
import io
import math
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

from qwen3asr import vad
from qwen3asr.vad import (
    SAMPLE_RATE,
    WINDOW_SAMPLES,
    SileroVAD,
    SpeechEnd,
    SpeechSegment,
    SpeechStart,
    VADOptions,
    VADStream,
    segments_from_probabilities,
    speech_segments,
)

EN_TEXT = "The quick brown fox jumps over the lazy dog near the river bank."
ZH_TEXT = "今天天气很好，我们一起去公园散步吧。"
TOLERANCE_S = 0.3  # allowed distance between a found and a true speech boundary


def _model_or_skip() -> SileroVAD:
    try:
        return SileroVAD()
    except FileNotFoundError as exc:
        pytest.skip(f"Silero VAD model not installed: {exc}")


@pytest.fixture(scope="module")
def model() -> SileroVAD:
    return _model_or_skip()


def _say(text: str, voice: str) -> np.ndarray:
    """espeak-ng speech at 16 kHz, float32, with espeak's own leading/trailing silence cut off."""
    soundfile = pytest.importorskip("soundfile")
    soxr = pytest.importorskip("soxr")
    wav = subprocess.run(["espeak-ng", "-v", voice, "--stdout", text], check=True, capture_output=True).stdout
    pcm, rate = soundfile.read(io.BytesIO(wav), dtype="float32")
    pcm = soxr.resample(pcm, rate, SAMPLE_RATE).astype(np.float32)
    loud = np.nonzero(np.abs(pcm) > 0.01)[0]
    return pcm[loud[0] : loud[-1] + 1]


@pytest.fixture(scope="module")
def speech():
    """1 s silence + English + 2 s silence + Mandarin + 1 s silence; returns (pcm, [(start_s, end_s)] of speech)."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed (apt-get install -y espeak-ng)")
    en = _say(EN_TEXT, "en")
    zh = _say(ZH_TEXT, "cmn")
    parts, truth, pos = [], [], 0
    for silence_s, utterance in ((1.0, en), (2.0, zh), (1.0, None)):
        parts.append(np.zeros(int(silence_s * SAMPLE_RATE), dtype=np.float32))
        pos += len(parts[-1])
        if utterance is not None:
            parts.append(utterance)
            truth.append((pos / SAMPLE_RATE, (pos + len(utterance)) / SAMPLE_RATE))
            pos += len(utterance)
    return np.concatenate(parts), truth


def _to_samples(segments):
    return [(round(s.start_s * SAMPLE_RATE), round(s.end_s * SAMPLE_RATE)) for s in segments]


def _events_to_pairs(events):
    kinds = [type(e) for e in events]
    assert kinds == [SpeechStart, SpeechEnd] * (len(events) // 2), f"events do not alternate: {events}"
    return [(events[i].sample, events[i + 1].sample) for i in range(0, len(events), 2)]


def _stream(model, pcm, chunk_sizes, options=VADOptions()):
    stream = VADStream(options, model=model)
    events, pos, i = [], 0, 0
    while pos < len(pcm):
        n = chunk_sizes[i % len(chunk_sizes)]
        events.extend(stream.process(pcm[pos : pos + n]))
        pos += n
        i += 1
    events.extend(stream.flush())
    assert stream.samples_seen == len(pcm)
    return events


# --- the model -----------------------------------------------------------------------------------


def test_model_file_found_in_package():
    path = vad.find_model()
    assert path.endswith("silero_vad.onnx")


def test_missing_model_path_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps silero-vad"):
        SileroVAD(tmp_path / "nothere.onnx")


def test_model_takes_explicit_path(model, speech, tmp_path):
    """An explicit path is used: a copy of the packaged model works like it, and a broken file or
    another ONNX model at that path is refused by name (so it is that file that gets loaded)."""
    pcm = speech[0][:SAMPLE_RATE * 3]
    copy = tmp_path / "silero_copy.onnx"
    shutil.copyfile(model.model_path, copy)
    other = SileroVAD(copy)
    assert other.model_path == str(copy) != model.model_path
    model.reset()
    assert np.array_equal(other.probabilities(pcm), model.probabilities(pcm))
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(pathlib.Path(model.model_path).read_bytes()[:1000])
    with pytest.raises(RuntimeError, match=r"broken\.onnx is not a readable ONNX model"):
        SileroVAD(broken)
    foreign = tmp_path / "identity.onnx"  # any other ONNX graph: one Identity node
    onnx = pytest.importorskip("onnx")
    node = onnx.helper.make_node("Identity", ["x"], ["y"])
    graph = onnx.helper.make_graph([node], "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]), str(foreign))
    with pytest.raises(RuntimeError, match=r"identity\.onnx is not the Silero VAD v5 model"):
        SileroVAD(foreign)


def test_window_probabilities_on_speech_and_silence(model, speech):
    pcm, truth = speech
    probs = model.probabilities(pcm)
    assert probs.shape == (math.ceil(len(pcm) / WINDOW_SAMPLES),) and probs.dtype == np.float32
    t = (np.arange(len(probs)) * WINDOW_SAMPLES + WINDOW_SAMPLES / 2) / SAMPLE_RATE
    # With the 64-sample context the model is confident; without it, it outputs ~0 everywhere.
    assert probs[(t > 0.1) & (t < 0.9)].max() < 0.1
    en_start, en_end = truth[0]
    assert np.median(probs[(t > en_start + 0.3) & (t < en_end - 0.3)]) > 0.9


def test_call_and_reset_are_deterministic(model, speech):
    pcm, _ = speech
    windows = [pcm[i : i + WINDOW_SAMPLES] for i in range(16000, 16000 + 20 * WINDOW_SAMPLES, WINDOW_SAMPLES)]
    model.reset()
    first = [model(w) for w in windows]
    model.reset()
    second = [model(w) for w in windows]
    assert first == second
    assert max(first) > 0.5


def test_window_validation(model):
    with pytest.raises(ValueError, match=r"\(512,\) float32 window"):
        model(np.zeros(480, dtype=np.float32))
    with pytest.raises(ValueError, match=r"dtype float64"):
        model(np.zeros(512))


def test_matches_official_onnx_wrapper(model, speech):
    """Same probabilities as silero's own OnnxWrapper (needs torch; only the oracle uses it)."""
    torch = pytest.importorskip("torch")
    utils_vad = pytest.importorskip("silero_vad.utils_vad")
    pcm, _ = speech
    official = utils_vad.OnnxWrapper(model.model_path, force_onnx_cpu=True)
    ref = official.audio_forward(torch.from_numpy(pcm), SAMPLE_RATE).numpy()[0]
    ours = model.probabilities(pcm)
    np.testing.assert_allclose(ours, ref, atol=1e-5)


# --- options -------------------------------------------------------------------------------------


def test_options_defaults():
    o = VADOptions()
    assert (o.threshold, o.min_speech_ms, o.min_silence_ms, o.speech_pad_ms) == (0.5, 250.0, 100.0, 30.0)
    assert o.max_speech_s == math.inf
    assert o.effective_neg_threshold == pytest.approx(0.35)
    assert dataclasses.replace(o, threshold=0.7).effective_neg_threshold == pytest.approx(0.55)
    assert VADOptions(threshold=0.1).effective_neg_threshold == 0.01
    assert VADOptions(neg_threshold=0.2).effective_neg_threshold == 0.2


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"threshold": 1.5}, r"threshold must be in \(0, 1\), got 1.5"),
        ({"neg_threshold": 0.6}, r"neg_threshold must be in \(0, threshold=0.5\]"),
        ({"min_speech_ms": -1}, r"min_speech_ms must be a finite number >= 0, got -1"),
        ({"min_silence_ms": math.nan}, r"min_silence_ms must be a finite number >= 0"),
        ({"speech_pad_ms": math.inf}, r"speech_pad_ms must be a finite number >= 0"),
        ({"max_speech_s": 0.05}, r"max_speech_s must exceed one window plus twice the padding \(0.092 s\)"),
    ],
)
def test_options_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        VADOptions(**kwargs)


def test_options_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        VADOptions().threshold = 0.3


# --- input validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pcm, rate, message",
    [
        (np.zeros(1600, dtype=np.float32), 8000, r"needs 16000 Hz audio, got 8000 Hz"),
        (np.zeros(1600, dtype=np.int16), SAMPLE_RATE, r"got dtype int16; convert int16"),
        (np.zeros(1600, dtype=np.float64), SAMPLE_RATE, r"got dtype float64"),
        (np.zeros((1600, 2), dtype=np.float32), SAMPLE_RATE, r"mono audio of shape \(samples,\), got shape \(1600, 2"),
        ([0.0] * 1600, SAMPLE_RATE, r"numpy float32 array, got list"),
    ],
)
def test_bad_audio_rejected(model, pcm, rate, message):
    with pytest.raises(ValueError, match=message):
        speech_segments(pcm, model=model, sample_rate=rate)
    with pytest.raises(ValueError, match=message):
        VADStream(model=model).process(pcm, sample_rate=rate)


def test_process_after_flush_is_an_error(model):
    stream = VADStream(model=model)
    stream.flush()
    with pytest.raises(RuntimeError, match=r"after flush\(\); call reset\(\)"):
        stream.process(np.zeros(512, dtype=np.float32))


# --- offline segmentation on real speech ---------------------------------------------------------


def test_segments_cover_the_speech(model, speech):
    pcm, truth = speech
    segments = speech_segments(pcm, model=model)
    assert segments, "no speech found"
    for seg in segments:
        assert 0.0 <= seg.start_s < seg.end_s <= len(pcm) / SAMPLE_RATE
        # Every segment overlaps a true utterance (nothing is found in the silences).
        assert any(seg.start_s < end and seg.end_s > start for start, end in truth), seg
    for start, end in truth:
        inside = [s for s in segments if s.start_s < end and s.end_s > start]
        assert abs(inside[0].start_s - start) < TOLERANCE_S, (inside[0], start)
        assert abs(inside[-1].end_s - end) < TOLERANCE_S, (inside[-1], end)
        covered = sum(min(s.end_s, end) - max(s.start_s, start) for s in inside)
        assert covered > 0.9 * (end - start)


def test_silence_and_noise_give_no_segment(model):
    rng = np.random.default_rng(0)
    assert speech_segments(np.zeros(5 * SAMPLE_RATE, dtype=np.float32), model=model) == []
    for amplitude in (0.001, 0.05):
        noise = (rng.standard_normal(5 * SAMPLE_RATE) * amplitude).astype(np.float32)
        assert speech_segments(noise, model=model) == []
    assert speech_segments(np.zeros(0, dtype=np.float32), model=model) == []


def test_max_speech_splits_long_segment(model, speech):
    pcm, truth = speech
    options = VADOptions(max_speech_s=2.0)
    segments = speech_segments(pcm, options, model=model)
    assert len(segments) > len(truth)
    for seg in segments:
        assert seg.end_s - seg.start_s <= 2.0 + 1e-9


def test_high_min_speech_drops_everything(model, speech):
    pcm, _ = speech
    assert speech_segments(pcm, VADOptions(min_speech_ms=10_000), model=model) == []


# --- streaming -----------------------------------------------------------------------------------


def test_stream_events_match_offline_segments(model, speech):
    pcm, _ = speech
    offline = _to_samples(speech_segments(pcm, model=model))
    fixed = _events_to_pairs(_stream(model, pcm, [WINDOW_SAMPLES]))
    assert fixed == offline


def test_stream_random_chunks_same_events(model, speech):
    pcm, _ = speech
    reference = _stream(model, pcm, [1600])
    rng = np.random.default_rng(1)
    for _ in range(2):
        sizes = [int(n) for n in rng.integers(1, 3000, size=50)]
        assert _stream(model, pcm, sizes) == reference


def test_stream_matches_offline_with_other_options(model, speech):
    pcm, _ = speech
    for options in (VADOptions(max_speech_s=2.0), VADOptions(min_silence_ms=20, speech_pad_ms=200, min_speech_ms=0)):
        offline = _to_samples(speech_segments(pcm, options, model=model))
        streamed = _events_to_pairs(_stream(model, pcm, [700, 123, 4000], options))
        assert streamed == offline


def test_stream_reports_start_before_speech_ends(model, speech):
    """A start event arrives while its utterance is still being fed, not only at the end."""
    pcm, truth = speech
    stream = VADStream(model=model)
    en_start, en_end = truth[0]
    seen_start_at = seen_end_at = None
    for pos in range(0, len(pcm), 1600):
        events = stream.process(pcm[pos : pos + 1600])
        if any(isinstance(e, SpeechStart) for e in events) and seen_start_at is None:
            seen_start_at = (pos + 1600) / SAMPLE_RATE
            assert stream.in_speech
        if any(isinstance(e, SpeechEnd) for e in events) and seen_end_at is None:
            seen_end_at = (pos + 1600) / SAMPLE_RATE
            assert not stream.in_speech
    assert seen_start_at is not None and en_start < seen_start_at < en_start + 0.6
    # The English end is reported during the following silence, before the Mandarin starts.
    assert seen_end_at is not None and en_end < seen_end_at < truth[1][0]


def test_stream_flush_closes_open_segment(model, speech):
    pcm, truth = speech
    cut = int((truth[0][0] + 1.5) * SAMPLE_RATE)  # stop in the middle of the English sentence
    events = _stream(model, pcm[:cut], [512])
    assert isinstance(events[-1], SpeechEnd) and events[-1].sample == cut
    assert _events_to_pairs(events) == _to_samples(speech_segments(pcm[:cut], model=model))


# --- the segmentation algorithm against silero's own implementation ------------------------------


def test_algorithm_matches_silero_get_speech_timestamps():
    """Random probability sequences and options: same segments as silero's reference function."""
    pytest.importorskip("torch")
    utils_vad = pytest.importorskip("silero_vad.utils_vad")
    rng = np.random.default_rng(0)
    for _ in range(400):
        probs = []
        n = int(rng.integers(1, 300))
        while len(probs) < n:
            value = float(rng.choice([0.02, 0.3, 0.4, 0.6, 0.95, rng.random()]))
            probs += [value] * int(rng.integers(1, 30))
        probs = probs[:n]
        n_samples = n * WINDOW_SAMPLES - int(rng.integers(0, WINDOW_SAMPLES))
        kw = dict(
            threshold=float(rng.choice([0.3, 0.5, 0.7])),
            min_speech_ms=float(rng.choice([0, 100, 250])),
            min_silence_ms=float(rng.choice([0, 30, 100, 500])),
            speech_pad_ms=float(rng.choice([0, 30, 200])),
            max_speech_s=float(rng.choice([math.inf, 1.0, 3.0])),
        )
        ours = _to_samples(segments_from_probabilities(probs, n_samples, VADOptions(**kw)))
        ref = utils_vad.get_speech_timestamps_from_probs(
            probs,
            threshold=kw["threshold"],
            min_speech_duration_ms=kw["min_speech_ms"],
            min_silence_duration_ms=kw["min_silence_ms"],
            speech_pad_ms=kw["speech_pad_ms"],
            max_speech_duration_s=kw["max_speech_s"],
            audio_length_samples=n_samples,
        )
        assert ours == [(d["start"], d["end"]) for d in ref], kw


def test_segment_is_a_frozen_dataclass():
    seg = SpeechSegment(1.0, 2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        seg.start_s = 0.0


def test_the_packaged_model_is_the_silero_release_and_is_found_first():
    """qwen3asr ships silero_vad.onnx (MIT) so --vad works on a board without the silero-vad
    wheel; it is the wheel's file, byte for byte, and find_model() prefers it."""
    import hashlib
    import importlib.util
    import os

    with open(vad.PACKAGED_MODEL, "rb") as f:
        data = f.read()
    assert hashlib.sha256(data).hexdigest() == vad.PACKAGED_SHA256
    assert vad.find_model() == vad.PACKAGED_MODEL
    licence = os.path.join(os.path.dirname(vad.PACKAGED_MODEL), "LICENSE.silero-vad")
    assert open(licence).read().startswith("MIT License")
    spec = importlib.util.find_spec("silero_vad")
    if spec is None:
        pytest.skip("the silero-vad wheel is not installed: nothing to compare with")
    wheel = os.path.join(spec.submodule_search_locations[0], "data", "silero_vad.onnx")
    with open(wheel, "rb") as f:
        assert f.read() == data
