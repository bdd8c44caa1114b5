"""Word spans fitted to the speech, and the check for collapsed alignments.

Three policies over the aligner's official times (``ForcedAligner.align``: 80 ms bins, the
official repair), applied to each segment by ``align_segments``:

- **pauses** (``word_spans="speech"``): an aligner places a segment's first words well and drifts
  early on the words after long pauses (the demo aligner by 0.3-0.9 s at the 6th-9th word). A
  segment with pauses of SPLIT_PAUSE_S or more is aligned again piece by piece from the left
  (``assigned_at_pauses``): each piece takes the words whose middle an alignment from its start
  (over HORIZON_PIECES more pieces, HORIZON_PIECES_CHARACTERS in Chinese) puts inside it (or,
  with none, the first word if it starts inside it), so the drift starts again after every pause
  (docs/aligner.md).
- **snapping** (``word_spans="speech"``): the aligner's bins are coarse and its end slot often
  lands on the next word's start, so a word before a pause keeps the pause (a subtitle stays
  on screen through it). From the segment's 10 ms frame levels (``streaming.pause.frame_db``,
  the level the stream already computes), a word's end that reaches into a pause, or through it
  by at most one bin, is pulled back to where its speech ends, and a start in a pause is moved
  forward to the onset after it (each keeping EDGE_S of the pause). The last word of each piece
  at pauses that ends at most STRETCH_S before the piece's speech ends is drawn out to it (the
  demo aligner ends a piece's last word early), a word alone in its piece starts at the piece's
  speech onset, and the short quiet runs inside a piece bound the words either side of them
  (qwen3asr.aligner.gaps: the demo aligner drifts inside a piece, most over such gaps). No end
  passes the next word's start, so the order of the times is kept. A word of zero length gets
  one bin, the shortest span the bins can tell, within its neighbours.
- **collapse check** (both settings): a segment whose words share one start, start at the
  segment's start past the first word, or pile up in its last bin did not align (noisy audio,
  a very long input). With "speech" it is aligned again in smaller pieces, first cut at its own
  pauses, then in two halves cut at the quietest frame near the middle, each piece with the
  words of its part (by the first alignment's times, then, only where those times leave a piece
  with speech without a word, by its share of the speech); the first way without a collapse is
  kept, else the one that catches the fewest words. What still
  collapses is flagged (``Segment.words_flag``) and logged, never silent.

With ``word_spans="checked"`` the words each piece at a pause gets are first checked by the ASR
model reading the piece (qwen3asr.aligner.checked), then each piece is aligned again alone with
its words as the mean of passes over its audio shifted by fractions of a bin
(``alone_shifted``, qwen3asr.aligner.shifted), and the spans are fitted as with "speech".

Frame levels are judged against the segment's own: speech is what lies within
``QUIET_BELOW_DB`` of its loud end and above a quarter of the way up from its floor, the floor
of the FLOOR_WINDOW_S around the frame where that is higher (inputs joined from recordings
with different noise: a pause in the noisier part is not speech); a segment
whose loud end and floor are closer than ``MIN_CONTRAST_DB`` (speech in heavy noise) is not
snapped. A start is not moved for a pause a bin after it (a short word said before the pause
looks the same); an end is, because the end slot often lands on the next word's onset just
after the pause. Measured against espeak-ng's word times in docs/aligner.md ("Word spans").
"""

from __future__ import annotations

import dataclasses
import logging
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..audio import SAMPLE_RATE
from ..mel import HOP_LENGTH as HOP  # samples per 10 ms frame
from ..results import Word
from . import gaps, shifted

logger = logging.getLogger(__name__)

FRAME_S = HOP / SAMPLE_RATE  # 0.01 s per frame level
LEVEL_QUANTILE = 0.99  # the segment's loud end: this quantile of its frame levels (as streaming.pause)
FLOOR_QUANTILE = 0.10  # its floor (noise or silence between words)
QUIET_BELOW_DB = 40.0  # a frame this far below the loud end is quiet whatever the floor
FLOOR_SHARE = 0.25  # ... and so is one within this share of the way from the floor to the loud end
FLOOR_WINDOW_S = 4.0  # ... the floor of this much audio around the frame where higher than the segment's
FLOOR_BLOCK = 25  # frames: the local floor is taken once per this many
MIN_CONTRAST_DB = 12.0  # loud end - floor below this: speech cannot be told from noise, no snapping
MIN_PAUSE_S = 0.12  # a quiet run this long is a pause (stop closures and weak consonants are shorter)
EDGE_S = 0.02  # a snapped bound keeps this much of the pause (a word's weak onset or decay)
SPLIT_PAUSE_S = 0.18  # pauses at least this long cut a segment into pieces (assigned_at_pauses, a collapse)
STRETCH_S = 0.5  # snap: a piece's last word ending at most this long before its speech ends ends there
HORIZON_PIECES = 2  # assigned_at_pauses: each later alignment runs this many pieces past its own
HORIZON_PIECES_CHARACTERS = 3  # ... in a language whose units are characters (CHARACTER_LANGUAGES)
CHARACTER_LANGUAGES = frozenset({"Chinese", "Cantonese"})  # measured on Mandarin (docs/aligner.md)
MIN_RUN = 3  # this many consecutive words with one start is a collapse
PILE_WORDS = 2  # this many words starting in a segment's last bin is a pile-up


@dataclasses.dataclass(frozen=True)
class Levels:
    """The speech frames of one segment's audio."""

    offset: float  # seconds of the segment's first sample in the input
    loud: Optional[np.ndarray]  # (n_frames,) bool per 10 ms frame; None: speech and noise too close to tell
    seconds: float  # duration of the audio
    db: Optional[np.ndarray] = None  # (n_frames,) the 10 ms frame levels (dB) ``loud`` was judged from

    @classmethod
    def of(cls, pcm: np.ndarray, offset: float) -> "Levels":
        """Levels of (n,) float32 16 kHz ``pcm`` whose first sample is at ``offset`` seconds."""
        from ..streaming.pause import frame_db

        db = frame_db(pcm)
        loud = None
        if db.size >= int(MIN_PAUSE_S / FRAME_S):
            level, floor = float(np.quantile(db, LEVEL_QUANTILE)), float(np.quantile(db, FLOOR_QUANTILE))
            if level - floor >= MIN_CONTRAST_DB:
                local = np.maximum(_local_floor(db), floor)
                loud = db > np.maximum(level - QUIET_BELOW_DB, local + FLOOR_SHARE * (level - local))
        return cls(offset, loud, pcm.shape[0] / SAMPLE_RATE, db)

    def frames(self, seconds: float) -> int:
        """How many 10 ms frames ``seconds`` span."""
        return int(round(seconds / FRAME_S))

    def speech_in(self, pieces: Sequence[Tuple[int, int]],
                  words: Sequence[Word]) -> List[Tuple[int, int, List[int], int, int]]:
        """Per piece [a, b) (frames) of ``pieces`` with speech and words: (a, b, the indices of
        ``words`` whose middle lies in it, the frame its speech starts at, the frame after its
        speech ends); pieces without either are left out."""
        middles = [(w.start + w.end) / 2 for w in words]
        out = []
        for a, b in pieces:
            inside = [i for i, m in enumerate(middles) if self.time(a) <= m < self.time(b)]
            loud = np.flatnonzero(self.loud[a:b])
            if inside and loud.size:
                out.append((a, b, inside, a + int(loud[0]), a + int(loud[-1]) + 1))
        return out

    def pauses(self, min_seconds: float = MIN_PAUSE_S) -> List[Tuple[int, int]]:
        """Quiet runs [a, b) in frames of at least ``min_seconds``, or touching an edge of the audio."""
        if self.loud is None:
            return []
        quiet = np.concatenate([[False], ~self.loud, [False]])
        edges = np.flatnonzero(np.diff(quiet.astype(np.int8)))
        n, need = self.loud.size, int(round(min_seconds / FRAME_S))
        return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2]) if b - a >= need or a == 0 or b == n]

    def frame(self, t: float) -> int:
        return int(round((t - self.offset) / FRAME_S))

    def time(self, f: int) -> float:
        return round(self.offset + f * FRAME_S, 3)


def _local_floor(db: np.ndarray) -> np.ndarray:
    """(n,) the FLOOR_QUANTILE of the FLOOR_WINDOW_S of frame levels ``db`` around each frame (taken
    once per FLOOR_BLOCK frames, from the middle of the block; near the ends the window is cut)."""
    half = int(round(FLOOR_WINDOW_S / 2 / FRAME_S))
    middles = np.arange(0, db.size, FLOOR_BLOCK) + FLOOR_BLOCK // 2
    floors = np.empty(middles.size)
    whole = (middles >= half) & (middles + half <= db.size)  # windows inside the audio: in one call
    if whole.any():
        windows = np.lib.stride_tricks.sliding_window_view(db, 2 * half)[middles[whole] - half]
        floors[whole] = np.quantile(windows, FLOOR_QUANTILE, axis=1)
    for k in np.flatnonzero(~whole):
        floors[k] = np.quantile(db[max(0, middles[k] - half):middles[k] + half], FLOOR_QUANTILE)
    return np.repeat(floors, FLOOR_BLOCK)[:db.size]


def snap(words: Sequence[Word], levels: Levels, bin_s: float, syllabic: bool = False) -> Tuple[Word, ...]:
    """``words`` (one segment's, in order, times in seconds) with each span fitted to its speech
    (the module docstring): zero-length words widened to one bin ``bin_s`` within their
    neighbours, starts moved out of pauses, ends pulled back out of them, each piece's last word
    drawn out to the end of the piece's speech when that is at most STRETCH_S after it, and the
    pieces' lone words, inner gaps and (``syllabic``: words of syllables, CHARACTER_LANGUAGES) the
    dips between syllables fitted (qwen3asr.aligner.gaps)."""
    out = _widened(words, levels, bin_s)
    pauses = levels.pauses()
    reach = int(round(bin_s / FRAME_S))
    edge = int(round(EDGE_S / FRAME_S))
    for i, w in enumerate(out):
        fs, fe = levels.frame(w.start), levels.frame(w.end)
        # the start lies in a pause: the word starts after it
        after = [b for a, b in pauses if a <= fs < b < fe]
        if after:
            fs = max(fs, max(after) - edge)
        # the end lies in a pause, or reaches through one by at most a bin after a bin of speech at
        # least (less is within a bin of the start: the word may as well be the speech after it)
        before = [a for a, b in pauses if fs < a < fe and (fe <= b or (fe - b <= reach and a - fs >= reach))]
        if before:
            fe = min(fe, min(before) + edge)
        start, end = max(w.start, levels.time(fs)), min(w.end, levels.time(fe))
        if (start, end) != (w.start, w.end) and end > start:
            out[i] = dataclasses.replace(w, start=start, end=end)
    pieces = pieces_at_pauses(levels)
    return gaps.fitted(_to_speech_end(out, levels, pieces, edge), levels, pieces, MIN_PAUSE_S, syllabic)


def _to_speech_end(words: List[Word], levels: Levels, pieces: Sequence[Tuple[int, int]],
                   edge: int) -> Tuple[Word, ...]:
    """The last word of each of ``pieces`` (pieces_at_pauses, frames) ending before the piece's speech
    ends, by at most STRETCH_S, ends there (keeping ``edge`` frames of the pause): what the piece
    holds after its last word is that word's (the demo aligner's last end in a piece falls early)."""
    if levels.loud is None or not words:
        return tuple(words)
    for _, b, inside, _, stop in levels.speech_in(pieces, words):
        i = inside[-1]
        end = levels.time(min(b, stop + edge))
        if words[i].end < levels.time(stop) <= words[i].end + STRETCH_S and (i + 1 == len(words)
                                                                             or end <= words[i + 1].start):
            words[i] = dataclasses.replace(words[i], end=end)
    return tuple(words)


def _widened(words: Sequence[Word], levels: Levels, bin_s: float) -> List[Word]:
    """Zero-length words given one bin each. A run of k of them at one time t takes k bins: the free
    time after t (up to the next word's start or the audio's end) first, then the free time before
    it (back to the previous word's end or the audio's start), then a share of a neighbour longer
    than two bins (the next one first); the run's words split what they got evenly."""
    t = [[w.start, w.end] for w in words]
    lo, hi = levels.offset, levels.offset + levels.seconds
    i = 0
    while i < len(t):
        if t[i][1] > t[i][0]:
            i += 1
            continue
        j = i + 1
        while j < len(t) and t[j][0] == t[j][1] == t[i][0]:
            j += 1
        at, want = t[i][0], (j - i) * bin_s
        a, b = at, min(at + want, max(at, t[j][0] if j < len(t) else hi))
        a = max(a - (want - (b - a)), t[i - 1][1] if i else lo, lo) if b - a < want else a
        short = want - (b - a)
        if short > 1e-9 and j < len(t) and t[j][0] == b and t[j][1] - t[j][0] > 2 * bin_s:
            b = t[j][0] = b + min(short, t[j][1] - t[j][0] - 2 * bin_s)
        elif short > 1e-9 and i and t[i - 1][1] == a and t[i - 1][1] - t[i - 1][0] > 2 * bin_s:
            a = t[i - 1][1] = a - min(short, t[i - 1][1] - t[i - 1][0] - 2 * bin_s)
        step = (b - a) / (j - i)
        for k in range(i, j):
            t[k] = [a + (k - i) * step, a + (k - i + 1) * step]
        i = j
    return [w if (w.start, w.end) == (round(a, 3), round(b, 3)) else dataclasses.replace(w, start=round(a, 3),
                                                                                            end=round(b, 3))
            for w, (a, b) in zip(words, t)]


def collapse(words: Sequence[Word], start: float, end: float, bin_s: float) -> Tuple[Optional[str], int]:
    """Whether the words of a piece [start, end) seconds aligned: (None, 0), or (why not, how many
    words are caught in it). Why: "same start" (MIN_RUN or more consecutive words with one
    start), "zero start" (a word past the first at the piece's start), "end pile-up" (PILE_WORDS
    or more words starting in its last bin); the first found names it."""
    starts = [w.start for w in words]
    reasons, bad = [], 0
    run = 1
    for i in range(1, len(starts) + 1):
        if i < len(starts) and starts[i] == starts[i - 1]:
            run += 1
            continue
        if run >= MIN_RUN:
            reasons.append("same start")
            bad += run
        run = 1
    at_zero = sum(s <= start + 0.0005 for s in starts[1:])
    if at_zero:
        reasons.append("zero start")
        bad += at_zero
    piled = sum(s >= end - bin_s for s in starts)
    if piled >= PILE_WORDS:
        reasons.append("end pile-up")
        bad += piled
    return (reasons[0] if reasons else None), bad


def pieces_at_pauses(levels: Levels) -> List[Tuple[int, int]]:
    """The segment cut in the middle of every pause of at least SPLIT_PAUSE_S: [a, b) in frames."""
    n = 0 if levels.loud is None else levels.loud.size
    cuts = [(a + b) // 2 for a, b in levels.pauses(SPLIT_PAUSE_S) if 0 < a and b < n]
    bounds = [0] + cuts + [n]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def halves(pcm: np.ndarray) -> List[Tuple[int, int]]:
    """The segment cut in two at its quietest frame in the middle third: [a, b) in frames."""
    from ..streaming.pause import frame_db

    db = frame_db(pcm)
    n = db.size
    if n < 3:
        return [(0, n)]
    lo, hi = n // 3, max(n // 3 + 1, 2 * n // 3)
    mid = lo + int(np.argmin(db[lo:hi]))
    return [(0, mid), (mid, n)]


def share_words(words: Sequence[Word], levels: Levels, pieces: Sequence[Tuple[int, int]],
                by: str = "speech") -> List[List[int]]:
    """The indices of ``words`` each piece (frames) holds, words kept in order. ``by`` "time": the
    piece holding a word's start (the first alignment's, right where it did not collapse);
    "speech": words weighted by their length in characters (one more for the gap) spread over the
    pieces in proportion to their speech frames (all frames when speech cannot be told from noise)."""
    if by == "time":
        cuts = [levels.time(a) for a, _ in pieces[1:]]
        owner = np.searchsorted(cuts, [w.start for w in words], side="right")
    else:
        loud = levels.loud
        speech = np.array([max(1, int(loud[a:b].sum()) if loud is not None else b - a) for a, b in pieces], float)
        bounds = np.cumsum(speech) / speech.sum()
        weight = np.array([len(w.word) + 1 for w in words], float)
        middle = (np.cumsum(weight) - weight / 2) / weight.sum()
        owner = np.minimum(np.searchsorted(bounds, middle), len(pieces) - 1)
    return [[int(i) for i in np.flatnonzero(owner == p)] for p in range(len(pieces))]


def unheard(words: Sequence[Word], levels: Levels, pieces: Sequence[Tuple[int, int]]) -> bool:
    """Whether sharing ``words`` by their times leaves a piece with speech (SPLIT_PAUSE_S of loud
    frames, or any piece when speech cannot be told from noise) without a word: only then are the
    times too collapsed to tell the pieces' words, and a share by speech length (a guess that moves
    words the alignment placed) is worth trying (docs/aligner.md)."""
    held = share_words(words, levels, pieces, "time")
    need = int(round(SPLIT_PAUSE_S / FRAME_S))
    return any(not h and (levels.loud is None or int(levels.loud[a:b].sum()) >= need)
               for h, (a, b) in zip(held, pieces))


def realign(aligner, pcm: np.ndarray, words: Sequence[Word], language: str, levels: Levels,
            pieces: Sequence[Tuple[int, int]],
            shares: Sequence[Sequence[int]]) -> Optional[Tuple[Tuple[Word, ...], Optional[str], int]]:
    """``words`` aligned again piece by piece (pieces in frames of ``pcm``; ``shares``: the
    indices of the words each piece holds, in order, as share_words gives them), with the
    collapse check over the pieces (the first reason, the words caught); None when a piece's
    text does not give back its words."""
    bin_s = aligner.segment_ms / 1000.0
    out: List[Word] = []
    reason, bad = None, 0
    for (a, b), held in zip(pieces, shares):
        if not held:
            continue
        units = [words[i].word for i in held]
        t0, t1 = levels.time(a), levels.time(b)
        got = aligner.align(pcm[a * HOP:b * HOP], " ".join(units), language, offset=t0)
        if [w.word for w in got] != units:
            return None
        why, n = collapse(got, t0, t1, bin_s)
        reason, bad = reason or why, bad + n
        out += got
    return tuple(out), reason, bad


def assigned_at_pauses(aligner, pcm: np.ndarray, words: Sequence[Word], language: str,
                       levels: Levels) -> Optional[Tuple[Tuple[Word, ...], List[int]]]:
    """``words`` (the whole segment's alignment) aligned again piece by piece from the left, the
    pieces cut at the segment's pauses (pieces_at_pauses), so that the aligner's drift starts
    again after every pause. The first piece's words are aligned in it alone; from each later cut
    the remaining text is aligned over the audio up to HORIZON_PIECES pieces further
    (HORIZON_PIECES_CHARACTERS in CHARACTER_LANGUAGES, whose units are characters): the words
    the whole alignment starts before that end (the rest of the text where it is the segment's
    end), its first words placed well. A piece keeps the words whose middle (start + end, halved)
    lies before its end (with none, the first word if it starts before it), with those times (an
    end past the piece's end cut back to it, so the next piece's words do not start before it); the
    last piece takes what is left. About four aligner passes' worth of audio for the segment in
    all. Returns (the words, how many each of pieces_at_pauses holds); None when there is one
    piece or an alignment does not give back its words (the caller keeps ``words``)."""
    pieces = pieces_at_pauses(levels)
    if len(pieces) < 2 or not words:
        return None
    last = len(pieces) - 1
    ahead = HORIZON_PIECES_CHARACTERS if language in CHARACTER_LANGUAGES else HORIZON_PIECES
    rest = [w.word for w in words]
    got: Sequence[Word] = words
    out: List[Word] = []
    counts = [0] * len(pieces)
    for i, (a, b) in enumerate(pieces):
        if i:
            h = min(i + ahead, last)
            text = rest
            if h < last:
                until = levels.time(pieces[h][1])  # the window's end (seconds)
                text = rest[:max(1, sum(w.start < until for w in words[len(out):]))]
            got = aligner.align(pcm[a * HOP:pieces[h][1] * HOP], " ".join(text), language, offset=levels.time(a))
            if [w.word for w in got] != text:
                return None
        end = levels.time(b)
        if i == last:
            out += _ending_by(got, end)
            counts[i] = len(got)
            break
        k = sum((w.start + w.end) / 2 < end for w in got)
        if not k and got and got[0].start < end:  # the first word starts in the piece: it is the piece's
            k = 1
        if k:
            mine = got[:k] if i else aligner.align(pcm[a * HOP:b * HOP], " ".join(rest[:k]), language,
                                                   offset=levels.time(a))
            if [w.word for w in mine] != rest[:k]:
                return None
            out += _ending_by(mine, end)
            counts[i] = k
            rest = rest[k:]
        if not rest:
            break
    return tuple(out), counts


def _ending_by(words: Sequence[Word], end: float) -> List[Word]:
    """``words`` (a piece's, each starting before ``end``) with an end past ``end`` cut back to it."""
    return [w if w.end <= end else dataclasses.replace(w, end=max(w.start, end)) for w in words]


def refined(aligner, pcm: np.ndarray, offset: float, words: Tuple[Word, ...], language: str,
            spans: str, reader=None, text: Optional[str] = None) -> Tuple[Tuple[Word, ...], Optional[str]]:
    """One segment's words (``aligner.align`` of its audio ``pcm``, (n,) float32 16 kHz, whose first
    sample is at ``offset`` seconds), with ``spans`` "speech" aligned again piece by piece at its
    pauses (assigned_at_pauses), checked for a collapse and, with "speech", aligned again in pieces
    when collapsed (the pieces at its pauses, then its halves; words shared by their first times,
    then by the speech where those leave a piece with speech unheard: the first way without a
    collapse, else the one with the fewest words caught) and fitted to the speech; with "raw" the
    official times as they are; with "checked" as "speech", the pieces' words checked by the ASR
    model first (qwen3asr.aligner.checked: ``reader`` an AsrReader, ``text`` the segment's
    transcript), and at the end, unless a collapse is left, each piece aligned again alone as the
    mean of shifted passes (alone_shifted).
    Returns (the words, None or the flag "collapsed: <reason>")."""
    if spans == "checked" and reader is None:
        raise ValueError('word_spans "checked" needs a reader (qwen3asr.aligner.checked.AsrReader)')
    bin_s = aligner.segment_ms / 1000.0
    levels = Levels.of(pcm, offset)
    end = offset + levels.seconds
    if spans != "raw":
        at = assigned_at_pauses(aligner, pcm, words, language, levels)
        if at is not None:
            words = at[0]
            if spans == "checked":
                from .checked import checked_pieces

                words = checked_pieces(aligner, pcm, words, at[1], language, levels, pieces_at_pauses(levels),
                                       reader, text)
    reason, bad = collapse(words, offset, end, bin_s)
    first = reason  # the first alignment's collapse, if any
    if reason and spans != "raw":
        for how, pieces in (("its pauses", pieces_at_pauses(levels)), ("halves", halves(pcm))):
            for by in ("time", "speech") if len(pieces) > 1 else ():
                if by == "speech" and not unheard(words, levels, pieces):
                    continue
                again = realign(aligner, pcm, words, language, levels, pieces,
                                share_words(words, levels, pieces, by))
                if again is not None and again[2] < bad:
                    words, reason, bad = again
                    logger.info("the words of %.2f-%.2f s collapsed (%s): aligned again in %d pieces cut at %s, "
                                "shared by %s: %s", offset, end, first, len(pieces), how, by,
                                "aligned" if reason is None else f"{bad} words still caught")
                if reason is None:
                    break
            if reason is None:
                break
    flag = None
    if reason:
        flag = f"collapsed: {reason}"
        logger.warning("the words of %.2f-%.2f s did not align (%s, %d words)%s; their times are unreliable",
                       offset, end, reason, bad, "" if spans == "raw" else ", also in smaller pieces")
    if spans != "raw":
        if spans == "checked" and not flag:
            words = alone_shifted(aligner, pcm, words, language, levels, shifted.CHECKED_PASSES, first is None)
        words = snap(words, levels, bin_s, language in CHARACTER_LANGUAGES)
    return words, flag


def alone_shifted(aligner, pcm: np.ndarray, words: Sequence[Word], language: str, levels: Levels,
                  passes: int, unshifted: bool = False) -> Tuple[Word, ...]:
    """``words`` (a segment's spans, ``pcm`` its audio) with each piece at its pauses
    (pieces_at_pauses; the whole segment when it has none) aligned again alone as the mean of
    ``passes`` shifted passes (qwen3asr.aligner.shifted), holding the words whose middle (of their
    snapped spans) lies in it: the words stay in the pieces they were given, and their times come
    from the piece's own audio and fall between the bins (docs/aligner.md, "Times between the
    bins"). ``unshifted``: the segment's words are still its unshifted alignment (one piece,
    nothing aligned again), taken as the first pass. ``words`` as they are when a piece's alignment does
    not give back its words or collapses, or with one pass."""
    if passes < 2 or not words:
        return tuple(words)
    passed = shifted.Shifted(aligner, passes)
    pieces = pieces_at_pauses(levels)
    if len(pieces) < 2:
        if unshifted:
            got = passed.averaged(pcm, " ".join(w.word for w in words), language, words, levels.offset)
            end = levels.offset + levels.seconds
            return tuple(words) if collapse(got, levels.offset, end, aligner.segment_ms / 1000.0)[0] else got
        pieces = [(0, int(round(levels.seconds / FRAME_S)))]
    middles = [Word(w.word, (w.start + w.end) / 2, (w.start + w.end) / 2)
               for w in snap(words, levels, aligner.segment_ms / 1000.0)]
    again = realign(passed, pcm, middles, language, levels, pieces, share_words(middles, levels, pieces, "time"))
    return tuple(words) if again is None or again[1] else again[0]


__all__ = ["CHARACTER_LANGUAGES", "HORIZON_PIECES", "HORIZON_PIECES_CHARACTERS", "Levels", "alone_shifted",
           "assigned_at_pauses", "collapse", "halves", "pieces_at_pauses", "realign", "refined", "share_words", "snap",
           "unheard"]
