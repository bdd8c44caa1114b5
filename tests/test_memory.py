"""Memory ceilings of one request (docs/serving.md "Memory ceilings of one request"): the peak
memory of a long file, a long upload and a long live stream is bounded by the settings and does
not grow with the audio.

Each long-audio figure is a peak RSS measured in a fresh subprocess at two lengths of the same
kind of audio (the bundled 77 s clip, then quiet noise: speech, then long stretches for the
chunks to run over); holding the audio whole would add 4 bytes per 16 kHz sample at least, 96 MB
between 5 and 30 minutes, far over the margin allowed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

sf = pytest.importorskip("soundfile")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG = os.path.join(ROOT, "audio", "long_mixed.wav")
SR = 16000
# What a peak may grow between the short and the long run: allocator noise and the transcript
# (a few kB). Audio held whole would add 96 MB (5 -> 30 min at 4 bytes a sample) and more.
MARGIN_MB = 16.0

_PEAK = """
import json, sys
from qwen3asr import Qwen3ASREngine

def peak_mb():  # VmHWM: this process's peak RSS (ru_maxrss would carry the parent's over from fork)
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024

with Qwen3ASREngine() as engine:
    loaded = peak_mb()
    r = engine.transcribe(sys.argv[1], vad=False)
    peak = peak_mb()
print(json.dumps({"loaded_mb": loaded, "peak_mb": peak, "seconds": r.stats.audio_seconds, "text": r.text}))
"""


def long_file(path: str, minutes: float, rate: int = SR) -> str:
    """A WAV file of ``minutes``: the bundled 77 s mixed clip, then quiet noise (-60 dBFS)."""
    x, sr = sf.read(LONG, dtype="int16")
    assert sr == SR
    rng = np.random.default_rng(0)
    rest = (rng.standard_normal(int(minutes * 60 * SR) - x.shape[0]) * 30).astype(np.int16)
    sf.write(path, np.concatenate([x, rest]), SR)
    return path


def peak_of(path: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _PEAK, path], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_long_file_peak_does_not_grow_with_its_length(tmp_path):
    """A 30-minute file peaks within MARGIN_MB of a 5-minute one (the file is read in 10 s
    blocks, the log-mel in 1000-frame blocks, the chunks decoded in a bounded window). Checked
    by hand against the code that read files whole (commit 448482e): 5 min peaked at 135 MB,
    30 min at 290 MB, and this test failed."""
    short = peak_of(long_file(str(tmp_path / "5min.wav"), 5))
    long = peak_of(long_file(str(tmp_path / "30min.wav"), 30))
    assert short["seconds"] == pytest.approx(300) and long["seconds"] == pytest.approx(1800)
    # the same speech is transcribed in both (the clip at the start), so the runs are comparable
    assert len(short["text"]) >= 100 and long["text"][:100] == short["text"][:100], (short, long)
    assert long["peak_mb"] - short["peak_mb"] < MARGIN_MB, (short, long)


def _footprints(session, pcm: np.ndarray, repeats: int) -> list:
    """The session's footprint() after each 0.5 s piece of ``pcm`` fed ``repeats`` times over."""
    out = []
    for _ in range(repeats):
        for a in range(0, pcm.shape[0], SR // 2):
            session.feed_audio(pcm[a:a + SR // 2])
            out.append(session.footprint())
    return out


@pytest.mark.slow
def test_live_stream_footprint_stays_flat(monkeypatch):
    """A live stream's footprint() (the bytes it holds) is as large after six passes over the
    77 s clip (~460 s, ~400 chunks, ~150 segments) as during the first ones: its audio is the open
    chunk, its window memory_num chunks, its result a bounded history. The history caps are made
    small here (in use they are reached after about an hour) so the run reaches them; the same
    run with an unbounded history (what a long file keeps) grows, which shows the check can
    fail."""
    from qwen3asr import Qwen3ASREngine, prepare_audio
    from qwen3asr.streaming import StreamSession, committed, session as session_mod

    monkeypatch.setattr(committed, "HISTORY_SEGMENTS", 10)
    monkeypatch.setattr(committed, "HISTORY_CHARS", 200)
    monkeypatch.setattr(committed, "HISTORY_TOKENS", 50)
    monkeypatch.setattr(session_mod, "CHUNK_HISTORY", 20)
    pcm = prepare_audio(LONG)
    with Qwen3ASREngine() as engine:
        bounded = engine.create_stream(chunk_size=1.0)
        sizes = _footprints(bounded, pcm, 6)
        r = bounded.finish()
        third = len(sizes) // 3
        assert max(sizes[-third:]) <= 1.05 * max(sizes[:third]), (max(sizes[:third]), max(sizes[-third:]))
        assert r.stats.chunks > 300 and len(r.chunks) == 20
        assert r.dropped_segments > 100 and len(r.segments) == 10
        assert r.dropped_chars > 1000 and len(r.committed) <= 200 and len(r.token_ids) == 50
        control = StreamSession(engine, bounded.options, bounded=False)
        grown = _footprints(control, pcm, 6)
        assert max(grown[-third:]) > 1.2 * max(grown[:third]), (max(grown[:third]), max(grown[-third:]))
