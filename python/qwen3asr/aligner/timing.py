"""From the aligner's slot classes to word times in seconds, as the official ``align()`` does.

Each ``<timestamp>`` slot is classified into a bin; bin k means k x ``timestamp_segment_time``
milliseconds (80 ms in the real config). The official code then repairs the sequence of slot
times so that it never goes back in time (``repair``), pairs slot 2i (start) and 2i + 1 (end)
with word i, and reports seconds rounded to 3 decimals (``word_spans``).

The repair keeps the longest non-decreasing subsequence of the slot times (the one the
official O(n^2) dynamic programme picks: each slot links to the earliest slot that gives it
its longest chain, and the chain ends at the earliest slot of the greatest length) and
rewrites the other slots run by run: a run of one or two takes the value of its nearer kept
neighbour (the left one on a tie, the only one at an edge), a longer run is spaced evenly
between its two kept neighbours (or copies the only one at an edge); every value is then
truncated to an int. Here the subsequence is found in O(n log n) with the same choices.

Not official: ``between_bins`` reads a time between the bins from the same slot logits (the
mean class under the softmax of the argmax class and its neighbours), which ``word_spans``
uses, where given, for every slot the repair left as it was (docs/aligner.md, "Times between
the bins").
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np

SEGMENT_TIME_MS = 80.0  # timestamp_segment_time of the real config: milliseconds per class
BETWEEN_CLASSES = 1  # between_bins: the classes either side of a slot's argmax in its mean
_SHORT_RUN = 2  # runs of at most this many slots off the kept subsequence take a neighbour's value


@dataclass(frozen=True)
class Span:
    """One word's time, in seconds from the start of the aligned audio."""

    start: float  # seconds, rounded to 3 decimals
    end: float  # seconds, rounded to 3 decimals


def _kept_subsequence(values: Sequence[float]) -> List[bool]:
    """Marks of the longest non-decreasing subsequence that the official repair keeps.

    Chain length per index with the usual tails array; the slots whose longest chain has a
    given length, taken in index order, have strictly decreasing values (a later one with a
    value not below an earlier one would have a longer chain), so the earliest predecessor
    with a value <= v is found by bisection in that level's list.
    """
    n = len(values)
    parent = [-1] * n
    tails: List[float] = []  # tails[k]: last value of the newest slot whose chain has length k + 1
    neg_values: List[List[float]] = []  # per chain length: -value of its slots, in index order (increasing)
    indices: List[List[int]] = []  # per chain length: its slots, in index order
    for i, v in enumerate(values):
        k = bisect.bisect_right(tails, v)  # slot i's longest chain has length k + 1
        if k:
            parent[i] = indices[k - 1][bisect.bisect_left(neg_values[k - 1], -v)]
        if k == len(tails):
            tails.append(v)
            neg_values.append([])
            indices.append([])
        else:
            tails[k] = v
        neg_values[k].append(-v)
        indices[k].append(i)
    kept = [False] * n
    i = indices[-1][0] if indices else -1  # the earliest slot with the longest chain
    while i != -1:
        kept[i] = True
        i = parent[i]
    return kept


def repair(values: Sequence[float]) -> List[int]:
    """The official ``fix_timestamp``: slot times (ms) made non-decreasing, truncated to int.

    values: slot times in milliseconds, in slot order. Returns a list of the same length
    (empty for empty input; the official function raises there, which ``align()`` never
    reaches because a text always has two slots).
    """
    vals = [float(v) for v in values]
    n = len(vals)
    kept = _kept_subsequence(vals)
    out = list(vals)
    i = 0
    while i < n:
        if kept[i]:
            i += 1
            continue
        j = i
        while j < n and not kept[j]:
            j += 1
        # i..j-1 is a maximal run off the subsequence: i-1 and j are kept (or past an edge)
        left: Optional[float] = vals[i - 1] if i > 0 else None
        right: Optional[float] = vals[j] if j < n else None
        for k in range(i, j):
            if left is None or right is None:
                out[k] = right if left is None else left
            elif j - i <= _SHORT_RUN:
                out[k] = left if k - (i - 1) <= j - k else right
            else:
                out[k] = left + (right - left) / (j - i + 1) * (k - i + 1)
        i = j
    return [int(v) for v in out]


def slot_milliseconds(classes: Sequence[int], segment_time: float = SEGMENT_TIME_MS) -> List[float]:
    """Class x segment time per slot, in milliseconds, computed in float32 as the official code does."""
    c = np.asarray(classes)
    if c.ndim != 1 or not (c.size == 0 or np.issubdtype(c.dtype, np.integer)):
        raise ValueError(f"classes must be a 1-D sequence of ints, got dtype {c.dtype} and shape {c.shape}")
    return (c.astype(np.float32) * np.float32(segment_time)).tolist()


def between_bins(logits: np.ndarray, segment_time: float = SEGMENT_TIME_MS) -> List[float]:
    """Per slot of ``logits`` ((n_slots, classes)), a time in milliseconds between the bins: the
    mean class under the softmax of the argmax class's logit and those of the BETWEEN_CLASSES
    classes either side (fewer at the first and last class), times ``segment_time``. Within
    BETWEEN_CLASSES bins of the argmax's time; on it where the neighbours are far less likely."""
    x = np.asarray(logits)
    if x.ndim != 2:
        raise ValueError(f"logits must be (n_slots, classes), got shape {x.shape}")
    out = []
    for row, c in zip(x, np.argmax(x, axis=-1) if x.size else []):
        lo, hi = max(0, int(c) - BETWEEN_CLASSES), min(x.shape[1], int(c) + BETWEEN_CLASSES + 1)
        p = np.exp(row[lo:hi].astype(np.float64) - float(row[c]))
        out.append(float((p * np.arange(lo, hi)).sum() / p.sum()) * float(segment_time))
    return out


def word_spans(classes: Sequence[int], n_words: int, segment_time: float = SEGMENT_TIME_MS,
               between: Optional[Sequence[float]] = None) -> List[Span]:
    """Start and end of each word from the argmax class of every slot.

    classes: (2 * n_words,) ints, the argmax over classes at each ``<timestamp>`` slot in
    order (slot 2i is word i's start, 2i + 1 its end). With no words there is nothing to
    time (the official input still has two slots) and the result is empty.
    segment_time: milliseconds per class (the config's ``timestamp_segment_time``).
    between: None for the official times; else per slot a time in ms (``between_bins``) that
    replaces the official one wherever the repair kept the slot's own bin, the times then
    kept in order (each at least the one before).
    """
    if n_words < 0:
        raise ValueError(f"n_words must be >= 0, got {n_words}")
    if n_words == 0:
        return []
    if len(classes) != 2 * n_words:
        raise ValueError(f"{n_words} words need {2 * n_words} slot classes, got {len(classes)}")
    official = slot_milliseconds(classes, segment_time)
    ms: List[float] = list(repair(official))
    if between is not None:
        if len(between) != len(ms):
            raise ValueError(f"{len(ms)} slots need {len(ms)} times between the bins, got {len(between)}")
        for k, (b, r, o) in enumerate(zip(between, ms, official)):
            v = float(b) if r == int(o) else float(r)
            ms[k] = v if k == 0 else max(v, ms[k - 1])
    return [Span(start=round(ms[2 * w] / 1000.0, 3), end=round(ms[2 * w + 1] / 1000.0, 3))
            for w in range(n_words)]
