"""Partial decodes: previews of the open chunk, so first words show before a chunk is complete.

With ``TranscribeOptions.partial_every`` = P seconds, once P seconds of new audio are in the open
chunk (and every P seconds after), the stream encodes the open chunk as it is so far and decodes a
copy of the window with it as the newest chunk (``DecoderWindow.fork``): the result's unstable
tail shows that text until the next preview, or the chunk's own decode, replaces it. Nothing is
committed from a preview and the stream's state is left as it was, so the committed text is the
same with or without previews; they cost one encoder call and one decoder run each. With
``first_words`` = F seconds (and no ``partial_every``) previews are made every F seconds only while
the open segment shows no text (no decoder run of its window yet, no preview with words): the
first words of each segment early, for one or two decoder runs a segment.

A preview is optional work: with a ``Work.newer`` flag (the servers set it once the stream's end is
queued and while other clients wait for the model) none is started while it is set, and one
running stops at its next token and is dropped. Newer audio of the same stream does not stop it:
audio comes in 0.1 s frames, and a preview that gave way to each would never finish on a model
slower than that; the audio waiting meanwhile is fed in one call after it, with at most one
preview, on the newest audio.
"""

from __future__ import annotations

from typing import List, Optional

from ..audio import SAMPLE_RATE
from ..mel import HOP_LENGTH as HOP
from ..options import TranscribeOptions
from ..work import Cancelled, Work
from .decode import decode_window
from .front import ChunkFront
from .window import DecoderWindow


class Partials:
    """The previews of one stream: when to make one, and the ids of the latest."""

    def __init__(self, engine, options: TranscribeOptions, front: ChunkFront, work: Work, prefix_len: int):
        self.engine, self.options, self.front, self.work, self.prefix_len = engine, options, front, work, prefix_len
        self.every = None if options.partial_every is None else int(options.partial_every * SAMPLE_RATE)
        self.first = None if options.first_words is None else int(options.first_words * SAMPLE_RATE)
        self.reset()

    def reset(self) -> None:
        self.ids: Optional[List[int]] = None  # the window's tail ids as the latest preview decoded them
        self.upto = 0  # the sample the latest preview (or chunk) reached
        self.count = 0  # previews made
        self.dropped = 0  # previews stopped for newer work (Work.newer)

    def drop(self, upto: int) -> None:
        """The window changed (a chunk decoded, a segment closed): no preview until ``every`` more
        samples after ``upto``."""
        self.ids, self.upto = None, upto

    def maybe(self, window: DecoderWindow, audio, start: int, limit: int, left_edge: int, run: int) -> bool:
        """Make a preview of the open chunk [start, limit) of ``audio`` (a streaming.buffer.AudioBuffer)
        when it is on and ``every`` samples came since the last one; ``left_edge``: the segment's
        start; ``run``: the stream's decoder runs so far. True when one was made."""
        every = self.every
        if every is None and self.first is not None and window.steps == 0 and not window.tail_ids() and not self.ids:
            every = self.first  # the open segment shows no text yet: first words
        if every is None or limit - start < every or limit - self.upto < every or self.work.superseded:
            return False
        optional = Work(cancel=_Either(self.work.cancel, self.work.newer))  # stops for newer input too
        with self.work.unit():
            end = limit - (limit - start) % HOP  # whole 10 ms frames, their look-ahead there
            chunk = self.front.prepare(audio, start, end, left_edge, None, measure=False)
            self.front.encode(chunk)
            fork = window.fork()
            fork.append(chunk)
            try:
                decode_window(self.engine, fork, chunk, self.options, prefix_len=self.prefix_len, run=run,
                              work=optional)
            except Cancelled:
                if self.work.cancelled:
                    raise
                self.dropped += 1  # superseded: the stream's state is untouched (a fork)
                return False
        self.ids, self.upto = fork.tail_ids(), limit
        self.count += 1
        return True


class _Either:
    """A flag set when either of two flags (or None) is."""

    def __init__(self, a, b):
        self.a, self.b = a, b

    def is_set(self) -> bool:
        return (self.a is not None and self.a.is_set()) or (self.b is not None and self.b.is_set())


__all__ = ["Partials"]
