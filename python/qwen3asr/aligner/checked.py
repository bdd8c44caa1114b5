"""The words of each piece at a pause, checked by the ASR model (``word_spans="checked"``).

With "speech", a segment with pauses is aligned piece by piece from the left
(qwen3asr.aligner.refine.assigned_at_pauses), and a piece that takes a word too few or too many
hands the error to every piece after it (docs/aligner.md, "A wrong boundary cascades"). The
aligner cannot tell: it is as sure of a wrong text as of the right one. The ASR model can: the
text of a piece, read from the piece's audio alone, is likelier when it is the piece's own.

In languages written with spaces between words (ANCHORED), ``anchored_counts`` first decides
each boundary on its own: among the default's and those up to WINDOW_WORDS words either side,
the likeliest start of the audio after it (the piece after the boundary and the next,
ANCHOR_PIECES) as read by the ASR, ANCHOR_WORDS words long, MOVE_NATS per word moved; a moved
boundary only where the ASR's greedy reading of that audio begins exactly with those words.
Deciding each boundary from the audio after it breaks a cascade where it starts. Measured worse
for Chinese, whose units are characters (docs/aligner.md, "Boundaries read from the audio after
them").

``checked_counts`` then moves the boundaries between pieces by up to WINDOW_WORDS words each, by
one dynamic programme over the segment: each piece costs the character edits between its words
and the ASR's greedy reading of its audio alone, plus a weight per nat of -log P(piece text,
end of text | piece audio) (and EMPTY_NATS for a piece with AUDIBLE_S of speech left without
words; in languages written in characters, also SYLLABLE_EDITS per character more or fewer than
the syllables counted in a short piece's audio, qwen3asr.aligner.syllables; in English per
syllable more or fewer that its words' spellings give). The moves come in
runs: the default's counts err in runs, a piece given a word too many or too few shifting every
boundary after it (docs/aligner.md, "Runs of wrong boundaries"), so a
run is paid once, a cost per word where its shift starts or changes, and a return to the
default's boundary is free (the weight and the cost by the language's word units:
CHARACTER_COSTS, SPACED_COSTS). Where a boundary moved, the pieces are aligned again alone, as
``speech`` does.

``AsrReader`` scores texts with the engine's ASR model and decoder: the piece's audio encoded
and prefilled once in the official prompt with the segment's language, then the candidate texts
teacher-forced after it (``text_logits`` of the decoder: on the CPU a branch of the prompt's KV
cache, on the board one GET_LOGITS prefill of the prompt and the text), the longest text from
each start first so that the shorter ones are read from its rows; its greedy reading is one
decode of the same prompt (``engine.decode``, with the loop guard). Cost: an encoder pass, a
greedy decode and a prefill of each piece, and a text run for each of its starts; in ANCHORED
languages the same for the audio after each boundary (no decode), with a text run for each
candidate start (docs/aligner.md, "The ASR's check, built in", "Runs of boundaries moved
together")."""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import Qwen3ASRError
from ..results import Word
from . import syllables
from .words import clean_word

logger = logging.getLogger(__name__)

WINDOW_WORDS = 2  # a boundary moves by at most this many words from the default's
MOVE_NATS = 6.0  # anchored_counts: the log-likelihood a start must gain per word it moves the boundary
EMPTY_NATS = 10.0  # checked_counts: the cost of leaving a piece with speech without a word, in nats
# checked_counts, by the languages' word units: (nats, run), how many character edits a nat of a
# piece text's likelihood weighs, and how many a run of moved boundaries costs per word where its
# shift starts or changes; chosen on dev (docs/aligner.md, "Runs of boundaries moved together")
CHARACTER_COSTS = (0.03, 3.0)  # languages written in characters (a word moved is two edits)
SPACED_COSTS = (0.3, 4.0)  # languages written with spaces between words
AUDIBLE_S = 0.2  # seconds of speech that make a piece audible: emptying it costs EMPTY_NATS
# checked_counts in languages written in characters (one a syllable): a piece whose syllables
# (qwen3asr.aligner.syllables) count at most SYLLABLES_UP_TO costs SYLLABLE_EDITS per character
# more or fewer than that (the count is seldom wrong there; chosen on dev: "Syllables counted for Chinese");
# in English (syllables.SPELLED) per syllable its words' spellings give more or fewer (the same
# weights chosen again on English dev: "Syllables counted for English")
SYLLABLE_EDITS = 3.0
SYLLABLES_UP_TO = 3
ANCHOR_WORDS = 1  # anchored_counts: the words at the start of the audio after a boundary that must be read there
ANCHOR_PIECES = 2  # ... that audio: the piece after the boundary and the next
# anchored_counts runs for these (words between spaces; measured on English, worse on Chinese)
ANCHORED = frozenset({"English", "German", "Spanish", "French", "Italian", "Portuguese", "Russian"})


@dataclasses.dataclass(frozen=True)
class Reading:
    """How the ASR model reads one candidate text from one piece's audio."""

    log_p: float  # log P(the text's tokens, then an end of text | the audio); without the end as a prefix
    exact: bool  # its greedy reading is exactly the text (as a prefix: begins with it)


Read = Callable[[int, int, int], Reading]  # (piece, first word, end word) -> the piece read as those words
Edits = Callable[[int, int, int], int]  # (piece, first word, end word) -> character edits to the piece's greedy reading
Start = Callable[[int, int, int], Reading]  # (boundary, first word, end word) -> its audio after read as beginning so


def anchored_counts(counts: Sequence[int], start: Start) -> List[int]:
    """The words per piece with each boundary decided on its own from the audio after it (the
    module docstring). ``counts``: the default's words per piece; ``start(p, a, b)``: the audio
    after boundary p (p = 1 .. pieces - 1, the start of piece p) read as beginning with words [a,
    b), as a prefix. A boundary moves to the candidate whose first ANCHOR_WORDS words are likeliest
    less MOVE_NATS a word moved, among those read exactly there (the default's competes whatever
    its reading); no boundary moves past the segment's last word. Boundaries stay in order."""
    bounds = [0] + [int(x) for x in np.cumsum(counts)]
    n = bounds[-1]
    new = list(bounds)
    for p in range(1, len(counts)):
        at = bounds[p]
        best = (start(p, at, min(n, at + ANCHOR_WORDS)).log_p if at < n else -np.inf, at)
        for s in range(max(0, at - WINDOW_WORDS), min(n - 1, at + WINDOW_WORDS) + 1):
            if s == at:
                continue
            got = start(p, s, min(n, s + ANCHOR_WORDS))
            score = got.log_p - MOVE_NATS * abs(s - at)
            if got.exact and score > best[0]:
                best = (score, s)
        new[p] = best[1]
    for p in range(1, len(new)):
        new[p] = max(new[p], new[p - 1])
    return [new[p + 1] - new[p] for p in range(len(counts))]


def checked_counts(counts: Sequence[int], audible: Sequence[bool], read: Read, edits: Edits,
                   costs: Tuple[float, float] = SPACED_COSTS,
                   counted: Optional[Sequence[Optional[int]]] = None,
                   unit_syllables: Optional[Sequence[int]] = None) -> List[int]:
    """The words per piece after the ASR's check (the module docstring). ``counts``: the
    default's words per piece (summing to the words of the segment); ``audible``: per piece,
    whether it holds AUDIBLE_S of speech; ``read(p, a, b)``: piece p read as words [a, b);
    ``edits(p, a, b)``: the character edits between words [a, b) and piece p's greedy reading;
    ``costs``: (nats, run), CHARACTER_COSTS or SPACED_COSTS; ``counted``: per piece, the
    syllables counted in its audio (None: not counted); ``unit_syllables``: per word, its
    syllables (None: one each, as characters are); a piece counting at most SYLLABLES_UP_TO costs
    SYLLABLE_EDITS per syllable its words have more or fewer than that.
    Each boundary stays within WINDOW_WORDS of the default's; boundaries stay in order; a segment
    of one piece is returned as it is. Among equal costs the smaller shift wins."""
    n_pieces = len(counts)
    bounds = [0] + [int(x) for x in np.cumsum(counts)]
    n = bounds[-1]
    if n_pieces < 2:
        return list(counts)
    nats_edits, run_edits = costs
    if unit_syllables is not None and len(unit_syllables) != n:
        raise ValueError(f"unit_syllables gives {len(unit_syllables)} words' syllables for {n} words")
    said = np.concatenate([[0], np.cumsum(unit_syllables if unit_syllables is not None else np.ones(n, int))])

    def cost(p: int, a: int, b: int) -> float:
        nats = -read(p, a, b).log_p + (EMPTY_NATS if a == b and audible[p] else 0.0)
        off = 0.0
        if counted is not None and counted[p] is not None and counted[p] <= SYLLABLES_UP_TO:
            off = SYLLABLE_EDITS * abs(int(said[b] - said[a]) - counted[p])
        return nats_edits * nats + edits(p, a, b) + off

    best = {0: (0.0, 0)}  # shift of the boundary from the default's -> (least cost up to it, the shift before)
    steps = [best]
    for p in range(1, n_pieces + 1):
        nxt: dict = {}
        for shift in (range(-WINDOW_WORDS, WINDOW_WORDS + 1) if p < n_pieces else (0,)):
            b = bounds[p] + shift
            if not 0 <= b <= n:
                continue
            for before, (score, _) in best.items():
                a = bounds[p - 1] + before
                if a > b:
                    continue
                change = 0.0 if shift in (before, 0) else run_edits * abs(shift - before)
                total = score + change + cost(p - 1, a, b)
                if shift not in nxt or total < nxt[shift][0] or (total == nxt[shift][0] and
                                                                 abs(before) < abs(nxt[shift][1])):
                    nxt[shift] = (total, before)
        best = nxt
        steps.append(best)
    shifts = [0]
    for p in range(n_pieces, 0, -1):
        shifts.append(steps[p][shifts[-1]][1])
    chosen = [bound + shift for bound, shift in zip(bounds, reversed(shifts))]
    return [chosen[p + 1] - chosen[p] for p in range(n_pieces)]


def letters(text: str) -> str:
    """``text`` as the check compares it: the characters a word keeps (letters, digits and "'",
    qwen3asr.aligner.words.clean_word), lower case."""
    return clean_word(text.lower())


def edit_distance(a: str, b: str) -> int:
    """The characters inserted, deleted or replaced to make ``a`` into ``b`` (Levenshtein)."""
    if len(a) < len(b):
        a, b = b, a
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def unit_starts(text: str, units: Sequence[str]) -> Optional[List[int]]:
    """Where each of ``units`` (the aligner's word units of ``text``, qwen3asr.aligner.words)
    starts in ``text``: each unit's characters in order, with only characters the units drop
    (spaces, punctuation) between them; None when the units are not found so (a text the
    tagger normalised, say)."""
    from .words import is_kept

    starts, i = [], 0
    for unit in units:
        first = None
        for ch in unit:
            while i < len(text) and text[i] != ch:
                if is_kept(text[i]):
                    return None
                i += 1
            if i == len(text):
                return None
            first = i if first is None else first
            i += 1
        starts.append(first)
    return starts


class AsrReader:
    """Reads texts from audio with an engine's ASR model (the module docstring): ``piece(pcm,
    language)`` gives a PieceReading of that audio, or None when the engine's decoder cannot
    score texts (then the default's words stand).

    A text whose token ids begin the ids of a text already run on that audio is read from that
    run's rows (the logits after each id hold its likelihood, its greedy check and its end), so
    reading the longest text from a start first reads every shorter one from it for nothing."""

    def __init__(self, engine):
        self.engine = engine
        self.runs = 0  # decoder runs (one per text not read from an earlier run's rows)
        self.decodes = 0  # greedy readings (one per piece whose reading the check needed)

    def piece(self, pcm: np.ndarray, language: str) -> Optional["PieceReading"]:
        engine = self.engine
        if not hasattr(engine.decoder, "text_logits"):
            return None
        emb = engine.encode(engine.features(pcm))
        prompt = engine.embed_prompt(engine.prompt(emb.shape[0], language=language), emb)
        logits_of = engine.decoder.text_logits(prompt)
        tok = engine.tokenizer
        eos = list(tok.eos_ids)

        done: list = []  # per run: its ids, log P of each id, log P of an end after each prefix, the greedy ids

        def run(ids: list) -> tuple:
            self.runs += 1
            x = logits_of(ids).astype(np.float64)
            x -= x.max(axis=-1, keepdims=True)
            lp = x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
            done.append((ids, lp[np.arange(len(ids)), ids], np.logaddexp.reduce(lp[:, eos], axis=-1),
                         np.argmax(lp, axis=-1)))
            return done[-1]

        def reading(text: str, end: bool = True) -> Reading:
            ids = tok.encode(text) if text else []
            n = len(ids)
            ran, id_lp, end_lp, greedy = next((r for r in done if r[0][:n] == ids), None) or run(ids)
            read = all(greedy[j] == t for j, t in enumerate(ids))
            if not end:
                return Reading(float(id_lp[:n].sum()), bool(read))
            return Reading(float(id_lp[:n].sum() + end_lp[n]), bool(read and greedy[n] in eos))

        @functools.lru_cache(maxsize=None)
        def heard(max_tokens: int) -> str:
            from ..audio import SAMPLE_RATE
            from ..decoding import MAX_NEW_TOKENS, DecodingOptions

            self.decodes += 1
            got = engine.decode(prompt, DecodingOptions(max_new_tokens=min(max_tokens, MAX_NEW_TOKENS)),
                                audio_seconds=pcm.shape[0] / SAMPLE_RATE)
            return tok.decode(got.tokens)

        return PieceReading(reading, heard)


@dataclasses.dataclass(frozen=True)
class PieceReading:
    """One piece's audio as AsrReader reads it: called with a text (and ``end``), how the ASR
    model reads that text from it, then an end of text or (``end`` False) as a prefix;
    ``heard(max_tokens)``, its greedy reading (at most ``max_tokens`` tokens, the loop guard
    on)."""

    reading: Callable[..., Reading]
    heard: Callable[[int], str]

    def __call__(self, text: str, end: bool = True) -> Reading:
        return self.reading(text, end)


def checked_pieces(aligner, pcm: np.ndarray, words: Sequence[Word], counts: Sequence[int], language: str,
                   levels, pieces: Sequence[Tuple[int, int]], reader: AsrReader,
                   text: Optional[str] = None) -> Tuple[Word, ...]:
    """``words`` (a segment's, aligned piece by piece with ``counts`` words per piece of
    ``pieces``, frames of ``levels``) with the pieces' words checked by ``reader`` and, where a
    boundary moved, each piece aligned again alone; ``words`` as they are when none moved, the
    decoder cannot score texts, or an alignment does not give back its words. ``text``: the
    segment's transcript, whose spans (punctuation and case kept, as the ASR writes them) are
    the candidate texts; None or not matching the words: the words joined (with no space in
    Chinese and Cantonese)."""
    from .refine import CHARACTER_LANGUAGES, FRAME_S, HOP, realign

    units = [w.word for w in words]
    starts = unit_starts(text, units) if text else None
    joiner = "" if language in ("Chinese", "Cantonese") else " "

    def span(a: int, b: int) -> str:
        if a == b:
            return ""
        if starts is None:
            return joiner.join(units[a:b])
        return text[starts[a]:starts[b] if b < len(units) else len(text)].strip()

    audible = [levels.loud is not None and levels.loud[a:b].sum() * FRAME_S >= AUDIBLE_S for a, b in pieces]
    readers: dict = {}  # piece -> its reading
    windows: dict = {}  # boundary -> the reading of its audio after

    def reading_of(store: dict, key: int, a: int, b: int):
        if key not in store:
            store[key] = reader.piece(pcm[a * HOP:b * HOP], language)
        if store[key] is None:
            raise _CannotRead("it cannot score texts")
        return store[key]

    def start(p: int, a: int, b: int) -> Reading:
        last = pieces[min(p + ANCHOR_PIECES, len(pieces)) - 1][1]
        return reading_of(windows, p, pieces[p][0], last)(span(a, b), end=False)

    def read(p: int, a: int, b: int) -> Reading:
        of = reading_of(readers, p, *pieces[p])
        of(span(a, longest[p]))  # the longest text from a first: the shorter ones are read from it
        return of(span(a, b))

    @functools.lru_cache(maxsize=None)
    def heard(p: int) -> str:  # piece p's greedy reading, as compared; capped at twice its widest text's tokens
        widest = span(max(0, bounds[p] - WINDOW_WORDS), longest[p])
        return letters(reading_of(readers, p, *pieces[p]).heard(2 * len(reader.engine.tokenizer.encode(widest)) + 8))

    def edits(p: int, a: int, b: int) -> int:
        return edit_distance(letters("".join(units[a:b])), heard(p))

    try:
        first = anchored_counts(counts, start) if language in ANCHORED else list(counts)
        bounds = [0] + [int(x) for x in np.cumsum(first)]
        longest = [min(bounds[-1], b + WINDOW_WORDS) for b in bounds[1:-1]] + [bounds[-1]]  # a piece's last end
        costs = CHARACTER_COSTS if language in CHARACTER_LANGUAGES else SPACED_COSTS
        counted, said = None, None
        if (language in CHARACTER_LANGUAGES or language in syllables.SPELLED) and levels.loud is not None:
            counted = syllables.per_piece(levels.db, levels.loud, pieces)
            if language in syllables.SPELLED:  # else a character is a syllable
                said = [syllables.spelled(u) for u in units]
        new = checked_counts(first, audible, read, edits, costs, counted, said)
    except (_CannotRead, Qwen3ASRError) as exc:  # the board's runtime gives no logits rows, or its run failed
        logger.warning("the ASR model could not check the words of the pieces at pauses (decoder %s: %s): "
                       "they keep the default's", getattr(reader.engine.decoder, "name", "?"), exc)
        return tuple(words)
    if list(new) == list(counts):
        return tuple(words)
    ends = np.cumsum(new)
    again = realign(aligner, pcm, words, language, levels, pieces,
                    [list(range(e - k, e)) for e, k in zip(ends, new)])
    if again is None:
        return tuple(words)
    logger.debug("the ASR moved the words of the pieces at pauses: %s -> %s", list(counts), new)
    return again[0]


class _CannotRead(Exception):
    pass


__all__ = ["ANCHORED", "ANCHOR_PIECES", "ANCHOR_WORDS", "AUDIBLE_S", "AsrReader", "CHARACTER_COSTS", "EMPTY_NATS",
           "MOVE_NATS", "PieceReading", "SPACED_COSTS", "SYLLABLE_EDITS", "SYLLABLES_UP_TO", "Reading", "WINDOW_WORDS",
           "anchored_counts", "checked_counts", "checked_pieces", "edit_distance", "letters", "unit_starts"]
