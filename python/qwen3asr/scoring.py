"""The forced aligner's backend seam: score the ``<timestamp>`` slots of one embedded input.

The aligner is not autoregressive: one forward pass over ``[audio_start] audio [audio_end]
w1 <ts> <ts> w2 ...`` with causal attention (as the official model runs it), and the time-class
logits at the slot rows. A stage-level seam beside :class:`~qwen3asr.encoder.EncoderRunner` and
:class:`~qwen3asr.decoding.TextDecoder`: the backends implement it without importing the aligner
(``qwen3asr.aligner.model`` drives it). Implemented on the CPU by ``backends.onnx.OnnxSlotScorer``
(the aligner's decoder graph, whose head has the time classes) and on the board by
``backends.rk.aligner.RKLLMSlotScorer`` (RKLLM's last hidden layer, the head on the host).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class SlotScorer(Protocol):
    """One per loaded aligner; not safe for concurrent calls."""

    name: str  # backend name ("onnx", "rk")
    max_positions: int  # the longest input (rows) it takes

    def score(self, embeds: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``embeds`` (L, hidden) float32, the whole embedded input; ``rows`` (K,) int64 indices
        of the slot rows -> logits (K, classes) float32."""

    def close(self) -> None:
        """Free the runtime (safe to call twice)."""


__all__ = ["SlotScorer"]
