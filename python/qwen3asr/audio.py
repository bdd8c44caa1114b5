"""Audio input: files, arrays, streamed chunks and raw PCM bytes to 16 kHz mono float32 in [-1, 1].

Whole inputs (``prepare_audio``) follow the official loader: channels are averaged, other
sample rates are resampled (band-limited, soxr), and if the peak exceeds 1.0 the signal is
divided by its peak, then clipped to [-1, 1]. Files are read through ``AudioFile``, which
gives the same samples block by block, so a long file is never held whole. Streamed chunks, which cannot be
peak-normalised, are validated by ``check_pcm`` / ``PcmChecker`` and clipped. Raw PCM bytes
of any layout (the servers' and the microphone's input) become 16 kHz mono float32 chunk by
chunk through ``PcmConverter``.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
from typing import BinaryIO, Iterator, Optional, Union

import numpy as np

from . import checks
from .errors import Qwen3ASRError

logger = logging.getLogger(__name__)

SAMPLE_RATE = 16000  # Hz, what the model expects (the one definition; mel, vad, stream use it)
MAX_STREAM_SECONDS = float(2**63 // SAMPLE_RATE)  # positions in a stream stay 64-bit sample counts (18 million years)
MIN_SAMPLES = 160  # one mel hop (10 ms): anything shorter yields no feature frame
# soxr quality of every resampling, whole inputs and streams alike. "VHQ" rather than "HQ":
# 48 kHz -> 16 kHz streamed in 100 ms blocks costs 0.27 instead of 0.24 ms per audio second
# (x86 host, soxr 1.1.0; noise next to decoding), no transcript of the demo model changed
# (audio/*.wav at 44.1 and 48 kHz, 1 s and 2 s chunks and one pass), and a file and the same
# audio streamed get the same filter.
RESAMPLE_QUALITY = "VHQ"
PCM_RATES = (1000, 384000)  # Hz accepted for raw PCM and arrays: what soxr and audio hardware use (the Wyoming range)
PCM_WIDTHS = (1, 2, 3, 4)  # bytes per integer sample
PCM_ENCODINGS = ("int", "float")  # PcmFormat.encoding: integer PCM, or IEEE float32
PCM_MAX_CHANNELS = 32  # interleaved channels accepted (averaged to mono)
# Audio decoded from a file at a time (AudioFile): 10 s, 0.6 MB of 16 kHz float32 (at 48 kHz
# stereo 3.8 MB before mixing and resampling), whatever the file's length.
BLOCK_SECONDS = 10

AudioInput = Union[str, os.PathLike, np.ndarray]


class AudioError(Qwen3ASRError, ValueError):
    """Audio that cannot be used: unreadable, empty, non-finite or of the wrong shape."""


def load_audio(path: Union[str, os.PathLike]) -> tuple[np.ndarray, int]:
    """Read an audio file (WAV, FLAC, OGG/Vorbis, ... anything libsndfile reads) whole.

    Returns ``(samples, sample_rate)``: samples are float32, shape ``(n,)`` or
    ``(n, channels)``; integer formats are scaled to [-1, 1) by libsndfile.
    """
    with _open_sound(path) as f:
        data = f.read(dtype="float32", always_2d=False)
        return np.asarray(data, dtype=np.float32), int(f.samplerate)


def _open_sound(source, name: Optional[str] = None):
    """A soundfile.SoundFile open for reading ``source`` (a path, or a binary file object named
    ``name`` in messages); AudioError naming what is wrong."""
    import soundfile as sf

    if isinstance(source, (str, os.PathLike)):
        problem = checks.path("audio path", source)
        if problem:
            raise AudioError(problem)
        source = name = os.fspath(source)
        if not os.path.exists(source):
            raise AudioError(f"audio file not found: {source}")
        if os.path.isdir(source):
            raise AudioError(f"audio path is a directory, not a file: {source}")
        if os.path.getsize(source) == 0:
            raise AudioError(f"audio file is empty (0 bytes): {source}")
    try:
        return sf.SoundFile(source)
    except (sf.LibsndfileError, RuntimeError, TypeError) as exc:
        reason = str(exc).split(": ", 1)[-1] if not isinstance(source, str) else str(exc)  # no object repr
        raise AudioError(
            f"cannot decode {name or 'the audio file'} as audio ({reason}). Supported: WAV, FLAC, OGG/Vorbis and "
            f"the other formats libsndfile reads; convert other formats first, e.g. "
            f"`ffmpeg -i input -ar 16000 -ac 1 out.wav`."
        ) from None


class AudioFile:
    """An audio file read block by block: the samples ``prepare_audio`` gives for it, (n,) float32
    16 kHz mono, peak-normalised and clipped, without ever holding them all.

    ``source``: a path, or a seekable binary file object (an upload; ``name`` names it in
    messages). Opening reads the file once (its length at 16 kHz, its peak, non-finite samples:
    the AudioErrors of prepare_audio); ``blocks()`` and ``read()`` decode it again. Memory: a
    few blocks of BLOCK_SECONDS whatever the file's length (``read`` returns what it is asked
    for). ``keep=True`` (a reader of the whole file, as prepare_audio): the opening pass keeps
    its blocks and the first ``blocks()`` / ``read()`` hands them out, freeing each, instead of
    decoding again. Use as a context manager or call ``close()``.
    """

    def __init__(self, source: Union[str, os.PathLike, BinaryIO], name: Optional[str] = None, *,
                 keep: bool = False):
        self.name = os.fspath(source) if isinstance(source, (str, os.PathLike)) else (name or "the audio file")
        self._file = _open_sound(source, self.name)
        try:
            self.rate = int(self._file.samplerate)  # Hz of the file
            if self.rate <= 0:
                raise AudioError(f"sample rate must be positive, got {self.rate}")
            n, peak = 0, 0.0
            kept = collections.deque() if keep else None
            for block in self._decoded():
                n += block.shape[0]
                peak = max(peak, float(np.max(np.abs(block))))
                if kept is not None:
                    kept.append(block)
            self._kept = kept
        except BaseException:
            self.close()
            raise
        if n == 0:
            self.close()
            raise AudioError(f"{self.name} contains no samples")
        if n < MIN_SAMPLES:
            self.close()
            raise AudioError(f"{self.name} is too short: {n / SAMPLE_RATE * 1000:.1f} ms after resampling "
                             f"to 16 kHz; at least {MIN_SAMPLES / SAMPLE_RATE * 1000:.0f} ms is needed")
        self.n_samples = n  # samples at 16 kHz
        self._peak = peak if peak > 1.0 else None  # divided by it, as prepare_audio does

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "AudioFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _decoded(self) -> Iterator[np.ndarray]:
        """The file from its start: (n,) float32 16 kHz mono blocks before peak normalisation."""
        f = self._file
        f.seek(0)
        resampler = None
        if self.rate != SAMPLE_RATE:
            import soxr

            resampler = soxr.ResampleStream(self.rate, SAMPLE_RATE, 1, dtype="float32", quality=RESAMPLE_QUALITY)
        for block in _guarded(f.blocks(blocksize=BLOCK_SECONDS * self.rate, dtype="float32", always_2d=True),
                              self.name):
            if not np.all(np.isfinite(block)):
                raise AudioError(f"{self.name} contains NaN or infinite samples; fix the signal before transcribing")
            mono = block[:, 0] if block.shape[1] == 1 else block.mean(axis=1, dtype=np.float64).astype(np.float32)
            if resampler is not None:  # chunked soxr gives the samples soxr.resample gives for the whole
                mono = resampler.resample_chunk(mono)
            if mono.size:
                yield np.asarray(mono, dtype=np.float32)
        if resampler is not None:
            tail = resampler.resample_chunk(np.zeros(0, np.float32), last=True)
            if tail.size:
                yield np.asarray(tail, dtype=np.float32)

    def _once_kept(self) -> Iterator[np.ndarray]:
        """The opening pass's blocks the first time (each freed once handed out), else _decoded()."""
        kept, self._kept = self._kept, None
        if kept is None:
            yield from self._decoded()
            return
        while kept:
            yield kept.popleft()

    def blocks(self, start: int = 0, stop: Optional[int] = None) -> Iterator[np.ndarray]:
        """The samples [start, stop) (16 kHz sample indices; stop None: the end) in blocks of
        about BLOCK_SECONDS: (n,) float32, as prepare_audio gives them."""
        stop = self.n_samples if stop is None else min(stop, self.n_samples)
        pos = 0
        for block in self._once_kept():
            a, b = max(start - pos, 0), min(stop - pos, block.shape[0])
            pos += block.shape[0]
            if a >= b:
                if pos >= stop:
                    return
                continue
            part = block[a:b]
            if self._peak is not None:
                part = part / self._peak
            yield np.clip(part, -1.0, 1.0).astype(np.float32, copy=False)
            if pos >= stop:
                return

    def read(self, start: int = 0, stop: Optional[int] = None) -> np.ndarray:
        """The samples [start, stop) as one (n,) float32 array."""
        stop = self.n_samples if stop is None else min(stop, self.n_samples)
        out = np.empty(max(0, stop - start), np.float32)
        i = 0
        for block in self.blocks(start, stop):
            out[i:i + block.shape[0]] = block
            i += block.shape[0]
        return out


def _guarded(blocks: Iterator[np.ndarray], name: str) -> Iterator[np.ndarray]:
    """``blocks`` with a decoding error in the middle of the file as an AudioError."""
    import soundfile as sf

    try:
        yield from blocks
    except (sf.LibsndfileError, RuntimeError) as exc:
        raise AudioError(f"cannot decode {name} past its start ({exc}); the file is damaged or truncated") from None


class ArrayAudio:
    """Prepared (n,) float32 16 kHz audio behind the reading interface of AudioFile."""

    def __init__(self, pcm: np.ndarray):
        self.pcm = pcm
        self.n_samples = pcm.shape[0]

    def blocks(self, start: int = 0, stop: Optional[int] = None) -> Iterator[np.ndarray]:
        stop = self.n_samples if stop is None else min(stop, self.n_samples)
        step = BLOCK_SECONDS * SAMPLE_RATE
        for a in range(start, stop, step):
            yield self.pcm[a:min(stop, a + step)]

    def read(self, start: int = 0, stop: Optional[int] = None) -> np.ndarray:
        return self.pcm[start:stop]


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
    """Band-limited resampling (soxr, RESAMPLE_QUALITY) of a mono float32 signal."""
    if orig_sr == target_sr:
        return samples
    import soxr

    return soxr.resample(samples, orig_sr, target_sr, quality=RESAMPLE_QUALITY).astype(np.float32, copy=False)


def prepare_audio(audio: AudioInput, sample_rate: int | None = None) -> np.ndarray:
    """Any supported input to what the model consumes.

    Args:
      audio: a file path, or a numpy array (float or integer PCM; ``(n,)``, ``(n, ch)`` or
        ``(ch, n)``).
      sample_rate: rate of an array input in Hz (default 16000), 1000..384000 (PCM_RATES); a file
        has its own (a valid sample_rate given with a file is ignored).

    Returns:
      ``(n,)`` float32 mono at 16 kHz, peak-normalised if it exceeded 1.0, clipped to [-1, 1].

    Raises:
      AudioError: unreadable, empty, too short (< 10 ms), non-finite, or a bad shape/dtype.
    """
    rate = SAMPLE_RATE if sample_rate is None else checked_rate(sample_rate)  # checked even when ignored
    if isinstance(audio, (str, os.PathLike)):
        with AudioFile(audio, keep=True) as f:  # the same samples, read in blocks, decoded once
            return f.read()
    if isinstance(audio, np.ndarray):
        source = "audio array"
        sr = rate
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


def checked_rate(sample_rate) -> int:
    """The sample rate of an array input as an int; AudioError unless it is a whole number of Hz
    within PCM_RATES (a non-positive one keeps its own message)."""
    from . import checks

    if checks.is_number(sample_rate) and sample_rate <= 0:
        raise AudioError(f"sample rate must be positive, got {sample_rate}")
    if not (checks.is_number(sample_rate) and float(sample_rate).is_integer()) or \
            checks.integer("sample_rate", int(sample_rate), *PCM_RATES):
        raise AudioError(checks.problem("sample_rate", checks.requirement("a whole number of Hz", *PCM_RATES),
                                        sample_rate))
    return int(sample_rate)


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


# ---------------------------------------------------------------------------- streamed chunks
def check_pcm(pcm: np.ndarray, sample_rate: int = SAMPLE_RATE, *, where: str = "feed_audio") -> np.ndarray:
    """A chunk of streamed audio, validated: ``(n,)`` float32 16 kHz mono, clipped to [-1, 1].

    Accepts ``(n,)`` or ``(n, 1)`` float32 at 16 kHz; anything else raises AudioError (a
    ValueError) whose message starts with ``where`` (the caller users know) and says how to
    convert. Samples beyond [-1, 1] are clipped and a warning is logged on every such call;
    a stream uses PcmChecker, which warns once.
    """
    pcm, clipped = _validate(pcm, sample_rate, where)
    if clipped:
        logger.warning("%s: audio exceeds [-1, 1]; clipping (scale the input to avoid distortion)", where)
    return pcm


class PcmChecker:
    """``check_pcm`` for the consecutive chunks of one stream: the clipping warning is logged once.

    Make one per stream (and a new one when the stream restarts); call it on every chunk.
    """

    def __init__(self, where: str = "feed_audio"):
        self.where = where  # named at the start of every error message
        self.clipped = False  # some chunk exceeded [-1, 1] (the warning was logged then)

    def __call__(self, pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
        """The validated ``(n,)`` float32 chunk (see check_pcm)."""
        pcm, clipped = _validate(pcm, sample_rate, self.where)
        if clipped and not self.clipped:
            logger.warning("%s: stream audio exceeds [-1, 1]; clipping (scale the input to avoid distortion)",
                           self.where)
            self.clipped = True
        return pcm


def _validate(pcm, sample_rate: int, where: str) -> tuple[np.ndarray, bool]:
    """(the ``(n,)`` float32 chunk clipped to [-1, 1], whether clipping changed it); AudioError if unusable."""
    if not (checks.is_number(sample_rate) and sample_rate == SAMPLE_RATE):
        raise AudioError(f"{where} needs {SAMPLE_RATE} Hz audio, got {checks.show(sample_rate)} Hz; resample first "
                         f"(qwen3asr.audio.resample or soxr.resample(pcm, {checks.show(sample_rate)}, {SAMPLE_RATE}))")
    if not isinstance(pcm, np.ndarray):
        raise AudioError(f"{where} needs a numpy float32 array, got {type(pcm).__name__}")
    if pcm.dtype != np.float32:
        raise AudioError(f"{where} needs float32 samples in [-1, 1], got dtype {pcm.dtype}; convert int16 "
                         f"with pcm.astype(np.float32) / 32768 and float64 with pcm.astype(np.float32)")
    if pcm.ndim == 2 and pcm.shape[1] == 1:
        pcm = pcm[:, 0]
    if pcm.ndim != 1:
        raise AudioError(f"{where} needs mono audio of shape (samples,), got shape {pcm.shape}; "
                         f"mix channels first, e.g. pcm.mean(axis=1)")
    if not np.all(np.isfinite(pcm)):
        raise AudioError(f"{where} got NaN or infinite samples")
    if pcm.size and float(np.max(np.abs(pcm))) > 1.0:
        return np.clip(pcm, -1.0, 1.0), True
    return pcm, False


# ---------------------------------------------------------------------------- raw PCM bytes
class PcmFormatError(AudioError):
    """A PCM layout that cannot be converted (the message says what is accepted)."""


@dataclasses.dataclass(frozen=True)
class PcmFormat:
    """Layout of raw interleaved little-endian PCM bytes (validated here, PcmFormatError)."""

    rate: int  # Hz, within PCM_RATES
    width: int  # bytes per sample: "int" 1 (unsigned 8-bit) or 2/3/4 (signed); "float" 4
    channels: int  # interleaved, 1..PCM_MAX_CHANNELS; averaged to mono
    encoding: str = "int"  # "int", or "float" (IEEE float32 in [-1, 1])

    def __post_init__(self):
        vals = {"rate": self.rate, "width": self.width, "channels": self.channels}
        if any(isinstance(v, bool) or not isinstance(v, int) for v in vals.values()):
            shown = ", ".join(f"{k!r}: {checks.show(v)}" for k, v in vals.items())
            raise PcmFormatError(f"audio format needs integer rate, width and channels; got {{{shown}}}")
        problems = []
        if not PCM_RATES[0] <= self.rate <= PCM_RATES[1]:
            problems.append(f"rate must be {PCM_RATES[0]}..{PCM_RATES[1]} Hz (got {checks.show(self.rate)})")
        if self.encoding not in PCM_ENCODINGS:
            problems.append(f"encoding must be one of {', '.join(PCM_ENCODINGS)} (got {checks.show(self.encoding)})")
        elif self.encoding == "float" and self.width != 4:
            problems.append(f"width must be 4 bytes for float samples (got {checks.show(self.width)})")
        elif self.width not in PCM_WIDTHS:
            problems.append(f"width must be one of {', '.join(map(str, PCM_WIDTHS))} bytes "
                            f"(got {checks.show(self.width)})")
        if not 1 <= self.channels <= PCM_MAX_CHANNELS:
            problems.append(f"channels must be 1..{PCM_MAX_CHANNELS} (got {checks.show(self.channels)})")
        if problems:
            raise PcmFormatError("unsupported audio format: " + "; ".join(problems))

    @classmethod
    def from_data(cls, data: dict) -> "PcmFormat":
        """The integer format of a mapping with ``rate``, ``width`` and ``channels`` (a Wyoming
        audio-start / audio-chunk ``data``); PcmFormatError if unusable."""
        return cls(data.get("rate"), data.get("width"), data.get("channels"))

    @property
    def frame_bytes(self) -> int:
        """Bytes per frame (one sample of every channel)."""
        return self.width * self.channels


class PcmConverter:
    """Raw PCM bytes of one format -> (n,) float32 mono 16 kHz, chunk by chunk.

    Integer widths as WAV and the ``wyoming`` package's audioop conversions: 1 = unsigned
    8-bit, 2/3/4 = signed little-endian 16/24/32-bit; "float" is little-endian float32 and must
    be finite. Channels are averaged. Other rates go through a streaming soxr resampler
    (RESAMPLE_QUALITY) that keeps its phase across chunks; ``flush()`` returns its last samples
    at the end. A partial frame at the end of a chunk is kept for the next one.
    """

    def __init__(self, fmt: PcmFormat):
        self.fmt = fmt
        self.frames_in = 0  # whole input frames converted so far (fmt.rate per second)
        self._rest = b""  # a partial frame, completed by the next chunk
        self._resampler = None
        if fmt.rate != SAMPLE_RATE:
            import soxr

            self._resampler = soxr.ResampleStream(fmt.rate, SAMPLE_RATE, 1, dtype="float32",
                                                  quality=RESAMPLE_QUALITY)

    def convert(self, data: bytes) -> np.ndarray:
        """(n,) float32 16 kHz mono of the whole frames so far; AudioError for non-finite floats."""
        data = self._rest + data
        n = len(data) // self.fmt.frame_bytes * self.fmt.frame_bytes
        self._rest = data[n:]
        x = _decode_pcm(data[:n], self.fmt).reshape(-1, self.fmt.channels)
        self.frames_in += x.shape[0]
        mono = x[:, 0] if self.fmt.channels == 1 else x.mean(axis=1, dtype=np.float64).astype(np.float32)
        if self._resampler is not None:
            mono = self._resampler.resample_chunk(mono)
        return np.asarray(mono, dtype=np.float32)

    def flush(self) -> np.ndarray:
        """The resampler's last (n,) float32 samples: call once, after the last chunk."""
        if self._resampler is None:
            return np.zeros(0, np.float32)
        return np.asarray(self._resampler.resample_chunk(np.zeros(0, np.float32), last=True), dtype=np.float32)


def _decode_pcm(data: bytes, fmt: PcmFormat) -> np.ndarray:
    """Interleaved PCM bytes -> float32 samples in [-1, 1)."""
    if fmt.encoding == "float":
        x = np.frombuffer(data, "<f4").astype(np.float32)
        if not np.all(np.isfinite(x)):
            raise AudioError("float32 samples must be finite")
        return x
    if fmt.width == 1:
        return (np.frombuffer(data, np.uint8).astype(np.float32) - 128.0) / 128.0
    if fmt.width == 2:
        return np.frombuffer(data, "<i2").astype(np.float32) / 32768.0
    if fmt.width == 3:
        b = np.frombuffer(data, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        v = np.where(v >= 1 << 23, v - (1 << 24), v)
        return (v / float(1 << 23)).astype(np.float32)
    return (np.frombuffer(data, "<i4").astype(np.float64) / float(1 << 31)).astype(np.float32)
