"""The committed text of a stream: text that will not change any more, and its segments.

Chunks arrive here when they leave the decoder window. Their ids go through one incremental
decoder, so a character split across two chunks' tokens comes out whole; ids whose last
character is still incomplete are *held* and complete the unstable tail's text. Each new
committed piece goes to ``on_text`` once. A segment's end (VAD speech end, ``finish()``)
flushes the decoder and may apply ITN to the segment's text.

With final passes (TranscribeOptions.final_pass) a finished *piece* of speech (the chunks
between two pauses, VAD speech ends or the stream's ends) gets its text from one decode of
the whole piece, which replaces the piece's streamed text and its per-chunk segments
(``finish_piece``): ``on_text`` has sent the streamed text (and gets what the final text adds
when it only extends it), and ``final_segments`` tells which segments are final.
"""

from __future__ import annotations

import collections
import sys
from typing import Callable, List, Optional

from ..audio import SAMPLE_RATE
from ..prompt import fix_repetitions
from ..results import Segment
from ..text import join_text, spaced
from .window import Chunk

# What a bounded history keeps (live streams; a long file keeps its whole transcript), so a
# stream's memory stays flat however long it runs (docs/serving.md "Memory ceilings"):
HISTORY_SEGMENTS = 1000  # the latest segments (with their words): 1000 x 4 s chunks, over an hour
HISTORY_CHARS = 65536  # the latest characters of committed text: about 75 minutes of speech
HISTORY_TOKENS = 16384  # the latest committed token ids: about an hour of speech


class CommittedText:
    """Committed ids -> text, segments and ``on_text`` pieces (never retracted).

    ``bounded``: ``trim()`` drops what is older than the history (HISTORY_SEGMENTS final
    segments, HISTORY_CHARS characters of text, HISTORY_TOKENS ids); the counts dropped are kept
    (``dropped_segments``, ``dropped_chars``). ``on_text`` has sent all of it already.
    """

    def __init__(self, tokenizer, on_text: Optional[Callable[[str], None]] = None, bounded: bool = False):
        self.tokenizer = tokenizer
        self._on_text = on_text
        self.bounded = bounded
        self.reset()

    def reset(self) -> None:
        self._run_text = ""  # committed text of the open segment (raw)
        self._text = self.tokenizer.incremental_decoder()  # committed ids -> text
        self._held: List[int] = []  # committed ids whose last character is still incomplete
        self._held_text = ""  # text those ids already gave
        self._done_text = ""  # text of closed segments
        self.text = ""  # join_text(_done_text, _run_text), kept up to date
        # every committed text id (language headers excluded; bounded: the latest HISTORY_TOKENS)
        self.ids = collections.deque(maxlen=HISTORY_TOKENS if self.bounded else None)
        self.dropped_segments = 0  # segments dropped from the front of ``segments`` (bounded)
        self.dropped_chars = 0  # characters dropped from the front of ``text`` (bounded)
        self.segments: List[Segment] = []  # one per committed chunk with text (one per finished piece
        #                                    once its final pass replaced them)
        self._piece_mark = 0  # where the open piece's text starts in _run_text
        self.final_segments = 0  # segments before the open piece (final; the rest may be replaced)
        self.piece_ids: List[int] = []  # the open piece's committed ids (a final pass's draft)

    def commit(self, chunk: Chunk) -> None:
        """Commit a chunk that left the window: its text joins the open segment's. The official
        repetition collapse runs on each committed piece."""
        piece = fix_repetitions("".join(self._push(t) for t in chunk.tokens))
        self.ids.extend(chunk.tokens)
        self.piece_ids.extend(chunk.tokens[:max(0, HISTORY_TOKENS - len(self.piece_ids))])  # bounded: a draft
        if not self._run_text:
            piece = piece.lstrip()
        elif chunk.fresh and piece and spaced(piece[0]) and spaced(self._run_text[-1]):
            # An answer begun afresh (empty window prefix) has no leading space: without one
            # here "... rice cooker" + "close the ..." would read "cookerclose".
            piece = " " + piece
        self._run_text += piece
        text = piece.strip()
        if text:
            self.segments.append(Segment(chunk.start / SAMPLE_RATE, chunk.end / SAMPLE_RATE, text, chunk.language,
                                         finish_reason=chunk.finish_reason))
        before, self.text = self.text, join_text(self._done_text, self._run_text)
        if self._on_text is not None and len(self.text) > len(before) and self.text.startswith(before):
            self._on_text(self.text[len(before):])

    def close_segment(self, itn: bool, language: Optional[str]) -> None:
        """End the open segment (its chunks already committed): its text is final, with ITN
        applied when ``itn`` (``on_text`` has sent the raw pieces)."""
        text = _closed((self._run_text + self._text.flush()).strip(), itn, language)
        self._held, self._held_text = [], ""
        self._done_text = self.text = join_text(self._done_text, text)
        self._run_text = ""
        self._piece_mark = 0

    def with_piece(self, text: str, itn: bool, language: Optional[str]) -> str:
        """The text once the open piece ends with ``text`` (``finish_piece``) and its segment
        closes (``close_segment``), leaving everything as it is."""
        run = _closed(join_text(self._run_text[:self._piece_mark], text.strip()).strip(), itn, language)
        return join_text(self._done_text, run)

    def mark_piece(self) -> None:
        """The open piece ends here with its streamed text and segments kept as they are (final)."""
        self._piece_mark = len(self._run_text)
        self.final_segments = len(self.segments)
        self.piece_ids = []

    def piece_segments(self) -> List[Segment]:
        """The open piece's (per-chunk) segments."""
        return self.segments[self.final_segments:]

    def finish_piece(self, text: str, segment: Optional[Segment]) -> None:
        """The open piece ends with ``text`` (its one-pass decode, raw) in place of its streamed
        text, and ``segment`` (None when the text is empty) in place of its per-chunk segments.
        When the new text only extends the streamed text (the usual case when the piece's last
        partial chunk was left to the final pass), the extension goes to ``on_text``."""
        self._run_text = join_text(self._run_text[:self._piece_mark], text.strip())
        self._text = self.tokenizer.incremental_decoder()  # bytes it held belong to the replaced text
        self._held, self._held_text = [], ""
        del self.segments[self.final_segments:]
        if segment is not None:
            self.segments.append(segment)
        before, self.text = self.text, join_text(self._done_text, self._run_text)
        if self._on_text is not None and len(self.text) > len(before) and self.text.startswith(before):
            self._on_text(self.text[len(before):])
        self.mark_piece()

    def trim(self) -> None:
        """Bounded: drop the oldest final segments beyond HISTORY_SEGMENTS and the oldest final
        text beyond HISTORY_CHARS (the open piece's stays whole: a final pass may replace it).
        Called between feeds, never while segment indices are in use."""
        if not self.bounded:
            return
        cut = min(len(self.segments) - HISTORY_SEGMENTS, self.final_segments)
        if cut > 0:
            del self.segments[:cut]
            self.final_segments -= cut
            self.dropped_segments += cut
        excess = len(self._done_text) + len(self._run_text) - HISTORY_CHARS
        if excess <= 0:
            return
        cut = min(excess, len(self._done_text))
        self._done_text = self._done_text[cut:]
        cut2 = min(excess - cut, self._piece_mark)  # only the open segment's final text
        self._run_text = self._run_text[cut2:]
        self._piece_mark -= cut2
        self.dropped_chars += cut + cut2
        self.text = join_text(self._done_text, self._run_text)

    def footprint(self) -> int:
        """Bytes held: the text, the ids and the segments with their words."""
        size = sum(sys.getsizeof(t) for t in (self.text, self._done_text, self._run_text, self._held_text))
        size += sys.getsizeof(self.ids) + sum(sys.getsizeof(i) for i in self.ids)
        size += sys.getsizeof(self.segments)
        for seg in self.segments:
            size += sys.getsizeof(seg) + sys.getsizeof(seg.text) + sys.getsizeof(seg.words)
            size += sum(sys.getsizeof(w) + sys.getsizeof(w.word) for w in seg.words)
        return size

    def tail_text(self, tail_ids: List[int]) -> str:
        """The text of the window's ``tail_ids``, completing a character the committed text ends inside."""
        if not tail_ids:
            return ""
        return self.tokenizer.decode(self._held + tail_ids)[len(self._held_text):].strip()

    def _push(self, token: int) -> str:
        """Commit one id to the text decoder; returns the newly completed text."""
        out = self._text.push(token)
        if self._text.pending:
            self._held.append(token)
            self._held_text += out
        else:
            self._held, self._held_text = [], ""
        return out


def _closed(text: str, itn: bool, language: Optional[str]) -> str:
    """A closing segment's final text: ``text`` (stripped), with ITN applied when ``itn``."""
    if itn and text:
        from ..itn import inverse_normalize

        text = inverse_normalize(text, language)
    return text


__all__ = ["CommittedText"]

