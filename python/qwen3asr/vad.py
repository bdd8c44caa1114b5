"""Voice activity detection with the Silero VAD ONNX model (onnxruntime only, no torch).

The model file is the one shipped in the ``silero-vad`` wheel
(``silero_vad/data/silero_vad.onnx``, MIT). Install it without its torch
dependency with ``pip install --no-deps silero-vad``, or pass the path of a copy
(for example ``models/silero_vad.onnx``).

Model facts (checked on the shipped file):

- inputs ``input`` (batch, samples) float32, ``state`` (2, batch, 128) float32,
  ``sr`` int64 scalar; outputs ``output`` (batch, 1) speech probability and
  ``stateN`` (2, batch, 128), the recurrent state for the next call.
- At 16 kHz it consumes 512-sample windows (32 ms), each preceded by the last
  64 samples of the previous call's input (zeros at the start). Without that
  context the model returns ~0 on clear speech.

Three layers:

- :class:`SileroVAD` — the model and its recurrent state: one window in, one
  probability out.
- :func:`speech_segments` — whole-file segmentation with the same semantics as
  silero's ``get_speech_timestamps`` (thresholds with hysteresis, minimum speech,
  minimum silence, padding, split of over-long segments at the longest pause).
- :class:`VADStream` — the same algorithm fed in chunks of any length; emits
  :class:`SpeechStart` / :class:`SpeechEnd` events whose positions are exactly
  the boundaries :func:`speech_segments` returns for the same audio.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np

from . import checks
from .audio import SAMPLE_RATE, PcmChecker, check_pcm  # 16000 Hz, the only rate this module accepts

logger = logging.getLogger(__name__)

WINDOW_SAMPLES = 512  # samples per model call at 16 kHz (32 ms)
CONTEXT_SAMPLES = 64  # samples of the previous input prepended to each window
STATE_SIZE = 128  # width of the recurrent state, shape (2, 1, STATE_SIZE)
MODEL_FILENAME = "silero_vad.onnx"
PACKAGED_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", MODEL_FILENAME)
# Longest silence, padding and split pause (ms): a minute, the longest segment the forced aligner
# takes in one pass (aligner.model.MAX_ALIGN_SECONDS) and far beyond any pause within speech
# (silero's defaults: 100 ms of silence, 30 ms of padding). A stream holds min_silence + 2 x padding
# of audio behind the VAD before it may cut a chunk (StreamSession), so this also bounds that
# buffer: 3 minutes, 11.5 MB. min_speech_ms needs no bound: a longer minimum only drops more segments.
MAX_VAD_MS = 60_000.0
PACKAGED_SHA256 = "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"  # silero-vad 6.2.3

_INSTALL_HINT = (
    "reinstall qwen3asr (it ships the model as package data), install it with "
    "`pip install --no-deps silero-vad` (it ships "
    f"silero_vad/data/{MODEL_FILENAME}; torch is not needed), or download "
    f"{MODEL_FILENAME} from the silero-vad release and pass its path, "
    f"for example models/{MODEL_FILENAME}"
)


def find_model(path: Optional[Union[str, os.PathLike]] = None) -> str:
    """Locate the Silero VAD ONNX file.

    ``path`` given: it must exist. Otherwise the copy shipped in this package
    (``qwen3asr/data/silero_vad.onnx``, MIT, from the silero-vad 6.2.3 wheel), else the one
    inside an installed ``silero_vad`` package. Raises FileNotFoundError naming what to do.
    """
    if path is not None:
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Silero VAD model not found at {path!r}; {_INSTALL_HINT}")
        return path
    if os.path.isfile(PACKAGED_MODEL):
        return PACKAGED_MODEL
    spec = importlib.util.find_spec("silero_vad")
    if spec is not None and spec.submodule_search_locations:
        for base in spec.submodule_search_locations:
            candidate = os.path.join(base, "data", MODEL_FILENAME)
            if os.path.isfile(candidate):
                return candidate
    raise FileNotFoundError(f"Silero VAD model not found (not in {PACKAGED_MODEL}, and the silero_vad package is "
                            f"not installed); {_INSTALL_HINT}")


class SileroVAD:
    """The Silero VAD model with its recurrent state (one audio stream at a time).

    ``model_path``: the ONNX file; None takes the one shipped with this package (find_model()).
    The session is the ONNX backend's (``backends.onnx.make_session``): on the CPU with
    ``num_threads`` threads (one by default), its idle threads sleeping instead of spinning.
    """

    def __init__(self, model_path: Optional[Union[str, os.PathLike]] = None, *, num_threads: int = 1):
        from .backends.onnx import make_session  # the ONNX backend's CPU sessions, their thread settings

        self.model_path = find_model(model_path)
        try:
            self._session = make_session(self.model_path, threads=num_threads)
        except RuntimeError as exc:
            if isinstance(exc.__cause__, ImportError):
                raise  # onnxruntime is not installed: the message says what to install
            cause = exc.__cause__ or exc  # onnxruntime's own error for an unreadable file
            reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
            raise RuntimeError(f"{self.model_path} is not a readable ONNX model ({reason}); "
                               f"{_INSTALL_HINT}") from exc
        names = [i.name for i in self._session.get_inputs()]
        if names != ["input", "state", "sr"]:
            raise RuntimeError(
                f"{self.model_path} is not the Silero VAD v5 model: inputs {names}, expected ['input', 'state', 'sr']"
            )
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        self._input = np.zeros((1, CONTEXT_SAMPLES + WINDOW_SAMPLES), dtype=np.float32)
        self.reset()
        logger.debug("Silero VAD loaded from %s", self.model_path)

    def reset(self) -> None:
        """Forget all audio seen so far (recurrent state and context to zeros)."""
        self._state = np.zeros((2, 1, STATE_SIZE), dtype=np.float32)
        self._input[:] = 0.0

    def __call__(self, window: np.ndarray) -> float:
        """Speech probability in [0, 1] of one (512,) float32 window at 16 kHz.

        Windows must be consecutive audio; the state carries over between calls.
        """
        if not isinstance(window, np.ndarray) or window.shape != (WINDOW_SAMPLES,) or window.dtype != np.float32:
            if isinstance(window, np.ndarray):
                got = f"shape {window.shape} dtype {window.dtype}"
            else:
                got = type(window).__name__
            raise ValueError(f"SileroVAD takes one ({WINDOW_SAMPLES},) float32 window at {SAMPLE_RATE} Hz, got {got}")
        # Context = the last CONTEXT_SAMPLES of the previous input, already at the end of the buffer.
        self._input[0, :CONTEXT_SAMPLES] = self._input[0, -CONTEXT_SAMPLES:]
        self._input[0, CONTEXT_SAMPLES:] = window
        out, self._state = self._session.run(None, {"input": self._input, "state": self._state, "sr": self._sr})
        return float(out[0, 0])

    def probabilities(self, pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
        """Speech probability per 512-sample window of a whole signal, (n_windows,) float32.

        Resets the state first; the last partial window is zero-padded.
        """
        pcm = check_pcm(pcm, sample_rate, where="VAD")
        self.reset()
        n_windows = -(-len(pcm) // WINDOW_SAMPLES)
        padded = np.zeros(n_windows * WINDOW_SAMPLES, dtype=np.float32)
        padded[: len(pcm)] = pcm
        return np.array(
            [self(padded[i * WINDOW_SAMPLES : (i + 1) * WINDOW_SAMPLES]) for i in range(n_windows)], dtype=np.float32
        )


@dataclass(frozen=True)
class VADOptions:
    """Segmentation settings (same meaning and defaults as silero's get_speech_timestamps)."""

    threshold: float = 0.5  # probability at or above which a window is speech
    neg_threshold: Optional[float] = None  # below this, speech ends; None = max(threshold - 0.15, 0.01)
    min_speech_ms: float = 250.0  # segments not longer than this are dropped
    min_silence_ms: float = 100.0  # silence needed to end a segment
    speech_pad_ms: float = 30.0  # added to both ends of every segment
    max_speech_s: float = math.inf  # longer segments are split at their longest pause
    min_silence_at_max_speech_ms: float = 98.0  # shortest pause at which an over-long segment may be split

    def __post_init__(self) -> None:
        for name, low, high in (("threshold", 0, 1), ("neg_threshold", 0, 1)):
            value = getattr(self, name)
            if not (value is None and name == "neg_threshold") and not (checks.is_number(value) and low < value < high):
                raise ValueError(f"VADOptions.{name} must be in (0, 1){' or None' if name == 'neg_threshold' else ''}, "
                                 f"got {checks.show(value)}")
        if self.neg_threshold is not None and not self.neg_threshold <= self.threshold:
            raise ValueError(
                f"VADOptions.neg_threshold must be in (0, threshold={self.threshold}] or None, got {self.neg_threshold}"
            )
        for name in ("min_speech_ms", "min_silence_ms", "speech_pad_ms", "min_silence_at_max_speech_ms"):
            value = getattr(self, name)
            high = None if name == "min_speech_ms" else MAX_VAD_MS
            if checks.number(name, value, 0, high):
                raise ValueError(f"VADOptions.{name} must be {checks.requirement('a finite number', 0, high)}, "
                                 f"got {checks.show(value)}")
        shortest = (WINDOW_SAMPLES / SAMPLE_RATE) + 2 * self.speech_pad_ms / 1000.0
        if not (self.max_speech_s == math.inf or checks.is_number(self.max_speech_s)) or \
                not self.max_speech_s > shortest:
            raise ValueError(
                f"VADOptions.max_speech_s must exceed one window plus twice the padding "
                f"({shortest:.3f} s) or be math.inf, got {checks.show(self.max_speech_s)}"
            )

    @property
    def effective_neg_threshold(self) -> float:
        """The exit threshold actually used."""
        if self.neg_threshold is not None:
            return self.neg_threshold
        return max(self.threshold - 0.15, 0.01)


@dataclass(frozen=True)
class SpeechSegment:
    """One stretch of speech, padding included."""

    start_s: float  # seconds from the start of the audio
    end_s: float  # seconds, exclusive


@dataclass(frozen=True)
class SpeechStart:
    """Speech begins at ``sample`` (absolute, 16 kHz, padding included)."""

    sample: int


@dataclass(frozen=True)
class SpeechEnd:
    """Speech ends at ``sample`` (absolute, 16 kHz, exclusive, padding included)."""

    sample: int


VADEvent = Union[SpeechStart, SpeechEnd]


class _SegmentTracker:
    """silero's segmentation state machine, fed one window probability at a time.

    Produces raw (unpadded) segments in samples. ``closed`` receives finished
    segments that are kept; ``confirmed_start`` is the start of the open segment
    once it is certain to be kept (it will outlast min_speech), else None.
    """

    def __init__(self, options: VADOptions):
        sr = SAMPLE_RATE
        self.threshold = options.threshold
        self.neg_threshold = options.effective_neg_threshold
        self.min_speech = sr * options.min_speech_ms / 1000
        self.min_silence = sr * options.min_silence_ms / 1000
        self.min_silence_at_max = sr * options.min_silence_at_max_speech_ms / 1000
        self.max_speech = sr * options.max_speech_s - WINDOW_SAMPLES - 2 * sr * options.speech_pad_ms / 1000
        self.index = 0  # windows consumed
        self.triggered = False
        self.start: Optional[int] = None  # raw start of the open segment
        self.temp_end = 0  # start of the current pause inside a segment (0 = none)
        self.possible_ends: List[Tuple[int, int]] = []  # (pause start, pause length) candidates for a split
        self.closed: List[Tuple[int, int]] = []

    def push(self, prob: float) -> None:
        cur = WINDOW_SAMPLES * self.index
        self.index += 1
        if prob >= self.threshold and self.temp_end:
            pause = cur - self.temp_end
            if pause > self.min_silence_at_max and math.isfinite(self.max_speech):  # only a split reads them
                self.possible_ends.append((self.temp_end, pause))
            self.temp_end = 0
        if prob >= self.threshold and not self.triggered:
            self.triggered = True
            self.start = cur
            return
        if self.triggered and cur - self.start > self.max_speech:
            if self.possible_ends:
                end, pause = max(self.possible_ends, key=lambda p: p[1])
                self.closed.append((self.start, end))
                self.start = end + pause  # the longest pause ended here; speech resumed
            else:
                self.closed.append((self.start, cur))
                self.start = None
                self.triggered = False
                self.temp_end = 0
                self.possible_ends = []
                return
            self.temp_end = 0
            self.possible_ends = []
        if prob < self.neg_threshold and self.triggered:
            if not self.temp_end:
                self.temp_end = cur
            if cur - self.temp_end >= self.min_silence:
                if self.temp_end - self.start > self.min_speech:
                    self.closed.append((self.start, self.temp_end))
                self.start = None
                self.triggered = False
                self.temp_end = 0
                self.possible_ends = []

    @property
    def confirmed_start(self) -> Optional[int]:
        if self.start is None:
            return None
        # Any future end lies at or after this bound (a pending pause start, else past the last window).
        earliest_end = self.temp_end if self.temp_end else WINDOW_SAMPLES * (self.index - 1) + 1
        return self.start if earliest_end - self.start > self.min_speech else None

    def finish(self, n_samples: int) -> None:
        """Close an open segment at the end of the audio (n_samples long)."""
        if self.start is not None and n_samples - self.start > self.min_speech:
            self.closed.append((self.start, n_samples))
        self.start = None
        self.triggered = False


class _Padder:
    """Turns kept raw segments, in order, into padded start/end events.

    Padding rule (silero): each side grows by speech_pad; if two segments are
    closer than twice the padding, the gap is shared half and half. A segment's
    end is therefore final only once the next kept start is known or is known to
    be at least 2 * speech_pad away.
    """

    def __init__(self, options: VADOptions):
        self.pad = SAMPLE_RATE * options.speech_pad_ms / 1000
        self.n_samples: float = math.inf  # audio length once known; ends never pass it
        self.pending_end: Optional[int] = None  # raw end of the last segment, event not yet emitted
        self.open = False  # a SpeechStart was emitted and its segment is not yet closed

    def start(self, raw_start: int, events: List[VADEvent]) -> None:
        if self.pending_end is not None:
            gap = raw_start - self.pending_end
            if gap < 2 * self.pad:
                events.append(SpeechEnd(int(self.pending_end + gap // 2)))
                events.append(SpeechStart(int(max(0, raw_start - gap // 2))))
                self.pending_end = None
                self.open = True
                return
            events.append(SpeechEnd(int(min(self.n_samples, self.pending_end + self.pad))))
            self.pending_end = None
        events.append(SpeechStart(int(max(0, raw_start - self.pad))))
        self.open = True

    def end(self, raw_end: int) -> None:
        self.pending_end = raw_end
        self.open = False

    def settle(self, next_possible_start: int, events: List[VADEvent]) -> None:
        """Emit the pending end if no later segment can start before next_possible_start - 2 * pad."""
        if self.pending_end is not None and next_possible_start - self.pending_end >= 2 * self.pad:
            events.append(SpeechEnd(int(min(self.n_samples, self.pending_end + self.pad))))
            self.pending_end = None

    def finish(self, events: List[VADEvent]) -> None:
        if self.pending_end is not None:
            events.append(SpeechEnd(int(min(self.n_samples, self.pending_end + self.pad))))
            self.pending_end = None


class _EventBuilder:
    """Tracker + padder: probabilities in, padded events out (shared by offline and streaming)."""

    def __init__(self, options: VADOptions):
        self.tracker = _SegmentTracker(options)
        self.padder = _Padder(options)

    def push(self, prob: float) -> List[VADEvent]:
        events: List[VADEvent] = []
        self.tracker.push(prob)
        self._drain(events)
        return events

    def _drain(self, events: List[VADEvent]) -> None:
        tracker, padder = self.tracker, self.padder
        for raw_start, raw_end in tracker.closed:
            if not padder.open:
                padder.start(raw_start, events)
            padder.end(raw_end)
        tracker.closed.clear()
        if tracker.start is not None and not padder.open and tracker.confirmed_start is not None:
            padder.start(tracker.start, events)
        # The earliest sample where a not-yet-announced segment could start.
        if tracker.start is not None and not padder.open:
            next_start = tracker.start
        else:
            next_start = WINDOW_SAMPLES * tracker.index
        padder.settle(next_start, events)

    def set_length(self, n_samples: int) -> None:
        """Declare the audio length (before the last window is pushed)."""
        self.padder.n_samples = n_samples

    def finish(self, n_samples: int) -> List[VADEvent]:
        events: List[VADEvent] = []
        self.set_length(n_samples)
        self.tracker.finish(n_samples)
        self._drain(events)
        self.padder.finish(events)
        return events


def _events_to_segments(events: Sequence[VADEvent]) -> List[SpeechSegment]:
    segments = []
    start: Optional[int] = None
    for event in events:
        if isinstance(event, SpeechStart):
            start = event.sample
        else:
            segments.append(SpeechSegment(start / SAMPLE_RATE, event.sample / SAMPLE_RATE))
            start = None
    return segments


def segments_from_probabilities(
    probs: Sequence[float], n_samples: int, options: VADOptions = VADOptions()
) -> List[SpeechSegment]:
    """Speech segments from per-window probabilities (one per 512 samples) of audio n_samples long."""
    builder = _EventBuilder(options)
    builder.set_length(n_samples)
    events: List[VADEvent] = []
    for prob in probs:
        events.extend(builder.push(float(prob)))
    events.extend(builder.finish(n_samples))
    return _events_to_segments(events)


def speech_segments(
    pcm: np.ndarray,
    options: VADOptions = VADOptions(),
    *,
    model: Optional[SileroVAD] = None,
    sample_rate: int = SAMPLE_RATE,
) -> List[SpeechSegment]:
    """Speech segments of a whole recording.

    pcm: (samples,) float32 mono at 16 kHz (checked and clipped to [-1, 1] by
    qwen3asr.audio.check_pcm). ``model`` is reset before use; None
    loads the default model. Returns segments in time order, padding included,
    never overlapping, clipped to [0, len(pcm) / 16000].
    """
    pcm = check_pcm(pcm, sample_rate, where="VAD")
    model = model if model is not None else SileroVAD()
    probs = model.probabilities(pcm)
    return segments_from_probabilities(probs, len(pcm), options)


class VADStream:
    """Streaming speech detector over one audio stream.

    Feed consecutive chunks of any length with :meth:`process`; call :meth:`flush`
    at the end. The events together describe exactly the segments
    :func:`speech_segments` finds for the concatenated audio. A SpeechStart is
    reported once its segment is certain to outlast ``min_speech_ms`` (so with
    the default 250 ms it arrives about that late); a SpeechEnd once
    ``min_silence_ms`` of silence has passed (at least twice the padding later).
    """

    def __init__(self, options: VADOptions = VADOptions(), model: Optional[SileroVAD] = None):
        self.options = options
        self.model = model if model is not None else SileroVAD()
        self.reset()

    def reset(self) -> None:
        """Start a new stream: sample positions restart at 0."""
        self.model.reset()
        self._check = PcmChecker("VAD")
        self._builder = _EventBuilder(self.options)
        self._buffer = np.zeros(WINDOW_SAMPLES, dtype=np.float32)
        self._filled = 0  # samples waiting in _buffer
        self._n_samples = 0  # samples received in total
        self._finished = False

    @property
    def samples_seen(self) -> int:
        """Samples received so far."""
        return self._n_samples

    @property
    def in_speech(self) -> bool:
        """True between an emitted SpeechStart and its SpeechEnd."""
        return self._builder.padder.open

    def process(self, pcm_chunk: np.ndarray, sample_rate: int = SAMPLE_RATE) -> List[VADEvent]:
        """Consume a (samples,) float32 chunk at 16 kHz; return the events it completes.

        Chunks are checked as StreamSession's are (qwen3asr.audio.PcmChecker: clipped to
        [-1, 1], one warning per stream)."""
        if self._finished:
            raise RuntimeError("VADStream.process after flush(); call reset() to start a new stream")
        pcm_chunk = self._check(pcm_chunk, sample_rate)
        events: List[VADEvent] = []
        self._n_samples += len(pcm_chunk)
        pos = 0
        while pos < len(pcm_chunk):
            take = min(WINDOW_SAMPLES - self._filled, len(pcm_chunk) - pos)
            self._buffer[self._filled : self._filled + take] = pcm_chunk[pos : pos + take]
            self._filled += take
            pos += take
            if self._filled == WINDOW_SAMPLES:
                events.extend(self._builder.push(self.model(self._buffer)))
                self._filled = 0
        return events

    def footprint(self) -> int:
        """Bytes of stream state held (the window buffer and the split candidates: at most one per
        pause within ``max_speech_s``, none when it is unbounded)."""
        return self._buffer.nbytes + 64 * len(self._builder.tracker.possible_ends)

    def flush(self) -> List[VADEvent]:
        """End of the stream: run the zero-padded last partial window and close any open segment."""
        if self._finished:
            return []
        events: List[VADEvent] = []
        self._builder.set_length(self._n_samples)
        if self._filled:
            self._buffer[self._filled :] = 0.0
            events.extend(self._builder.push(self.model(self._buffer)))
            self._filled = 0
        events.extend(self._builder.finish(self._n_samples))
        self._finished = True
        return events
