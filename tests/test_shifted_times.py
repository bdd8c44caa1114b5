"""Word times between the aligner's bins (qwen3asr.aligner.shifted): the mean of passes over the
audio shifted by fractions of a bin, on the demo aligner and bundled speech. (The whole chain
with "checked", which uses it: tests/test_checked_pieces.py.)"""

from __future__ import annotations

import os

import numpy as np
import pytest

from qwen3asr import prepare_audio
from qwen3asr.aligner import refine
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


def test_checked_aligns_its_pieces_again_in_passes_speech_and_raw_do_not(aligner, clip):
    """refine.refined: "speech" and "raw" make no shifted pass ("raw" keeps the official times);
    refine.alone_shifted (what "checked" does at the end) gives a segment of one piece the mean
    of the passes, its own alignment taken as the unshifted one when it still is that."""
    pcm, text = clip
    levels = refine.Levels.of(pcm, 0.0)
    assert len(refine.pieces_at_pauses(levels)) == 1
    first = aligner.align(pcm, text, "English")
    speech, _ = refine.refined(aligner, pcm, 0.0, first, "English", "speech")
    raw, _ = refine.refined(aligner, pcm, 0.0, first, "English", "raw")
    assert raw == first and speech == refine.snap(first, levels, aligner.segment_ms / 1000.0)
    mean = Shifted(aligner, 4).align(pcm, text, "English")
    assert refine.alone_shifted(aligner, pcm, first, "English", levels, 4, unshifted=True) == mean != first
    again = refine.alone_shifted(aligner, pcm, first, "English", levels, 4)  # aligned anew over the piece
    assert [w.word for w in again] == [w.word for w in first]
    assert max(abs(a.start - b.start) for a, b in zip(again, mean)) < 0.011
    assert refine.alone_shifted(aligner, pcm, first, "English", levels, 1) == first


def test_each_piece_is_aligned_again_alone_with_the_words_it_holds(aligner):
    """refine.alone_shifted on two bundled commands 0.5 s apart (two pieces): each piece's words
    (by the middles of their snapped spans) aligned over its own audio as the mean of the passes,
    made here by hand; words whose piece alignment gives other words are kept as they were."""
    pcm = np.concatenate([prepare_audio(os.path.join(ROOT, "audio", "en_1.wav")), np.zeros(8000, np.float32),
                          prepare_audio(os.path.join(ROOT, "audio", "en_3.wav"))])
    text = "open the back door please turn on the living room fan"
    levels = refine.Levels.of(pcm, 1.0)
    pieces = refine.pieces_at_pauses(levels)
    assert len(pieces) == 2
    words = aligner.align(pcm, text, "English", offset=1.0)
    got = refine.alone_shifted(aligner, pcm, words, "English", levels, 4)
    assert [w.word for w in got] == text.split() and got != words
    by_hand = []
    for (a, b), part in zip(pieces, ("open the back door", "please turn on the living room fan")):
        by_hand += Shifted(aligner, 4).align(pcm[a * 160:b * 160], part, "English", offset=levels.time(a))
    assert got == tuple(by_hand)
    assert all(a.end <= b.start for a, b in zip(got, got[1:]))

    class Dropping:  # gives back one word too few for the second piece
        segment_ms = aligner.segment_ms

        def align(self, x, text, language, *, offset=0.0):
            got = aligner.align(x, text, language, offset=offset)
            return got[1:] if text.startswith("please") else got

    assert refine.alone_shifted(Dropping(), pcm, words, "English", levels, 4) == tuple(words)
