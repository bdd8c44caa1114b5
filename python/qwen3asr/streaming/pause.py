"""Pauses in a stream: where a chunk may end early, and whether a chunk boundary lies in a pause.

Both rules judge 10 ms frame levels against the recent speech level (``LEVEL_QUANTILE`` of
the frame levels of the last ``LEVEL_SECONDS`` of encoded audio): a point with
``EDGE_FRAMES`` quiet frames on both sides, each ``pause_db`` below that level, cuts no word.
The level is relative to the stream's own speech (a noisy recording whose floor is within
``pause_db`` of its speech simply never pauses), and a quantile rather than the peak, so a
click stops counting after a few seconds. Measurements: docs/streaming.md, steps 9 and 10.
"""

from __future__ import annotations

import collections
import math
from typing import Optional

import numpy as np

from ..mel import HOP_LENGTH as HOP  # samples per 10 ms frame

EDGE_FRAMES = 6  # 10 ms frames each side of a chunk boundary that decide whether it lies in a pause
LEVEL_SECONDS = 60.0  # pauses are judged against the loud end of this much recent encoded audio
LEVEL_QUANTILE = 0.99  # that loud end: this quantile of its 10 ms frame levels (a click soon stops counting)
PAUSE_CUT_MIN_CHUNK = 2.0  # chunk sizes (s) from which a chunk may end early at a pause


def frame_db(x: np.ndarray) -> np.ndarray:
    """Level (dB full scale) of each whole 10 ms frame of x."""
    frames = x[:x.shape[0] // HOP * HOP].reshape(-1, HOP).astype(np.float64)
    return 10.0 * np.log10(np.mean(frames * frames, axis=1) + 1e-10)


class PauseDetector:
    """The recent speech level of one stream, and the two pause rules judged against it.

    ``pause_db``: how far below the speech level a pause lies (None: no pauses, fixed chunks
    and a sliding window); ``chunk_size``: the stream's chunk length in seconds.
    """

    def __init__(self, pause_db: Optional[float], chunk_size: float):
        self.pause_db = pause_db
        self.chunk_size = chunk_size
        self.reset()

    def reset(self) -> None:
        self._levels_db: collections.deque = collections.deque()  # 10 ms frame levels of recent chunks (dB)
        self.speech_db = -math.inf  # LEVEL_QUANTILE of those levels

    def cut(self, db: np.ndarray) -> int:
        """Frames a chunk keeps, from its 10 ms frame levels ``db``: it ends at its last pause
        after its first quarter, or is whole. The next chunk then starts in the pause, a fresh
        window with no word cut. Not below ``PAUSE_CUT_MIN_CHUNK``: a fresh window of 1.5 s or
        less holds too little audio (step 10 of docs/streaming.md)."""
        n = db.shape[0]
        if self.pause_db is None or self.chunk_size < PAUSE_CUT_MIN_CHUNK:
            return n
        level = float(np.quantile(np.concatenate(list(self._levels_db) + [db]), LEVEL_QUANTILE))
        quiet = db < level - self.pause_db
        for k in range(n - EDGE_FRAMES, max(EDGE_FRAMES, n // 4) - 1, -1):
            if quiet[k - EDGE_FRAMES:k + EDGE_FRAMES].all():
                return k
        return n

    def measure(self, db: np.ndarray) -> tuple[float, float, float]:
        """Count a chunk's frame levels ``db`` into the speech level; returns the chunk's
        (head dB, tail dB, speech level dB after it): the loudest of its first and of its last
        ``EDGE_FRAMES`` frames. A chunk under 10 ms has loud edges (0 dB: no pause)."""
        if db.shape[0] == 0:
            return 0.0, 0.0, self.speech_db
        self._levels_db.append(db)
        kept = sum(d.shape[0] for d in self._levels_db)
        while kept - self._levels_db[0].shape[0] >= LEVEL_SECONDS * 100:
            kept -= self._levels_db.popleft().shape[0]
        self.speech_db = float(np.quantile(np.concatenate(self._levels_db), LEVEL_QUANTILE))
        return float(db[:EDGE_FRAMES].max()), float(db[-EDGE_FRAMES:].max()), self.speech_db

    def between(self, before_tail_db: float, after_head_db: float, after_speech_db: float) -> bool:
        """Whether the boundary between a chunk ending at ``before_tail_db`` and one starting at
        ``after_head_db`` lies in a pause (judged at the later chunk's speech level): the window
        then ends there (step 9 of docs/streaming.md)."""
        if self.pause_db is None:
            return False
        return max(before_tail_db, after_head_db) < after_speech_db - self.pause_db


__all__ = ["EDGE_FRAMES", "LEVEL_QUANTILE", "LEVEL_SECONDS", "PAUSE_CUT_MIN_CHUNK", "PauseDetector", "frame_db"]
