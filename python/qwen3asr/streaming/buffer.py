"""The audio a stream keeps: the samples from ``start`` to ``pos`` of everything received."""

from __future__ import annotations

import numpy as np


class AudioBuffer:
    """(n,) float32 16 kHz samples received so far, of which the newest are kept."""

    def __init__(self):
        self.clear(0)

    def clear(self, pos: int) -> None:
        """Keep nothing; ``pos`` samples were received (0: start over)."""
        self.samples = np.zeros(0, np.float32)  # kept audio, starting at absolute sample ``start``
        self.start = pos
        self.pos = pos  # samples received

    def append(self, pcm: np.ndarray) -> None:
        self.samples = np.concatenate([self.samples, pcm])
        self.pos += pcm.shape[0]

    def __call__(self, a: int, b: int) -> np.ndarray:
        """The samples [a, b) (absolute sample numbers), which must still be kept."""
        if a < self.start:
            raise RuntimeError(f"internal: audio at sample {a} already dropped (kept from {self.start})")
        return self.samples[a - self.start:b - self.start]

    def keep_from(self, keep: int) -> None:
        """Drop the samples before ``keep`` (never any that were dropped already)."""
        if keep > self.start:
            self.samples = self.samples[keep - self.start:].copy()
            self.start = keep

    @property
    def nbytes(self) -> int:
        return self.samples.nbytes


__all__ = ["AudioBuffer"]
