"""The early final: the last piece's one-pass decode run in the silence before ``audio-stop``.

Home Assistant sends ``audio-stop`` only once its own VAD has heard a while of silence (0.7 s
at its default sensitivity). This server's Silero VAD ends the speech sooner: when
``min_silence`` seconds have passed since the last window it heard as speech, the stream's
final pass runs on the audio up to that speech end plus ``pad`` seconds
(``StreamSession.final_at``: what ``finish()`` would give had the audio ended there), in the
utterance's worker, during the silence. At ``audio-stop`` its text is the transcript when no
window since then was speech and the stream closed no piece meanwhile; else it is dropped and the
final is made as without it (``finish()``). Any later speech supersedes a result: the next
speech end runs the pass again. Measurements (why these seconds): docs/wyoming.md.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional

import numpy as np

from ...audio import SAMPLE_RATE
from ...vad import WINDOW_SAMPLES, SileroVAD

logger = logging.getLogger(__name__)

MIN_SILENCE_S = 0.3  # seconds since the last speech window before the pass starts
PAD_S = 0.3  # seconds of audio after the last speech window that the pass decodes
THRESHOLD = 0.5  # Silero probability at or above which a 32 ms window is speech (silero's default)


@dataclasses.dataclass(frozen=True)
class EarlyResult:
    """One early pass: where it ended and what ``finish()`` would have given there."""

    speech_end: int  # sample after the last speech window it covers
    pieces: tuple  # the stream's finished pieces when it ran (_pieces): unchanged at audio-stop
    text: str  # the whole utterance's transcript
    language: Optional[str]  # canonical language name


class EarlyFinal:
    """The speech end of one utterance (Silero VAD on its 16 kHz audio) and its early pass.

    ``feed(pcm)`` every sample the stream gets, ``due()`` says when to ``run(session)`` the
    pass, ``text(session)`` at ``audio-stop`` gives its (text, language) or None. Used from one
    thread at a time (the utterance's worker).
    """

    def __init__(self, min_silence_s: float = MIN_SILENCE_S, pad_s: float = PAD_S, vad_model=None):
        self.min_silence = int(round(min_silence_s * SAMPLE_RATE))
        self.pad = int(round(pad_s * SAMPLE_RATE))
        self._vad = vad_model  # loaded at the first feed (in the worker thread)
        self._rest = np.zeros(0, np.float32)  # samples short of a whole VAD window
        self.seen = 0  # samples given to the VAD
        self.last_speech: Optional[int] = None  # sample after the last window heard as speech
        self.result: Optional[EarlyResult] = None
        self.passes = 0  # early passes run (a superseded one counts too)

    def feed(self, pcm: np.ndarray) -> None:
        """(n,) float32 16 kHz samples that follow the ones fed before."""
        if self._vad is None:
            self._vad = SileroVAD()
        x = np.concatenate([self._rest, pcm]) if self._rest.size else pcm
        n = x.shape[0] // WINDOW_SAMPLES * WINDOW_SAMPLES
        for i in range(0, n, WINDOW_SAMPLES):
            if self._vad(np.ascontiguousarray(x[i:i + WINDOW_SAMPLES], np.float32)) >= THRESHOLD:
                self.last_speech = self.seen + i + WINDOW_SAMPLES
        self.seen += n
        self._rest = x[n:].copy()

    def due(self) -> bool:
        """Whether the pass should run now: speech was heard, then ``min_silence`` without it,
        and no pass has covered this speech end yet."""
        s = self.last_speech
        return s is not None and self.seen - s >= self.min_silence and \
            (self.result is None or self.result.speech_end != s)

    def run(self, session) -> None:
        """The pass on the audio up to the speech end plus ``pad`` (one unit of model work)."""
        s = self.last_speech
        self.passes += 1
        got = session.final_at(min(s + self.pad, self.seen))
        self.result = EarlyResult(s, _pieces(session), *got) if got is not None else None
        logger.debug("early final at %.2f s: %r", s / SAMPLE_RATE, self.result.text if self.result else None)

    def text(self, session) -> Optional[tuple[str, Optional[str]]]:
        """(transcript, language) of the pass when it still holds: no speech since its speech end
        and the stream's open piece unchanged; else None (``finish()`` makes the final)."""
        r = self.result
        if r is None or r.speech_end != self.last_speech or r.pieces != _pieces(session):
            return None
        return r.text, r.language


def _pieces(session) -> tuple:
    """What changes when the stream finishes a piece: its final passes, its final segments."""
    return session.stats().final_passes, session.result().final_segments


__all__ = ["EarlyFinal", "EarlyResult", "MIN_SILENCE_S", "PAD_S"]
