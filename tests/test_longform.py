"""Long files: engine.transcribe with chunk_size/start/duration/max_chunks/vad, segments, srt/vtt,
and the CLI flags (random-weight bundle: mechanics, not accuracy); the long-audio policy inside
transcribe() (VAD segments or chunks beyond the one-pass limit, API == CLI) on the bundled default
model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from qwen3asr import Qwen3ASREngine
from qwen3asr import TranscribeOptions
from qwen3asr import prepare_audio
from qwen3asr import mel as melmod
from qwen3asr.longform import clip_ceiling, selection
from qwen3asr.results import Segment
from qwen3asr.subtitles import to_srt, to_vtt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG = os.path.join(ROOT, "audio", "long_mixed.wav")
EN2 = os.path.join(ROOT, "audio", "en_2.wav")
CLI = os.path.join(ROOT, "python", "transcribe.py")
SR = 16000


def test_chunked_segments_and_window(engine):
    seen = []
    r = engine.transcribe(LONG, chunk_size=4.0, start_second=10.0, duration=10.5, max_new_tokens=3,
                          language="English", progress=lambda d, t: seen.append((d, t)))
    assert r.stats.audio_seconds == pytest.approx(10.5)
    # 3 chunks of at most 4 s, each generating 3 tokens; a chunk ends early at a pause (here at
    # 13.87 and 16.72 s). Segment times are file times on chunk boundaries. (The last chunk may
    # commit nothing: its window may be decoded afresh and the random weights repeat the words
    # carried by the chunk before, which are dropped.)
    assert r.stats.encoder_calls == 3
    spans = [(s.start, s.end) for s in r.segments]
    assert len(spans) >= 2 and spans[0][0] == 10.0 and spans[-1][1] <= 20.5
    assert all(1.0 <= b - a <= 4.0 + 1e-9 for a, b in spans)
    assert all(spans[i][1] == pytest.approx(spans[i + 1][0]) for i in range(len(spans) - 1))
    assert all(10.0 <= s.start < s.end <= 20.5 for s in r.segments)
    assert r.truncated  # random weights run out of tokens
    assert seen[-1] == (pytest.approx(10.5), pytest.approx(10.5))
    assert r.token_ids and r.raw_text == engine.tokenizer.decode(r.token_ids)
    assert r.to_dict()["segments"][0]["start"] >= 10.0


def test_max_chunks_stops_early(engine):
    r = engine.transcribe(LONG, chunk_size=2.0, max_chunks=3, max_new_tokens=2)
    assert r.stats.encoder_calls == 3 and r.stats.audio_seconds == pytest.approx(6.0) and r.truncated


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_bad_max_chunks_is_refused_before_any_work(engine, bad, monkeypatch):
    from qwen3asr import longform

    monkeypatch.setattr(longform, "clip_ceiling", lambda *a: pytest.fail("scanned the audio first"))
    with pytest.raises(ValueError, match=r"max_chunks must be an integer >= 1 or None \(got "):
        engine.transcribe(LONG, chunk_size=2.0, max_chunks=bad)


def test_single_pass_unchanged_with_one_segment(engine):
    clip = os.path.join(ROOT, "audio", "en_2.wav")
    r = engine.transcribe(clip, max_new_tokens=4)
    g, _ = engine.start(clip, options=__import__("qwen3asr").DecodingOptions(max_new_tokens=4))
    g.run()
    assert r.token_ids == tuple(g.tokens)
    assert r.segments == ((Segment(0.0, pytest.approx(2.376, abs=1e-3), r.text, r.language,
                                   finish_reason="length"),) if r.text else ())
    assert r.finish_reason == "length" and r.truncated


def test_long_audio_without_chunk_size_explains(engine):
    eng = Qwen3ASREngine(engine.bundle.path, backend="onnx", decoder_dtype="fp32")
    eng.max_context = 300
    x = np.zeros(SR * 30, np.float32)
    assert not eng.fits_one_pass(x)
    with pytest.raises(ValueError, match=r"chunk_size"):
        eng.transcribe(x)
    r = eng.transcribe(x, chunk_size=5.0, max_new_tokens=2, memory_num=2)
    assert r.stats.encoder_calls == 6


def test_selection_and_ceiling():
    n = SR * 3
    assert selection(n, 1.0, 1.5) == (SR, SR * 5 // 2)
    assert selection(n, 2.5) == (SR * 5 // 2, n) and selection(n, 1.0, 1e300) == (SR, n)
    with pytest.raises(ValueError, match=r"past the end of the audio \(3.00 s\)"):
        selection(n, 3.0)
    with pytest.raises(ValueError, match="duration must be"):
        selection(n, 0.0, -1)
    y, _ = sf.read(LONG, dtype="float32")
    y = y[:SR * 130 + 77]
    assert clip_ceiling(y, 128) == pytest.approx(float(melmod.log_mel_power(y, 128).max()), abs=1e-9)


def test_srt_and_vtt():
    segs = [Segment(0.5, 2.945, "remind me to call mom at ten forty"), Segment(3.0, 3.5, ""),
            Segment(3661.25, 3663.0, "六千三百八十二" * 7)]
    assert to_srt(segs) == (
        "1\n00:00:00,500 --> 00:00:02,945\nremind me to call mom at ten forty\n\n"
        "2\n01:01:01,250 --> 01:01:03,000\n" + "六千三百八十二" * 6 + "\n六千三百八十二\n")
    vtt = to_vtt(segs[:1])
    assert vtt == "WEBVTT\n\n00:00:00.500 --> 00:00:02.945\nremind me to call mom at ten forty\n"
    with pytest.raises(ValueError, match="ends before it starts"):
        to_srt([Segment(2.0, 1.0, "x")])


@pytest.mark.slow  # three CLI subprocesses
def test_cli_srt_and_vtt(bundle_dir):
    base = [sys.executable, CLI, "--audio", LONG, "--model", bundle_dir, "--chunk-size", "3", "--duration", "7",
            "--max-new-tokens", "2", "--language", "en", "--rollback-tokens", "0"]
    p = subprocess.run(base + ["--format", "srt"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    times = re.findall(r"(\d\d:\d\d:\d\d,\d\d\d) --> (\d\d:\d\d:\d\d,\d\d\d)", p.stdout)
    assert times and times[0][0] == "00:00:00,000" and times[-1][1] <= "00:00:07,000"
    q = subprocess.run(base + ["--format", "vtt", "--start", "1"], capture_output=True, text=True, timeout=300)
    assert q.returncode == 0 and q.stdout.startswith("WEBVTT\n"), q.stderr
    assert "00:00:01.000 -->" in q.stdout
    e = subprocess.run(base + ["--start", "500"], capture_output=True, text=True, timeout=300)
    assert e.returncode == 2 and e.stderr.startswith("error: start_second=500.0 is past the end")


def test_max_chunks_with_vad_decodes_exactly_that_many(engine):
    from qwen3asr import vad as vadmod

    try:
        vadmod.find_model()
    except FileNotFoundError as exc:
        pytest.skip(f"Silero VAD model not installed: {exc}")
    # The first speech segment is longer than one 2 s chunk: finish() must not decode its rest.
    r = engine.transcribe(LONG, vad=True, chunk_size=2.0, max_chunks=1, max_new_tokens=2)
    assert r.stats.encoder_calls == 1 and r.truncated


# ------------------------------------------------------------------ the long-audio policy

@pytest.mark.slow  # the CLI in a subprocess on the 77 s clip
def test_api_and_cli_give_the_same_text_for_the_long_clip(default_engine):
    mode, o = default_engine.plan(prepare_audio(LONG))
    assert mode == "VAD segments" and o.chunk_size == 30.0  # the bundle's one-pass limit is 10 s
    api = default_engine.transcribe(LONG)  # ITN is off by default in the API and the CLI alike
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))

    def cli(*extra):
        out = subprocess.run([sys.executable, os.path.join(ROOT, "python", "transcribe.py"), "--audio", LONG,
                              "--backend", "onnx", "--threads", "2", "--format", "json", *extra],
                             capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    plain = cli()
    assert plain["text"] == api.text and plain["token_ids"] == list(api.token_ids)
    assert [s["start"] for s in plain["segments"]] == [s.start for s in api.segments]
    # --itn is the API's itn=True; the clip's spoken numbers then read as digits
    with_itn = default_engine.transcribe(LONG, itn=True)
    assert cli("--itn")["text"] == with_itn.text != api.text
    # one pass of the whole clip (what the API did before the policy moved in) is much worse
    one = default_engine.transcribe(LONG, max_new_tokens=512, one_pass=True)
    assert one.token_ids != api.token_ids


def test_without_the_vad_model_long_audio_goes_in_chunks(default_engine, monkeypatch):
    from qwen3asr import plan

    monkeypatch.setattr(plan, "vad_available", lambda: False)
    mode, o = default_engine.plan(prepare_audio(LONG))
    assert (mode, o.chunk_size, o.rollback_tokens, o.vad_options) == ("chunks", 30.0, 5, None)
    r = default_engine.transcribe(LONG)
    assert r.stats.encoder_calls > 3 and len(r.segments) >= 3
    assert default_engine.plan(prepare_audio(LONG), TranscribeOptions(vad=False))[0] == "chunks"
    assert default_engine.plan(prepare_audio(EN2))[0] == "one pass"
