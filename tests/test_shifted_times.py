"""Word times between the aligner's bins (qwen3asr.aligner.shifted): the mean of passes over the
audio shifted by fractions of a bin, on the demo aligner and bundled speech. (The whole chain
with "checked", which uses it: tests/test_checked_pieces.py.)"""

from __future__ import annotations

import os

import numpy as np
import pytest

from qwen3asr import prepare_audio
from qwen3asr.aligner import refine, shifted
from qwen3asr.aligner.model import ForcedAligner
from qwen3asr.aligner.shifted import Shifted
from qwen3asr.backends import BackendOptions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALIGNER = os.path.join(ROOT, "models", "default-aligner")


@pytest.fixture(scope="module")
def aligner():
    with ForcedAligner(ALIGNER, backend="onnx", options=BackendOptions(threads=2)) as al:
        yield al


@pytest.fixture(scope="module")
def clip():
    return prepare_audio(os.path.join(ROOT, "audio", "en_3.wav")), "please turn on the living room fan"


def test_the_times_are_the_mean_of_the_shifted_passes(aligner, clip):
    pcm, text = clip
    first = aligner.align(pcm, text, "English", offset=2.0)
    assert all(round(w.start / 0.08, 6) % 1 == 0 for w in aligner.align(pcm, text, "English"))  # on the bins
    got = Shifted(aligner, 4).align(pcm, text, "English", offset=2.0)
    assert [w.word for w in got] == [w.word for w in first]
    passes = [np.array([(w.start, w.end) for w in first])]
    for pad in (320, 640, 960):  # 20, 40, 60 ms: a quarter of the 80 ms bin more each
        again = aligner.align(np.concatenate([np.zeros(pad, np.float32), pcm]), text, "English",
                              offset=2.0 - pad / 16000)
        passes.append(np.array([(w.start, w.end) for w in again]))
    want = np.clip(np.mean(passes, axis=0), 2.0, 2.0 + len(pcm) / 16000)
    assert np.abs(np.array([(w.start, w.end) for w in got]) - want).max() <= 0.0005
    assert any(round((w.start - 2.0) / 0.08, 6) % 1 for w in got)  # between the bins
    starts = [w.start for w in got]
    assert starts == sorted(starts) and all(w.end >= w.start for w in got)
    assert all(2.0 <= w.start and w.end <= 2.0 + len(pcm) / 16000 for w in got)
    assert Shifted(aligner, 1).align(pcm, text, "English", offset=2.0) == first


def test_a_pass_that_does_not_fit_or_gives_other_words_is_left_out(aligner, clip, monkeypatch):
    pcm, text = clip
    first = aligner.align(pcm, text, "English")
    # no room for the silence before the audio: only the first pass
    monkeypatch.setattr(aligner, "max_seconds", len(pcm) / 16000)
    assert Shifted(aligner, 4).align(pcm, text, "English") == first
    monkeypatch.undo()

    class Other:  # an aligner whose shifted passes give other words
        segment_ms = aligner.segment_ms

        def align(self, x, text, language, *, offset=0.0):
            got = aligner.align(x, text, language, offset=offset)
            return got if len(x) == len(pcm) else got[1:]

    assert Shifted(Other(), 4).align(pcm, text, "English") == first
    with pytest.raises(ValueError, match="at least 1"):
        Shifted(aligner, 0)


def test_the_word_spans_use_it_when_on_and_raw_never(aligner, clip, monkeypatch):
    """refine.refined with PASSES over 1: "speech" gives times off the bins, "raw" the official
    ones; "checked" makes CHECKED_PASSES."""
    pcm, text = clip
    first = aligner.align(pcm, text, "English")
    off, _ = refine.refined(aligner, pcm, 0.0, first, "English", "speech")
    monkeypatch.setattr(shifted, "PASSES", 4)
    on, _ = refine.refined(aligner, pcm, 0.0, first, "English", "speech")
    raw, _ = refine.refined(aligner, pcm, 0.0, first, "English", "raw")
    assert raw == first and on != off and [w.word for w in on] == [w.word for w in off]
    assert refine.snap(Shifted(aligner, 4).align(pcm, text, "English"), refine.Levels.of(pcm, 0.0),
                       aligner.segment_ms / 1000.0) == on  # one piece: the mean's times, snapped
    assert shifted.passes_for("raw") == 1 and shifted.passes_for("checked") == shifted.CHECKED_PASSES > 1
