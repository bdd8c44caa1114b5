"""Raw PCM bytes of any rate, sample width and channel count -> 16 kHz mono float32.

Used by the Wyoming server (qwen3asr.server.wyoming), whose audio events carry ``rate``,
``width`` (bytes per sample) and ``channels``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..audio import SAMPLE_RATE

RATE_RANGE = (1000, 384000)  # accepted sample rates (Hz)
WIDTHS = (1, 2, 3, 4)  # accepted sample widths (bytes)
MAX_CHANNELS = 32


class PcmFormatError(ValueError):
    """A PCM layout that cannot be converted (the message says what is accepted)."""


@dataclasses.dataclass(frozen=True)
class PcmFormat:
    """Raw PCM layout of an utterance: rate (Hz), width (bytes per sample), channels."""

    rate: int
    width: int
    channels: int

    @classmethod
    def from_data(cls, data: dict) -> "PcmFormat":
        """Validated format from a Wyoming audio-start/audio-chunk ``data``; PcmFormatError if unusable."""
        vals = {k: data.get(k) for k in ("rate", "width", "channels")}
        bad = [k for k, v in vals.items() if isinstance(v, bool) or not isinstance(v, int)]
        if bad:
            raise PcmFormatError(f"audio format needs integer rate, width and channels; got {vals}")
        fmt = cls(**vals)
        problems = []
        if not RATE_RANGE[0] <= fmt.rate <= RATE_RANGE[1]:
            problems.append(f"rate must be {RATE_RANGE[0]}..{RATE_RANGE[1]} Hz (got {fmt.rate})")
        if fmt.width not in WIDTHS:
            problems.append(f"width must be one of {', '.join(map(str, WIDTHS))} bytes (got {fmt.width})")
        if not 1 <= fmt.channels <= MAX_CHANNELS:
            problems.append(f"channels must be 1..{MAX_CHANNELS} (got {fmt.channels})")
        if problems:
            raise PcmFormatError("unsupported audio format: " + "; ".join(problems))
        return fmt

    @property
    def frame_bytes(self) -> int:
        return self.width * self.channels


class PcmConverter:
    """Raw PCM bytes of one format -> (n,) float32 mono 16 kHz, chunk by chunk.

    Widths: 1 = unsigned 8-bit, 2/3/4 = signed little-endian 16/24/32-bit (as WAV and the
    ``wyoming`` package's audioop conversions). Channels are averaged; other rates are
    resampled with a streaming soxr resampler (``flush()`` returns its last samples). A
    partial frame at the end of a chunk is kept for the next one.
    """

    def __init__(self, fmt: PcmFormat):
        self.fmt = fmt
        self._rest = b""
        self._resampler = None
        if fmt.rate != SAMPLE_RATE:
            import soxr

            self._resampler = soxr.ResampleStream(fmt.rate, SAMPLE_RATE, 1, dtype="float32", quality="VHQ")

    def convert(self, data: bytes) -> np.ndarray:
        data = self._rest + data
        n = len(data) // self.fmt.frame_bytes * self.fmt.frame_bytes
        self._rest = data[n:]
        x = _decode_pcm(data[:n], self.fmt.width).reshape(-1, self.fmt.channels)
        mono = x[:, 0] if self.fmt.channels == 1 else x.mean(axis=1, dtype=np.float64).astype(np.float32)
        if self._resampler is not None:
            mono = self._resampler.resample_chunk(mono)
        return np.asarray(mono, dtype=np.float32)

    def flush(self) -> np.ndarray:
        if self._resampler is None:
            return np.zeros(0, np.float32)
        return np.asarray(self._resampler.resample_chunk(np.zeros(0, np.float32), last=True), dtype=np.float32)


def _decode_pcm(data: bytes, width: int) -> np.ndarray:
    """Interleaved PCM bytes -> float32 samples in [-1, 1)."""
    if width == 1:
        return (np.frombuffer(data, np.uint8).astype(np.float32) - 128.0) / 128.0
    if width == 2:
        return np.frombuffer(data, "<i2").astype(np.float32) / 32768.0
    if width == 3:
        b = np.frombuffer(data, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        v = np.where(v >= 1 << 23, v - (1 << 24), v)
        return (v / float(1 << 23)).astype(np.float32)
    return (np.frombuffer(data, "<i4").astype(np.float64) / float(1 << 31)).astype(np.float32)
