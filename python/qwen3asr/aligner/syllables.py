"""Syllables counted from the frame levels: the humps of a piece's loudness.

Every syllable has a voiced nucleus, louder than the consonants around it, so a piece's level
(``streaming.pause.frame_db``, 10 ms frames) rises and falls once per syllable where the syllables
are said apart. ``count`` finds those humps: the level, averaged over SMOOTH_FRAMES, rising by
RISE_DB from its lowest point since the last hump and falling RISE_DB again (or the piece ending),
its top a speech frame at most NUCLEUS_DB under the segment's loud end (``per_piece``; humps of the
noise in a pause are lower) and at least MIN_APART_FRAMES after the last hump's. Continuous fast
speech blurs the dips between syllables, so the count is exact mostly for short pieces: on the
pieces of the held-out paused Mandarin set, 98 % of the one-syllable pieces, 94-97 % of two and
three, 63-78 % of four and more; ``per_piece`` keeps a count only where humps of a smaller rise
(AGREE_DB) count as many, 98 % of those of at most three exact (docs/aligner.md, "Syllables
counted for Chinese").

In a language written in characters, one character is one syllable, so ``word_spans="checked"``
weighs the characters it gives a short piece against this count (qwen3asr.aligner.checked); in
English it weighs the syllables ``spelled`` guesses for the piece's words.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from .refine import LEVEL_QUANTILE  # the segment's loud end, as refine.Levels judges speech

RISE_DB = 8.0  # a hump rises and falls by this much
NUCLEUS_DB = 25.0  # its top lies at most this far under the segment's loud end
AGREE_DB = 5.0  # per_piece: a count is kept where humps of this rise count as many
SMOOTH_FRAMES = 5  # the level is averaged over this many 10 ms frames first
MIN_APART_FRAMES = 8  # humps whose tops are closer than this (80 ms) are one


def count(db: np.ndarray, speech: np.ndarray, rise: float = RISE_DB) -> int:
    """How many syllables a piece holds: the humps of ``rise`` dB of its (n,) frame levels ``db``
    (dB) whose top is a frame that ``speech`` ((n,) bool) calls speech (the module docstring)."""
    return len(_humps(db, speech, rise)[0])


def dips(db: np.ndarray, speech: np.ndarray) -> List[int]:
    """The frames between a piece's syllables: for each two neighbouring humps of RISE_DB of its
    (n,) frame levels ``db`` (as ``count``), the frame of the lowest smoothed level between their
    tops (in espeak-ng's Mandarin a median 19-22 ms after the next character's start; docs/aligner.md,
    "The floor around each frame, and the dips between syllables")."""
    tops, level = _humps(db, speech, RISE_DB)
    return [lo + int(np.argmin(level[lo:hi + 1])) for lo, hi in zip(tops, tops[1:])]


def _humps(db: np.ndarray, speech: np.ndarray, rise: float) -> Tuple[List[int], np.ndarray]:
    """(the frames of the humps' tops, the smoothed level) of ``count``."""
    if db.size == 0:
        return [], db
    half = SMOOTH_FRAMES // 2  # the ends padded with their own levels (not 0 dB)
    level = np.convolve(np.pad(db, (half, SMOOTH_FRAMES - 1 - half), mode="edge"),
                        np.ones(SMOOTH_FRAMES) / SMOOTH_FRAMES, mode="valid")
    tops: List[int] = []
    low, top, at, rising = np.inf, -np.inf, -1, False

    def counted(at: int) -> bool:
        return bool(speech[at]) and (not tops or at - tops[-1] >= MIN_APART_FRAMES)

    for i, v in enumerate(level):
        if not rising:
            low = min(low, v)
            if v >= low + rise:
                rising, top, at = True, v, i
        elif v > top:
            top, at = v, i
        elif v <= top - rise:
            if counted(at):
                tops.append(at)
            rising, low = False, v
    if rising and counted(at):
        tops.append(at)
    return tops, level


def nuclei(db: np.ndarray, speech: np.ndarray) -> np.ndarray:
    """The frames of a segment (its (n,) levels ``db`` and ``speech`` frames) a hump's top may lie
    on: speech at most NUCLEUS_DB under the segment's loud end (the humps of the noise in a pause are
    lower)."""
    return speech & (db >= np.quantile(db, LEVEL_QUANTILE) - NUCLEUS_DB)


SPELLED = frozenset({"English"})  # languages whose words' syllables ``spelled`` guesses


def spelled(word: str) -> int:
    """An English word's syllables guessed from its spelling: its runs of vowels (y included), one
    fewer for a silent final e (not -le, -ee, -ye), -es (not after a vowel, s, x, z, ch, sh, c, g) or -ed
    (not after t, d), at least one."""
    w = "".join(ch for ch in word.lower() if ch.isalpha())
    runs, before = 0, False
    for ch in w:
        vowel = ch in "aeiouy"
        runs += vowel and not before
        before = vowel
    if runs > 1 and (w.endswith("e") and not w.endswith(("le", "ee", "ye"))
                     or w.endswith("es") and w[-3] not in "aeiouy"
                     and not w.endswith(("ses", "xes", "zes", "ches", "shes", "ces", "ges"))
                     or w.endswith("ed") and not w.endswith(("ted", "ded"))):
        runs -= 1
    return max(1, runs)


def per_piece(db: np.ndarray, speech: np.ndarray, pieces: Sequence[Tuple[int, int]]) -> List[Optional[int]]:
    """The syllables of each piece [a, b) (frames) of a segment whose (n,) frame levels are ``db``
    and speech frames ``speech``: humps whose top is speech and at most NUCLEUS_DB under the
    segment's loud end; None for a piece whose humps of RISE_DB and of AGREE_DB differ in number
    (syllables run together there: shallow dips between them, which the count may miss)."""
    if db.size == 0:
        return [0] * len(pieces)
    nucleus = nuclei(db, speech)
    out: List[Optional[int]] = []
    for a, b in pieces:
        n = count(db[a:b], nucleus[a:b])
        out.append(n if count(db[a:b], nucleus[a:b], AGREE_DB) == n else None)
    return out


__all__ = ["AGREE_DB", "MIN_APART_FRAMES", "NUCLEUS_DB", "RISE_DB", "SMOOTH_FRAMES", "SPELLED", "count", "dips",
           "nuclei", "per_piece", "spelled"]
