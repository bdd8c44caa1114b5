"""Log-mel front end in numpy, with the official (Whisper feature extractor) semantics.

16 kHz mono -> STFT (periodic Hann 400, hop 160, centred, reflect padding) -> power ->
Slaney mel (128 bins, 0..8 kHz) -> log10 (floor 1e-10) -> drop the last frame ->
clamp at (clip maximum - 8) -> (x + 4) / 4.
"""

from __future__ import annotations

import functools

import numpy as np

from .audio import SAMPLE_RATE  # 16000 Hz

N_FFT = 400  # samples per STFT window (25 ms)
HOP_LENGTH = 160  # samples between frames (10 ms)
N_FREQ = N_FFT // 2 + 1  # 201 one-sided frequency bins
FRAMES_PER_SECOND = SAMPLE_RATE // HOP_LENGTH  # 100 mel frames per second
DYNAMIC_RANGE = 8.0  # log10 units kept below the clip maximum (80 dB)
# A piece [lo, hi) of a longer signal gets the frames the whole-signal front end computes for it
# when its frames see their real neighbours (piece_log_mel_power):
LEFT_CONTEXT = 2 * HOP_LENGTH  # 320 samples before the piece: its first frame needs n_fft/2 = 200
LOOKAHEAD = N_FFT // 2 - HOP_LENGTH  # 40 samples after the piece, needed by its last frame (2.5 ms)
# Frames transformed at a time: the working arrays (windowed frames, spectrum, power, filter bands) stay
# under 20 MB however long the clip; only the (n_mels, frames) result grows with it.
BLOCK_FRAMES = 1000  # 10 s


# Slaney mel scale: linear below 1 kHz (200/3 Hz per mel), logarithmic above (27 mels per factor 6.4)
_F_SP = 200.0 / 3
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = np.log(6.4) / 27.0


def _hz_to_mel(freq: np.ndarray) -> np.ndarray:
    freq = np.asarray(freq, dtype=np.float64)
    log_part = _MIN_LOG_MEL + np.log(np.maximum(freq, 1e-10) / _MIN_LOG_HZ) / _LOGSTEP
    return np.where(freq >= _MIN_LOG_HZ, log_part, freq / _F_SP)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    return np.where(mel >= _MIN_LOG_MEL, _MIN_LOG_HZ * np.exp(_LOGSTEP * (mel - _MIN_LOG_MEL)), _F_SP * mel)


@functools.lru_cache(maxsize=4)
def mel_filters(n_mels: int = 128, sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """Slaney-normalised triangular mel filters, ``(n_mels, n_fft // 2 + 1)`` float64, 0..sr/2 Hz."""
    n_freq = n_fft // 2 + 1
    fft_freqs = np.linspace(0.0, sample_rate / 2, n_freq)
    mel_points = np.linspace(_hz_to_mel(0.0), _hz_to_mel(sample_rate / 2), n_mels + 2)
    hz_points = _mel_to_hz(mel_points)
    widths = np.diff(hz_points)
    ramps = hz_points[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (hz_points[2:] - hz_points[:-2]))[:, None]  # Slaney area normalisation
    weights.setflags(write=False)
    return weights


@functools.lru_cache(maxsize=4)
def mel_bands(n_mels: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """``mel_filters(n_mels)`` as bands: ``(columns, weights)``, both ``(n_mels, width)`` (int64
    frequency bins, float64), a band's nonzero weights padded with zero weights on its last bin.
    Each triangular filter covers a few bins (at most 9 of 201 at 128 mels), so the filterbank
    product is a short sum per band (log_mel_power)."""
    w = mel_filters(n_mels)
    nonzero = [np.flatnonzero(row) for row in w]
    width = max(1, max(len(c) for c in nonzero))
    columns = np.zeros((n_mels, width), np.int64)
    weights = np.zeros((n_mels, width), np.float64)
    for m, c in enumerate(nonzero):
        if len(c):
            columns[m] = np.concatenate([c, np.full(width - len(c), c[-1])])
            weights[m, :len(c)] = w[m, c]
    columns.setflags(write=False)
    weights.setflags(write=False)
    return columns, weights


@functools.lru_cache(maxsize=2)
def _hann(n_fft: int) -> np.ndarray:
    w = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n_fft) / n_fft)  # periodic Hann
    w.setflags(write=False)
    return w


def n_frames(n_samples: int) -> int:
    """Mel frames produced for ``n_samples`` of 16 kHz audio: ``floor(n / 160)``."""
    return n_samples // HOP_LENGTH


def log_mel_power(audio: np.ndarray, n_mels: int = 128) -> np.ndarray:
    """log10 mel power before the clip-global clamp, ``(n_mels, floor(n/160))`` float64.

    Kept separate so streaming code can apply its own clamp policy.
    """
    x = np.asarray(audio, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"log_mel expects mono audio of shape (n,), got {x.shape}")
    if x.shape[0] < HOP_LENGTH:
        raise ValueError(f"audio too short for one mel frame: {x.shape[0]} samples < {HOP_LENGTH}")
    pad = N_FFT // 2  # centred frames; numpy reflects repeatedly when the clip is shorter than pad
    padded = np.pad(x, (pad, pad), mode="reflect")
    t = n_frames(x.shape[0])
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP_LENGTH][:t]
    out = np.empty((n_mels, t), np.float64)
    columns, weights = mel_bands(n_mels)
    for i in range(0, t, BLOCK_FRAMES):  # in blocks: the working arrays stay small (BLOCK_FRAMES)
        spec = np.fft.rfft(frames[i:i + BLOCK_FRAMES] * _hann(N_FFT), axis=-1)
        power = spec.real**2 + spec.imag**2  # (frames, 201)
        # the filterbank product band by band, not as a matrix product: a BLAS matrix product
        # wakes numpy's BLAS threads, which then spin and slow the encoder run that follows
        # (docs/benchmarks.md "The wait before the first call"); the sums are the same to 1e-15
        bands = power[:, columns]  # (frames, n_mels, width)
        bands *= weights
        mel = bands.sum(axis=-1).T  # (n_mels, frames)
        out[:, i:i + BLOCK_FRAMES] = np.log10(np.maximum(mel, 1e-10))
    return out


def piece_log_mel_power(audio: np.ndarray, lo: int, hi: int, n_mels: int = 128, *, left_edge: int = 0,
                        right_edge: int | None = None) -> np.ndarray:
    """log10 mel power of the frames of the piece ``[lo, hi)`` of ``audio`` (sample indices) as
    ``log_mel_power`` of the whole clip ``audio[left_edge:right_edge]`` gives them, computed from
    ``LEFT_CONTEXT`` samples before the piece and ``LOOKAHEAD`` after it: ``(n_mels, (hi - lo) //
    160)`` float64. Streams and long files compute a clip piece by piece with it.

    ``lo - left_edge`` must be a multiple of 160 (frames count from the clip's start); a piece
    that starts the clip passes ``lo == left_edge`` (reflect padding there, as for a whole clip).
    ``right_edge``: the clip's end when the piece ends it (reflect padding there, read up to it);
    None: the clip goes on, and ``audio`` must hold the ``LOOKAHEAD`` samples after ``hi``.
    """
    a = lo if lo - LEFT_CONTEXT < left_edge else lo - LEFT_CONTEXT
    b = hi + LOOKAHEAD if right_edge is None else right_edge
    power = log_mel_power(audio[a:b], n_mels)
    off = (lo - a) // HOP_LENGTH
    return power[:, off:off + (hi - lo) // HOP_LENGTH]


def normalize_log_mel(log_spec: np.ndarray, ceiling: float | None = None) -> np.ndarray:
    """Clamp at ``ceiling - 8`` (default: the maximum of ``log_spec``) and scale to ``(x + 4) / 4``."""
    top = float(log_spec.max()) if ceiling is None else float(ceiling)
    return ((np.maximum(log_spec, top - DYNAMIC_RANGE) + 4.0) / 4.0).astype(np.float32)


def log_mel(audio: np.ndarray, n_mels: int = 128) -> np.ndarray:
    """Official log-mel features of a whole clip.

    Args:
      audio: ``(n,)`` float 16 kHz mono, n >= 160.
    Returns:
      ``(n_mels, floor(n / 160))`` float32, clamped with the clip-global maximum.
    """
    return normalize_log_mel(log_mel_power(audio, n_mels))
