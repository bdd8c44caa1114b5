"""A stream's front end: a chunk's log-mel, levels and audio embeddings.

The log-mel of a chunk equals the offline front end's for the same audio
(``mel.piece_log_mel_power``: a chunk waits for its 2.5 ms of look-ahead), except the clip-global
clamp: a stream cannot know its future maximum, so the ceiling is the running maximum of
everything seen so far (or a fixed ``mel_ceiling``, which long files pass). Each chunk is encoded
once.
"""

from __future__ import annotations

import math
import time
from typing import Optional

import numpy as np

from .. import mel as melmod
from .pause import PauseDetector, frame_db
from .window import Chunk


class ChunkFront:
    """Log-mel and encoder of a stream's chunks over ``engine`` (its ``n_mels`` and
    ``encode_timed``); ``pauses``: the stream's level measures; ``mel_ceiling``: a fixed log10
    ceiling (None: the running maximum)."""

    def __init__(self, engine, pauses: PauseDetector, mel_ceiling: Optional[float] = None):
        self.engine = engine
        self.pauses = pauses
        self.fixed = mel_ceiling
        self.reset()

    def reset(self) -> None:
        self.ceiling = -math.inf if self.fixed is None else float(self.fixed)

    def prepare(self, audio, c0: int, c1: int, left_edge: int, right_edge: Optional[int] = None,
                db: Optional[np.ndarray] = None, measure: bool = True) -> Chunk:
        """The chunk [c0, c1) of ``audio`` (a streaming.buffer.AudioBuffer) made ready to encode:
        its log-mel (the segment starts at sample ``left_edge``; ``right_edge``: it ends there, the
        chunk is its last) clamped at the ceiling so far, and its levels (``db``: its 10 ms frame
        levels when already computed; ``measure`` False: none, the pause rules' state untouched, for
        a preview). Chunks are prepared in order."""
        t0 = time.perf_counter()
        chunk = Chunk(c0, c1)
        b0 = audio.start
        power = melmod.piece_log_mel_power(audio.samples, c0 - b0, c1 - b0, self.engine.n_mels,
                                           left_edge=left_edge - b0,
                                           right_edge=right_edge - b0 if right_edge is not None else None)
        if self.fixed is None:
            self.ceiling = max(self.ceiling, float(power.max()))
        chunk.mel = melmod.normalize_log_mel(power, self.ceiling)
        chunk.mel_ms = (time.perf_counter() - t0) * 1000
        if measure:
            chunk.head_db, chunk.tail_db, chunk.speech_db = self.pauses.measure(
                frame_db(audio(c0, c1)) if db is None else db)
        return chunk

    def encode(self, chunk: Chunk) -> None:
        """The chunk's audio embeddings (its mel is dropped); ``enc_ms`` counts mel and encoder."""
        t0 = time.perf_counter()
        chunk.embeds, chunk.enc = self.engine.encode_timed(chunk.mel)
        chunk.mel = None
        chunk.enc_ms = chunk.mel_ms + (time.perf_counter() - t0) * 1000


__all__ = ["ChunkFront"]
