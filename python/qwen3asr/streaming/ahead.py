"""The front end of a piece's final pass, computed while the piece is spoken.

A final pass (qwen3asr.streaming.final) decodes a finished piece of speech in one pass after its
end: log-mel, encoder, prefill, decode. The encoder's conv stem works on whole 100-frame chunks
(1 s) on their own, and a chunk's log-mel depends only on its samples (with 2.5 ms of
look-ahead) and on the piece's maximum (the clamp). So while the piece is spoken, each chunk
that is complete gets its log-mel power and, with a split encoder, its front end's output (kept
in an encoder.StemMemo under the exact bytes of its log-mel at the maximum so far). At the end
the pass's log-mel is assembled from the kept powers and the rest, and every chunk whose log-mel
is byte-identical to the one computed ahead reuses its stem; the others (a louder tail moves
the clamp) run again. The result is the pass's own either way, with less work after the end.

Only a split encoder has a front end of its own (``encoder_form="split"``); with a merged one only
the log-mel is computed ahead.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..encoder import CHUNK_FRAMES, StemMemo
from .. import mel as melmod
from .. import plan as planmod

CHUNK_SAMPLES = CHUNK_FRAMES * melmod.HOP_LENGTH  # 16000: one conv chunk of audio


class PieceAhead:
    """Log-mel powers and conv stems of the open piece's whole chunks; ``engine``: the loaded
    engine (its ``encoder``, ``n_mels`` and ``features``)."""

    def __init__(self, engine):
        self.engine = engine
        self.split = getattr(engine.encoder, "form", None) == "split"
        self.limit = int(planmod.FINAL_PASS_MAX_SECONDS) + 1  # chunks: a longer piece gets no pass
        self.stems: Optional[StemMemo] = StemMemo(self.limit) if self.split else None
        self.open(None)

    def open(self, start: Optional[int]) -> None:
        """A piece opens at sample ``start`` (None: none): nothing computed yet."""
        self.start = start
        self.powers: list = []  # log10 mel power (n_mels, 100) float64 of chunk k of the piece
        self.keys: list = []  # the log-mel bytes chunk k's stem was computed for (its key in ``stems``)
        self.ceiling = -math.inf
        self.ran = 0  # front-end calls made ahead
        if self.stems is not None:
            self.stems.clear()

    def due(self, audio) -> bool:
        """Whether ``audio`` (a streaming.buffer.AudioBuffer) completes another chunk of the piece."""
        lo = self.start + len(self.powers) * CHUNK_SAMPLES
        return len(self.powers) < self.limit and lo + CHUNK_SAMPLES + melmod.LOOKAHEAD <= audio.pos

    def advance(self, audio) -> None:
        """Compute the chunks of the open piece complete in ``audio`` (a streaming.buffer.AudioBuffer
        holding the piece from its start): their log-mel power, and with a split encoder their
        stems at the piece's maximum so far (again for an earlier chunk whose clamp it moved)."""
        if self.start is None:
            return
        b0, old, first_new = audio.start, self.ceiling, len(self.powers)
        while self.due(audio):
            lo = self.start + len(self.powers) * CHUNK_SAMPLES
            p = melmod.piece_log_mel_power(audio.samples, lo - b0, lo + CHUNK_SAMPLES - b0, self.engine.n_mels,
                                           left_edge=self.start - b0)
            self.powers.append(p)
            self.keys.append(None)
            self.ceiling = max(self.ceiling, float(p.max()))
        if not self.split:
            return
        # the new chunks, and the earlier ones too when the maximum moved (it may move their clamp)
        for k in range(0 if self.ceiling != old else first_new, len(self.powers)):
            chunk = melmod.normalize_log_mel(self.powers[k], self.ceiling)
            key = chunk.tobytes()
            if key != self.keys[k]:  # new, or the maximum moved its clamp: the stem is computed (again)
                if self.keys[k] is not None:
                    self.stems.discard(self.keys[k])  # computed at an older maximum: never asked again
                self.stems.put(key, self.engine.encoder.stem(chunk))
                self.keys[k] = key
                self.ran += 1

    def footprint(self) -> int:
        """Bytes held: the chunks' log-mel power, and their stems with their keys."""
        return sum(p.nbytes for p in self.powers) + (self.stems.nbytes if self.stems is not None else 0)

    def features(self, pcm: np.ndarray) -> np.ndarray:
        """The log-mel of the piece's audio ``pcm`` (from its start), byte-identical to
        ``engine.features(pcm)``: the chunks computed ahead and the frames after them."""
        n = pcm.shape[0]
        k = min(len(self.powers), max(0, (n - melmod.LOOKAHEAD) // CHUNK_SAMPLES))
        if k == 0:
            return self.engine.features(pcm)
        parts = self.powers[:k]
        lo, hi = k * CHUNK_SAMPLES, melmod.n_frames(n) * melmod.HOP_LENGTH
        if hi > lo:
            parts = parts + [melmod.piece_log_mel_power(pcm, lo, hi, self.engine.n_mels, right_edge=n)]
        return melmod.normalize_log_mel(np.concatenate(parts, axis=1))


__all__ = ["PieceAhead"]
