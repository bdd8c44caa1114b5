"""Speech segments from the Silero VAD's window probabilities (qwen3asr.vad runs the model).

The options have the meaning and defaults of silero's ``get_speech_timestamps`` (thresholds with
hysteresis, minimum speech, minimum silence, padding, the split of over-long segments at the
longest pause); the rules are fed one window probability at a time and emit
:class:`SpeechStart` / :class:`SpeechEnd` events, so a whole file (``segments_from_probabilities``)
and a stream fed in chunks of any length (qwen3asr.vad.VADStream) get the same boundaries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

from . import checks
from .audio import SAMPLE_RATE

WINDOW_SAMPLES = 512  # samples per model call at 16 kHz (32 ms)
# Longest silence, padding and split pause (ms): a minute, the longest segment the forced aligner
# takes in one pass (aligner.model.MAX_ALIGN_SECONDS) and far beyond any pause within speech
# (silero's defaults: 100 ms of silence, 30 ms of padding). A stream holds min_silence + 2 x padding
# of audio behind the VAD before it may cut a chunk (StreamSession), so this also bounds that
# buffer: 3 minutes, 11.5 MB. min_speech_ms needs no bound: a longer minimum only drops more segments.
MAX_VAD_MS = 60_000.0


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
