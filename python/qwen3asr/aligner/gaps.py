"""Word bounds from the gaps inside a piece, and a lone word's onset (part of the snapping).

The demo aligner drifts inside a piece (a stretch of a segment between pauses of
refine.SPLIT_PAUSE_S): on paused speech its middle words carry most of the error, growing with the
time into the piece and most over the short gaps between words that do not cut it, which the
frame levels find within a few ms; and it starts a word alone in its piece late. ``fitted``, called
by refine.snap, moves those bounds to the levels: quiet runs of GAP_S or more inside a piece's
speech bound the words either side of them, and a lone word starts at its piece's speech onset.
In a language whose words are syllables (Chinese: one character, one syllable) the boundaries
left move to the dips of the level between the piece's syllables. Measured against espeak-ng's
word times in docs/aligner.md ("Gaps inside a piece"; "The floor around each frame, and the dips
between syllables").
"""

from __future__ import annotations

import dataclasses
from typing import List, Sequence, Tuple

import numpy as np

from ..results import Word

ONSET_S = 0.5  # a piece's only word starting at most this long after its speech starts starts there
GAP_S = 0.06  # a quiet run this long inside a piece's speech is a gap between two words ...
GAP_REACH_S = 0.08  # ... when a boundary between them lies within this of it (or in it) ...
GAP_SPEECH_S = 0.05  # ... and it has this much speech on each side before another quiet frame (not noise)
DIP_REACH_S = 0.2  # syllabic: a boundary no gap took moves to a dip between syllables within this of it ...
DIP_LEAD_S = 0.02  # ... less this (the dip lies about this far into the next syllable)


def fitted(words: Sequence[Word], levels, pieces: Sequence[Tuple[int, int]], pause: float,
           syllabic: bool = False) -> Tuple[Word, ...]:
    """``words`` (a segment's, in order) with, within each of its ``pieces`` at pauses ([a, b)
    frames of ``levels``, a refine.Levels): a word alone in the piece starting at most ONSET_S
    after the piece's speech starts starts there (the demo aligner starts a lone word late; a
    piece's first word among others it places well); and the quiet runs of at least GAP_S inside
    the piece's speech matched, in order, each to at most one boundary between two of its words
    lying within GAP_REACH_S of it and between the first word's start and the second's end (a
    monotone match that maximises the summed closeness). At a matched boundary the first word ends
    where the run starts; the second starts where the run ends if it is a pause (``pause`` seconds
    or more), else where it starts (a shorter run at a word boundary is the closure of the next
    word's first sound: continuous speech's word boundaries lie at its start). Quiet runs inside a
    word are left unmatched where no boundary lies near, and a run without GAP_SPEECH_S of speech
    on either side before another quiet frame is no gap (noise in a pause that the levels cannot
    tell from speech breaks the pause into such runs).

    ``syllabic`` (a language whose words are syllables, one a character: refine.CHARACTER_LANGUAGES):
    then the boundaries no quiet run took are matched the same way, within DIP_REACH_S, to the dips
    between the piece's syllables (qwen3asr.aligner.syllables.dips) less DIP_LEAD_S, and moved there:
    the first word ends and the second starts at it."""
    if levels.loud is None or not words:
        return tuple(words)
    if syllabic:
        from . import syllables  # here: syllables imports refine, which imports this module

        nuclei = syllables.nuclei(levels.db, levels.loud)
    t = [[w.start, w.end] for w in words]
    need, speech, pause_frames = levels.frames(GAP_S), levels.frames(GAP_SPEECH_S), levels.frames(pause)
    for a, b, inside, s0, s1 in levels.speech_in(pieces, words):  # s0, s1: the piece's speech, frames
        first = inside[0]
        if len(inside) == 1 and 0 < t[first][0] - levels.time(s0) <= ONSET_S and (
                not first or t[first - 1][1] <= levels.time(s0)):
            t[first][0] = levels.time(s0)
        quiet = np.concatenate([[False], ~levels.loud[s0:s1], [False]])
        edges = np.flatnonzero(np.diff(quiet.astype(np.int8)))
        quiet_runs = list(zip(edges[::2], edges[1::2]))  # frames from s0, every quiet run
        bounds = [0] + [int(x) for r in quiet_runs for x in r] + [s1 - s0]  # loud stretches between them
        runs = [(s0 + int(x), s0 + int(y)) for j, (x, y) in enumerate(quiet_runs)
                if y - x >= need and min(x - bounds[2 * j], bounds[2 * j + 3] - y) >= speech]
        took = _matched(inside[:-1], [(levels.time(x), levels.time(y)) for x, y in runs], t, GAP_REACH_S)
        for k, (qa, qb) in took:
            # a pause: the next word starts after it; shorter, the closure of its first sound
            long = levels.frame(qb) - levels.frame(qa) >= pause_frames
            t[k][1], t[k + 1][0] = qa, (qb if long else qa)
        if syllabic and len(inside) > 1:
            at = [levels.time(a + d) - DIP_LEAD_S for d in syllables.dips(levels.db[a:b], nuclei[a:b])]
            taken = {k for k, _ in took}
            for k, (d, _) in _matched([k for k in inside[:-1] if k not in taken], [(x, x) for x in at], t,
                                      DIP_REACH_S):
                t[k][1] = t[k + 1][0] = d
    return tuple(w if (w.start, w.end) == (s, e) else dataclasses.replace(w, start=s, end=e)
                 for w, (s, e) in zip(words, t))


def _matched(bounds: Sequence[int], runs: Sequence[Tuple[float, float]], t: Sequence[Sequence[float]],
             reach: float) -> List[Tuple[int, Tuple[float, float]]]:
    """(k, run) pairs: the boundaries after words ``bounds`` (indices into the [start, end] times
    ``t``) matched in order to the quiet ``runs`` (seconds), each boundary (the middle of one word's
    end and the next one's start) to a run within ``reach`` and between the first word's start and
    the second's end, each run to one boundary, the summed ``reach`` - distance greatest."""
    if not bounds or not runs:
        return []
    n, m = len(bounds), len(runs)
    best = np.zeros((n + 1, m + 1))
    how = np.zeros((n + 1, m + 1), np.int8)  # 0: boundary unmatched, 1: run unmatched, 2: the pair
    for i, k in enumerate(bounds, 1):
        at = (t[k][1] + t[k + 1][0]) / 2
        for j, (qa, qb) in enumerate(runs, 1):
            far = max(0.0, qa - at, at - qb)
            pair = (best[i - 1][j - 1] + reach - far
                    if far < reach and t[k][0] < qa and qb < t[k + 1][1] else -1.0)
            options = (best[i - 1][j], best[i][j - 1], pair)
            how[i][j] = int(np.argmax(options))
            best[i][j] = options[how[i][j]]
    out, i, j = [], n, m
    while i and j:
        if how[i][j] == 2:
            out.append((bounds[i - 1], runs[j - 1]))
        i, j = (i - 1, j - 1) if how[i][j] == 2 else (i - 1, j) if how[i][j] == 0 else (i, j - 1)
    return out[::-1]


__all__ = ["DIP_LEAD_S", "DIP_REACH_S", "GAP_REACH_S", "GAP_S", "GAP_SPEECH_S", "ONSET_S", "fitted"]
