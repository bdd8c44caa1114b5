"""Ten minutes of speech for the long-recording word tests (issue 35 item 4), and the checks
their word times must pass; shared by tests/test_word_spans.py (CPU) and
tests/test_rk_aligner.py (the board path with the NPU doubles)."""

from __future__ import annotations

import os

import numpy as np

from qwen3asr import prepare_audio
from qwen3asr.aligner.refine import collapse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SR = 16000
LONG_SECONDS = 600.0
TAIL_SECONDS = 3.0  # silence at the end of the recording


def ten_minutes() -> np.ndarray:
    """(9600000,) float32: audio/long_mixed.wav (77 s of English and Mandarin commands) again and
    again with 1-3 s of silence between, cut to 597 s, then TAIL_SECONDS of silence."""
    x = prepare_audio(os.path.join(ROOT, "audio", "long_mixed.wav"))
    rng = np.random.default_rng(0)
    parts, n = [], 0
    while n < LONG_SECONDS * SR:
        gap = np.zeros(int(rng.uniform(1.0, 3.0) * SR), np.float32)
        parts += [x, gap]
        n += x.shape[0] + gap.shape[0]
    pcm = np.concatenate(parts)[:int((LONG_SECONDS - TAIL_SECONDS) * SR)]
    return np.concatenate([pcm, np.zeros(int(TAIL_SECONDS * SR), np.float32)])


def check_long(result, bin_s: float) -> None:
    """Word times of the ten minutes: in order, inside the audio and each inside its segment, none
    in the trailing silence (no pile-up at the end), and every segment whose words still collapse
    says so (Segment.words_flag)."""
    flat = [t for w in result.words for t in (w.start, w.end)]
    assert flat == sorted(flat) and 0.0 <= flat[0] and flat[-1] <= LONG_SECONDS
    assert result.words[-1].start < LONG_SECONDS - TAIL_SECONDS, result.words[-5:]
    for seg in result.segments:
        assert all(seg.start <= w.start <= w.end <= seg.end for w in seg.words), seg
        if seg.words_flag is None:
            assert collapse(seg.words, seg.start, seg.end, bin_s)[0] is None, seg
