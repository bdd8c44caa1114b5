"""SubRip (.srt) and WebVTT (.vtt) text from timed segments.

One cue per segment; text lines are wrapped at ``max_line`` characters (at spaces; text
without spaces, such as Chinese, is cut at the limit). Cues with empty text are skipped.
"""

from __future__ import annotations

import textwrap
from typing import Iterable, List

from .results import Segment

MAX_LINE = 42  # characters per subtitle line (a common broadcast limit)


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


def _cues(segments: Iterable[Segment], max_line: int):
    for seg in segments:
        if seg.end < seg.start:
            raise ValueError(f"segment ends before it starts: {seg.start} > {seg.end}")
        lines = _lines(seg.text, max_line)
        if lines:
            yield seg, lines


def to_srt(segments: Iterable[Segment], max_line: int = MAX_LINE) -> str:
    """SubRip text: numbered cues, ``HH:MM:SS,mmm --> HH:MM:SS,mmm``, a blank line after each."""
    out = []
    for i, (seg, lines) in enumerate(_cues(segments, max_line), 1):
        out.append(f"{i}\n{_timestamp(seg.start, ',')} --> {_timestamp(seg.end, ',')}\n" + "\n".join(lines) + "\n")
    return "\n".join(out)


def to_vtt(segments: Iterable[Segment], max_line: int = MAX_LINE) -> str:
    """WebVTT text: a ``WEBVTT`` header, then cues ``HH:MM:SS.mmm --> HH:MM:SS.mmm``."""
    out = ["WEBVTT\n"]
    for seg, lines in _cues(segments, max_line):
        out.append(f"{_timestamp(seg.start, '.')} --> {_timestamp(seg.end, '.')}\n" + "\n".join(lines) + "\n")
    return "\n".join(out)
