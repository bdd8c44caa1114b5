"""Word times between the aligner's bins: an alignment as the mean of passes over shifted audio.

The official aligner gives every time on its 80 ms grid (``ForcedAligner.segment_ms``) counted
from the start of the audio it is given, so a time is off by up to half a bin however well the
model listens. The same audio given again with k / passes of a bin of silence before it puts
the grid elsewhere; the mean of the passes' times (each taken back to the audio's own timeline)
falls between the bins (``Shifted``). The "checked" word spans align each piece at its pauses
again alone that way at the end, with the words the check gave it (CHECKED_PASSES;
refine.alone_shifted); "speech" makes no extra pass (each would add about 0.9 of a short clip's
transcription on the board) and "raw" keeps the official times of one pass. Shifting the windows
that give a paused input's pieces their words instead moves their counts, and where passes give
a piece different words their mean is neither's (docs/aligner.md, "Times between the bins"). A
pass whose words differ from the first's, or that would not fit the aligner's longest audio, is
left out. The mean of times in order is in order; times before the audio (in the silence put
before it) are taken to its start.

Every word span but "raw" also reads each pass's times between the bins from its own logits
(``BetweenBins``: ForcedAligner.align's ``between_bins``, timing.between_bins), which costs
nothing; the aligned segments' callers (qwen3asr.aligner.long, .segments) wrap the aligner with
``for_spans``.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Tuple

import numpy as np

from ..audio import SAMPLE_RATE
from ..results import Word

# word_spans "checked": each piece aligned again alone as the mean of this many passes, the audio
# shifted by 1 / passes of a bin more each (1: no pass more)
CHECKED_PASSES = 4


def for_spans(aligner, spans: str):
    """``aligner`` as word spans ``spans`` use it: BetweenBins for "speech" and "checked", the
    aligner itself (the official times) for "raw"."""
    return aligner if spans == "raw" else BetweenBins(aligner)


class BetweenBins:
    """``aligner`` (a ForcedAligner) whose ``align(pcm, text, language, offset=)`` times each slot
    between the bins from the same pass's logits (ForcedAligner.align's ``between_bins``); every
    other attribute is the aligner's."""

    def __init__(self, aligner):
        self.aligner = aligner

    def __getattr__(self, name):
        return getattr(self.aligner, name)

    def align(self, pcm: np.ndarray, text: str, language: str, *, offset: float = 0.0) -> Tuple[Word, ...]:
        return self.aligner.align(pcm, text, language, offset=offset, between_bins=True)


class Shifted:
    """``aligner`` (a ForcedAligner, or anything with its ``align`` and ``segment_ms``) whose
    ``align(pcm, text, language, offset=)`` of (n,) float32 16 kHz audio gives the mean times of
    ``passes`` shifted passes (the module docstring); every other attribute is the aligner's."""

    def __init__(self, aligner, passes: int):
        if passes < 1:
            raise ValueError(f"passes must be at least 1, got {passes}")
        self.aligner = aligner
        self.passes = passes

    def __getattr__(self, name):
        return getattr(self.aligner, name)

    def align(self, pcm: np.ndarray, text: str, language: str, *, offset: float = 0.0) -> Tuple[Word, ...]:
        return self.averaged(pcm, text, language, self.aligner.align(pcm, text, language, offset=offset), offset)

    def averaged(self, pcm: np.ndarray, text: str, language: str, first: Sequence[Word],
                 offset: float = 0.0) -> Tuple[Word, ...]:
        """``first`` (the unshifted pass's words of ``text`` over ``pcm``, times plus ``offset``)
        with the times of the passes shifted by k / passes of a bin (k = 1 .. passes - 1) averaged
        in; ``first`` as it is when no other pass gives its words back."""
        first = tuple(first)
        if self.passes < 2 or not first:
            return first
        bin_samples = self.aligner.segment_ms / 1000.0 * SAMPLE_RATE
        longest: Optional[float] = getattr(self.aligner, "max_seconds", None)
        units = [w.word for w in first]
        times = [[(w.start, w.end) for w in first]]
        x = np.asarray(pcm, dtype=np.float32)
        for k in range(1, self.passes):
            pad = int(round(bin_samples * k / self.passes))
            if longest is not None and (x.shape[0] + pad) / SAMPLE_RATE > longest:
                continue
            got = self.aligner.align(np.concatenate([np.zeros(pad, np.float32), x]), text, language,
                                     offset=offset - pad / SAMPLE_RATE)
            if [w.word for w in got] == units:
                times.append([(w.start, w.end) for w in got])
        if len(times) == 1:
            return first
        end = offset + x.shape[0] / SAMPLE_RATE
        mean = np.clip(np.mean(np.asarray(times, dtype=np.float64), axis=0), offset, end)
        return tuple(dataclasses.replace(w, start=round(float(a), 3), end=round(float(max(a, b)), 3))
                     for w, (a, b) in zip(first, mean))


__all__ = ["BetweenBins", "CHECKED_PASSES", "Shifted", "for_spans"]
