"""SubRip (.srt) and WebVTT (.vtt) text from timed segments, or from timed words.

Without words: one cue per segment; text lines are wrapped at ``max_line`` characters (at
spaces; text without spaces, such as Chinese, is cut at the limit). Cues with empty text are
skipped.

With words (``word_cues``, transcripts made with word timestamps): cues are cut at word
boundaries by the usual subtitle rules: at most ``max_lines`` lines of ``max_line`` characters
and ``max_duration`` seconds per cue, never across a segment, a new cue after a pause of
``max_gap`` seconds. Each cue shows the transcript's own spelling (punctuation included) of its
words, and runs from its first word's start to its last word's end. WebVTT cues can also carry
every word's time (``inline_words``): ``<00:00:01.200>word``, which players show as karaoke.
"""

from __future__ import annotations

import dataclasses
import textwrap
from typing import Iterable, List, Sequence

from .results import Segment, Word

MAX_LINE = 42  # characters per subtitle line (a common broadcast limit)
MAX_LINES = 2  # lines per cue
MAX_CUE_SECONDS = 7.0  # longest cue (s)
MAX_GAP_SECONDS = 1.0  # a pause this long between two words starts a new cue


@dataclasses.dataclass(frozen=True)
class Cue:
    """One subtitle: its time span, its text and (with word timestamps) its words."""

    start: float  # seconds
    end: float  # seconds
    text: str  # the transcript's spelling
    words: tuple[Word, ...] = ()
    pieces: tuple[str, ...] = ()  # the text of each word (pieces joined give ``text``)


def _timestamp(seconds: float, sep: str) -> str:
    ms = max(0, int(round(seconds * 1000)))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _lines(text: str, max_line: int) -> List[str]:
    text = " ".join(text.split())
    if " " in text:
        return textwrap.wrap(text, max_line, break_long_words=True, break_on_hyphens=False)
    return [text[i:i + max_line] for i in range(0, len(text), max_line)]


def word_pieces(text: str, words: Sequence[Word]) -> List[str]:
    """The text of each word in ``text``: pieces that, joined, give ``text`` back, each starting
    at its word (the first also holds what precedes it), so punctuation and spaces stay with the
    word before them. Falls back to the word units themselves (space-joined) when ``text`` does
    not spell them in order (a normalising Japanese tokenizer, a text edited after alignment)."""
    from .aligner.words import is_kept

    starts, pos = [], 0
    for w in words:
        unit = w.word
        while pos < len(text) and text[pos] != unit[:1]:
            pos += 1
        if pos >= len(text):
            return [w.word + " " for w in words[:-1]] + [words[-1].word] if words else []
        starts.append(pos)
        k = 0
        while pos < len(text) and k < len(unit):
            if text[pos] == unit[k]:
                k += 1
            elif is_kept(text[pos]):
                return [w.word + " " for w in words[:-1]] + [words[-1].word]
            pos += 1
        if k < len(unit):
            return [w.word + " " for w in words[:-1]] + [words[-1].word]
    if not starts:
        return []
    starts[0] = 0
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


def word_cues(segments: Iterable[Segment], max_line: int = MAX_LINE, max_lines: int = MAX_LINES,
              max_duration: float = MAX_CUE_SECONDS, max_gap: float = MAX_GAP_SECONDS) -> List[Cue]:
    """Cues cut at word boundaries (see the module docstring); segments without words give one
    cue each, as without word timestamps."""
    cues: List[Cue] = []
    for seg in segments:
        if not seg.words:
            if seg.text.strip():
                cues.append(Cue(seg.start, seg.end, seg.text.strip()))
            continue
        pieces = word_pieces(seg.text, seg.words)
        group_w: List[Word] = []
        group_p: List[str] = []

        def flush():
            if group_w:
                text = "".join(group_p).strip()
                cues.append(Cue(group_w[0].start, max(group_w[-1].end, group_w[0].start), text, tuple(group_w),
                                tuple(group_p)))
                group_w.clear()
                group_p.clear()

        for w, p in zip(seg.words, pieces):
            if group_w:
                text = "".join(group_p + [p]).strip()
                too_long = len(_lines(text, max_line)) > max_lines
                if too_long or w.end - group_w[0].start > max_duration or w.start - group_w[-1].end >= max_gap:
                    flush()
            group_w.append(w)
            group_p.append(p)
        flush()
    return cues


def _segment_cues(segments: Iterable[Segment], max_line: int):
    for seg in segments:
        if seg.end < seg.start:
            raise ValueError(f"segment ends before it starts: {seg.start} > {seg.end}")
        if _lines(seg.text, max_line):
            yield Cue(seg.start, seg.end, seg.text)


def _cues(items, max_line: int) -> List[Cue]:
    items = list(items)
    if items and isinstance(items[0], Cue):
        return items
    return list(_segment_cues(items, max_line))


def to_srt(segments: Iterable, max_line: int = MAX_LINE) -> str:
    """SubRip text: numbered cues, ``HH:MM:SS,mmm --> HH:MM:SS,mmm``, a blank line after each.
    ``segments``: Segments (one cue each) or the Cues of ``word_cues``."""
    out = []
    for i, cue in enumerate(_cues(segments, max_line), 1):
        out.append(f"{i}\n{_timestamp(cue.start, ',')} --> {_timestamp(cue.end, ',')}\n"
                   + "\n".join(_lines(cue.text, max_line)) + "\n")
    return "\n".join(out)


def to_vtt(segments: Iterable, max_line: int = MAX_LINE, inline_words: bool = False) -> str:
    """WebVTT text: a ``WEBVTT`` header, then cues ``HH:MM:SS.mmm --> HH:MM:SS.mmm``.
    ``segments``: Segments (one cue each) or the Cues of ``word_cues``; ``inline_words`` puts each
    word's start before it (``<HH:MM:SS.mmm>``) in cues that have words."""
    out = ["WEBVTT\n"]
    for cue in _cues(segments, max_line):
        if inline_words and cue.words:
            body = _inline(cue, max_line)
        else:
            body = "\n".join(_lines(cue.text, max_line))
        out.append(f"{_timestamp(cue.start, '.')} --> {_timestamp(cue.end, '.')}\n{body}\n")
    return "\n".join(out)


def _inline(cue: Cue, max_line: int) -> str:
    """The cue's words, each but the first after a timestamp tag of its start (the cue starts at
    the first), in lines of at most ``max_line`` characters of text, cut between words."""
    lines: List[str] = []
    line, width, spaced = "", 0, False
    for k, (w, piece) in enumerate(zip(cue.words, cue.pieces)):
        word = piece.strip()
        if not word:
            continue
        if line and width + 1 + len(word) > max_line:
            lines.append(line)
            line, width = "", 0
        sep = " " if line and spaced else ""  # the text had a space after the word before
        spaced = piece[-1:].isspace()
        tag = "" if k == 0 else f"<{_timestamp(w.start, '.')}>"
        line += sep + tag + word
        width += len(sep) + len(word)
    if line:
        lines.append(line)
    return "\n".join(lines)
