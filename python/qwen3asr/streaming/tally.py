"""A stream's running totals: the latest ChunkStats, the sums that StreamStats reports, the
worst finish reason, and the counts of chunks cut, decoded and finished pieces decoded again."""

from __future__ import annotations

import collections
import sys
from typing import Optional

from ..audio import SAMPLE_RATE
from ..decoding import FINISH_RANK
from .results import SUMMED, ChunkStats, StreamStats

CHUNK_HISTORY = 1000  # ChunkStats a result keeps: the latest (StreamStats counts all)


class StreamTally:
    """What a StreamSession has done so far; ``reset()`` forgets it all."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.chunks = collections.deque(maxlen=CHUNK_HISTORY)  # the latest ChunkStats
        self.decoded = 0  # chunks decoded
        self.cut = 0  # chunks cut so far (decoded or about to be)
        self.final_passes = 0  # finished pieces decoded again in one pass
        self.partials = 0  # previews of the open chunk (streaming.partial)
        self.encoded = 0  # samples encoded
        self.vad_ms = 0.0  # time in the VAD model
        self.worst: Optional[str] = None  # the worst finish reason of any chunk (FINISH_RANK), the first of equals
        self.truncated = False  # a chunk ran out of max_new_tokens, or audio was dropped (max_chunks)
        self._totals = dict.fromkeys(SUMMED, 0)  # running sums of the ChunkStats fields

    def add(self, st: ChunkStats) -> None:
        """One decoded chunk's stats."""
        self.chunks.append(st)
        self.decoded += 1
        if self.worst is None or FINISH_RANK.get(st.finish_reason, 0) > FINISH_RANK.get(self.worst, 0):
            self.worst = st.finish_reason
        if st.finish_reason == "length":
            self.truncated = True
        for k in SUMMED:
            self._totals[k] += getattr(st, k)

    def full(self, max_chunks: Optional[int]) -> bool:
        """True once ``max_chunks`` chunks are cut: no more audio is decoded."""
        return max_chunks is not None and self.cut >= max_chunks

    def room(self, max_chunks: Optional[int]) -> bool:
        """Whether a chunk that is ready may be decoded; if not, its audio is dropped (truncated)."""
        if self.full(max_chunks):
            self.truncated = True
            return False
        return True

    def stats(self, received: int) -> StreamStats:
        """The totals after ``received`` samples of 16 kHz audio."""
        return StreamStats(audio_seconds=received / SAMPLE_RATE, encoded_seconds=self.encoded / SAMPLE_RATE,
                           vad_ms=self.vad_ms, chunks=self.decoded, final_passes=self.final_passes,
                           partials=self.partials, **self._totals)

    def footprint(self) -> int:
        """Bytes held by the chunk history."""
        return sys.getsizeof(self.chunks) + sum(sys.getsizeof(c) for c in self.chunks)


__all__ = ["CHUNK_HISTORY", "StreamTally"]
