"""Audio input: files or arrays to 16 kHz mono float32 in [-1, 1].

Follows the official loader: channels are averaged, other sample rates are resampled
(band-limited, soxr), and if the peak exceeds 1.0 the signal is divided by its peak,
then clipped to [-1, 1].
"""

from __future__ import annotations

import logging
import os
from typing import Union

import numpy as np

from .errors import Qwen3ASRError

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000  # Hz, what the model expects
MIN_SAMPLES = 160  # one mel hop (10 ms): anything shorter yields no feature frame

AudioInput = Union[str, os.PathLike, np.ndarray]


class AudioError(Qwen3ASRError, ValueError):
    """Audio that cannot be used: unreadable, empty, non-finite or of the wrong shape."""


def load_audio(path: Union[str, os.PathLike]) -> tuple[np.ndarray, int]:
    """Read an audio file (WAV, FLAC, OGG/Vorbis, ... anything libsndfile reads).

    Returns ``(samples, sample_rate)``: samples are float32, shape ``(n,)`` or
    ``(n, channels)``; integer formats are scaled to [-1, 1) by libsndfile.
    """
    import soundfile as sf

    path = os.fspath(path)
    if not os.path.exists(path):
        raise AudioError(f"audio file not found: {path}")
    if os.path.isdir(path):
        raise AudioError(f"audio path is a directory, not a file: {path}")
    if os.path.getsize(path) == 0:
        raise AudioError(f"audio file is empty (0 bytes): {path}")
    try:
        data, sr = sf.read(path, dtype="float32", always_2d=False)
    except (sf.LibsndfileError, RuntimeError, TypeError) as exc:
        raise AudioError(
            f"cannot decode {path} as audio ({exc}). Supported: WAV, FLAC, OGG/Vorbis and the "
            f"other formats libsndfile reads; convert other formats first, e.g. "
            f"`ffmpeg -i input -ar 16000 -ac 1 out.wav`."
        ) from None
    return np.asarray(data, dtype=np.float32), int(sr)


def to_mono(samples: np.ndarray) -> np.ndarray:
    """Average channels. Accepts ``(n,)``, ``(n, channels)`` or ``(channels, n)`` for <= 8 channels."""
    if samples.ndim == 1:
        return samples
    if samples.ndim == 2:
        if samples.shape[0] <= 8 and samples.shape[1] > samples.shape[0]:
            samples = samples.T  # (channels, n) -> (n, channels)
        return samples.mean(axis=1, dtype=np.float64).astype(np.float32)
    raise AudioError(f"audio array must be 1-D (samples) or 2-D (samples x channels); got shape {samples.shape}")


def resample(samples: np.ndarray, orig_sr: int, target_sr: int = SAMPLE_RATE) -> np.ndarray:
    """Band-limited resampling (soxr, very high quality) of a mono float32 signal."""
    if orig_sr == target_sr:
        return samples
    import soxr

    return soxr.resample(samples, orig_sr, target_sr, quality="VHQ").astype(np.float32, copy=False)


def prepare_audio(audio: AudioInput, sample_rate: int | None = None) -> np.ndarray:
    """Any supported input to what the model consumes.

    Args:
      audio: a file path, or a numpy array (float or integer PCM; ``(n,)``, ``(n, ch)`` or
        ``(ch, n)``).
      sample_rate: rate of an array input in Hz (default 16000); ignored for files.

    Returns:
      ``(n,)`` float32 mono at 16 kHz, peak-normalised if it exceeded 1.0, clipped to [-1, 1].

    Raises:
      AudioError: unreadable, empty, too short (< 10 ms), non-finite, or a bad shape/dtype.
    """
    if isinstance(audio, (str, os.PathLike)):
        source = os.fspath(audio)
        samples, sr = load_audio(source)
    elif isinstance(audio, np.ndarray):
        source = "audio array"
        sr = SAMPLE_RATE if sample_rate is None else int(sample_rate)
        samples = _array_to_float(audio)
    else:
        raise AudioError(
            f"audio must be a file path or a numpy array, got {type(audio).__name__}"
        )
    if sr <= 0:
        raise AudioError(f"sample rate must be positive, got {sr}")
    if samples.size == 0:
        raise AudioError(f"{source} contains no samples")
    if not np.all(np.isfinite(samples)):
        raise AudioError(f"{source} contains NaN or infinite samples; fix the signal before transcribing")
    samples = to_mono(samples)
    samples = resample(samples, sr, SAMPLE_RATE)
    if samples.shape[0] < MIN_SAMPLES:
        raise AudioError(
            f"{source} is too short: {samples.shape[0] / SAMPLE_RATE * 1000:.1f} ms after resampling "
            f"to 16 kHz; at least {MIN_SAMPLES / SAMPLE_RATE * 1000:.0f} ms is needed"
        )
    peak = float(np.max(np.abs(samples)))
    if peak > 1.0:
        samples = samples / peak
    return np.clip(samples, -1.0, 1.0).astype(np.float32, copy=False)


def _array_to_float(audio: np.ndarray) -> np.ndarray:
    if audio.dtype.kind == "f":
        return audio.astype(np.float32, copy=False)
    if audio.dtype.kind == "i":
        scale = float(2 ** (8 * audio.dtype.itemsize - 1))
        return (audio.astype(np.float64) / scale).astype(np.float32)
    if audio.dtype.kind == "u":
        half = float(2 ** (8 * audio.dtype.itemsize - 1))
        return ((audio.astype(np.float64) - half) / half).astype(np.float32)
    raise AudioError(f"audio array dtype {audio.dtype} is not PCM; use float32 or an integer type")
