"""The decoder window of a stream: the last ``memory_num`` chunks, their text, and what the next
decoder run is given.

Each decoder run sees the audio of every chunk in the window and, in the assistant turn,
``[language header] + prefix``: the text of the older chunks minus the last
``rollback_tokens``, which are taken out of their chunks (:meth:`DecoderWindow.roll_back`) and
decoded again with the newest chunk, so a word cut by a boundary is read with both halves of
its audio. The generated tokens belong to the newest chunk (:meth:`DecoderWindow.attribute`).
A chunk that leaves the window is committed by the caller. Everything here works on token ids;
the tokenizer is used only to find character boundaries and to compare texts. The steps named
below are those of docs/streaming.md "Algorithm", which also holds their measurements.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import math
import sys
from typing import Iterator, List, Optional

import numpy as np

from ..plan import HEADER_TOKENS
from ..prompt import parse_language_header


@dataclasses.dataclass
class Chunk:
    """One chunk of a stream: its audio span, its encoding and the text attributed to it."""

    start: int  # absolute samples
    end: int
    embeds: Optional[np.ndarray] = None  # (tokens, hidden) float32 once encoded
    tokens: List[int] = dataclasses.field(default_factory=list)  # generated text tokens attributed to it
    language: Optional[str] = None
    fresh: bool = False  # decoded with no text prefix: its tokens begin an answer (no leading space)
    # Leading tokens decoded again for older chunks (the rollback handed to this chunk): their
    # audio lies, at least partly, in the chunk before, so once that chunk has left the window
    # they are never rolled back again (nothing left in the window could re-decode them). Step 6.
    carried: int = 0
    head_db: float = 0.0  # loudest 10 ms frame of the chunk's first EDGE_FRAMES (dB full scale)
    tail_db: float = 0.0  # loudest of its last EDGE_FRAMES
    speech_db: float = -math.inf  # the recent speech level once this chunk's audio was counted
    mel: Optional[np.ndarray] = None  # (n_mels, frames) until encoded
    mel_ms: float = 0.0  # time its mel took
    enc: object = None  # EncodeStats of its encoder call
    enc_ms: float = 0.0  # mel + encoder wall time
    finish_reason: Optional[str] = None  # how its decoder run ended (eos, length, repetition, stopped)


@dataclasses.dataclass(frozen=True)
class Prefix:
    """The text prefix of the next decoder run, and the rollback that made it."""

    ids: List[int]  # the older chunks' tokens the run continues from
    rollback: int  # tokens at the end of the older chunks' text to decode again (taken out by roll_back)
    unfixed: bool = False  # an unfixed run (unfixed_chunks): all the older chunks' text is decoded again


def positions_needed(engine, options) -> int:
    """Most decoder positions one window of a session with these (resolved) options can take
    (qwen3asr.plan.Planner.window_positions)."""
    return engine.planner.window_positions(options)


class DecoderWindow:
    """The chunks in the decoder window and the language header of the open segment.

    ``tokenizer``: the engine's (character boundaries, text comparison, the ``<asr_text>`` id);
    ``memory_num`` / ``rollback_tokens`` / ``unfixed_chunks``: the stream's options.
    """

    def __init__(self, tokenizer, memory_num: int, rollback_tokens: int, unfixed_chunks: int = 0):
        self.tokenizer = tokenizer
        self.memory_num = memory_num
        self.rollback_tokens = rollback_tokens
        self.unfixed_chunks = unfixed_chunks
        self._asr_text = tokenizer.asr_text
        self.chunks: collections.deque = collections.deque()
        self.new_segment()

    def fork(self) -> "DecoderWindow":
        """A copy whose runs leave this window as it is (a partial decode's): the chunks copied
        with their own token lists, the embeddings shared (never written)."""
        other = copy.copy(self)
        other.chunks = collections.deque(dataclasses.replace(c, tokens=list(c.tokens)) for c in self.chunks)
        other.header = list(self.header)
        return other

    def footprint(self) -> int:
        """Bytes held by the window's chunks (their mel or embeddings, their tokens)."""
        return sum(sum(x.nbytes for x in (c.embeds, c.mel) if x is not None) + sys.getsizeof(c.tokens)
                   + 8 * len(c.tokens) for c in self.chunks)

    def __len__(self) -> int:
        return len(self.chunks)

    def __iter__(self) -> Iterator[Chunk]:
        return iter(self.chunks)

    def new_segment(self) -> None:
        """Forget the language header: the next decoder run starts a segment."""
        self.header: List[int] = []  # detected language header kept in front of the prefix
        self.header_language: Optional[str] = None
        self.steps = 0  # decoder runs in the open segment

    def clear(self) -> List[Chunk]:
        """Empty the window (end of a segment); returns its chunks, oldest first, to commit."""
        out = list(self.chunks)
        self.chunks.clear()
        return out

    def append(self, chunk: Chunk) -> List[Chunk]:
        """Put the newest chunk in; returns the chunks that left the window (to commit)."""
        self.chunks.append(chunk)
        out = []
        while len(self.chunks) > self.memory_num:
            out.append(self.chunks.popleft())
        return out

    def end_at_newest(self) -> List[Chunk]:
        """The boundary before the newest chunk lies in a pause: every older chunk leaves (to
        commit) and the newest starts a fresh window and segment (step 9)."""
        out = []
        while len(self.chunks) > 1:
            out.append(self.chunks.popleft())
        self.new_segment()
        return out

    def tail_ids(self) -> List[int]:
        """The text tokens of every chunk still in the window (the unstable tail)."""
        return [t for c in self.chunks for t in c.tokens]

    # ------------------------------------------------------------------ the next run's input
    def prefix(self) -> Prefix:
        """The prefix of the next run: the older chunks' tokens minus the last ``rollback_tokens``.

        The oldest chunk's carried tokens (:attr:`Chunk.carried`) are neither rolled back nor
        part of the prefix: their audio has left the window (step 6). The cut never ends
        inside a character (as the official code) and leaves at least one of the older chunks'
        own tokens: an emptied prefix has the window decoded afresh (step 8).
        """
        older = list(self.chunks)[:-1]
        if self.steps < self.unfixed_chunks:
            return Prefix([], 0, unfixed=True)
        ids = [t for c in older for t in c.tokens]
        dec = self.tokenizer.incremental_decoder()
        whole = [True]  # whole[k]: ids[:k] ends on a character boundary
        for t in ids:
            dec.push(t)
            whole.append(not dec.pending)
        most = len(ids) - (older[0].carried if older else 0)  # the tokens not carried (carried <= tokens)
        while most > 0 and not whole[len(ids) - most]:
            most -= 1  # nor does the prefix start inside a character
        cut = min(self.rollback_tokens, max(0, most - 1))
        while cut < most and not whole[len(ids) - cut]:
            cut += 1  # never end the prefix inside a character (as the official code)
        return Prefix(ids[len(ids) - most:len(ids) - cut], cut)

    def roll_back(self, prefix: Prefix) -> None:
        """Take the rolled-back tokens out of the older chunks (they are decoded again and then
        belong to the newest chunk); an unfixed run takes all of them."""
        older = list(self.chunks)[:-1]
        if prefix.unfixed:
            for c in older:
                c.tokens, c.carried = [], 0
            return
        remove = prefix.rollback
        for c in reversed(older):
            k = min(remove, len(c.tokens))
            if k:
                del c.tokens[len(c.tokens) - k:]
                c.carried = min(c.carried, len(c.tokens))
            remove -= k

    def header_for(self, prefix: Prefix, in_text: bool) -> List[int]:
        """The language header in front of the prefix: kept while the window holds text, none
        when the answer starts inside the text (forced language, compact prompt)."""
        return [] if in_text or not prefix.ids else list(self.header)

    # ------------------------------------------------------------------ the run's output
    def attribute(self, chunk: Chunk, tokens: List[int], prefix: Prefix, header: List[int], in_text: bool,
                  forced_language: Optional[str]) -> None:
        """Give the newest ``chunk`` the text its run generated: the language header split off
        when the run wrote one, a repeated start dropped after a fresh window."""
        if not in_text and not header:
            tokens = self._split_header(tokens)
        if not prefix.ids:
            tokens = self._drop_repeated_start(tokens)
        chunk.tokens = list(tokens)
        chunk.fresh = not prefix.ids
        chunk.carried = min(prefix.rollback, len(tokens))
        chunk.language = forced_language or self.header_language
        self.steps += 1

    def _split_header(self, tokens: List[int]) -> List[int]:
        """Keep ``language X<asr_text>`` as the window's header; return the text tokens."""
        if self._asr_text not in tokens:
            self.header, self.header_language = [], None
            return tokens
        i = tokens.index(self._asr_text)
        lang = parse_language_header(self.tokenizer.decode(tokens[:i]).strip())
        self.header = tokens[:i + 1] if lang else []
        self.header_language = lang
        return tokens[i + 1:]

    def _drop_repeated_start(self, tokens: List[int]) -> List[int]:
        """After a fresh window whose oldest chunk holds only carried tokens, drop the longest
        start of ``tokens`` that reads (as stripped text) as an end of those carried tokens: the
        model often reads them again (step 7). A word really said twice there is dropped once."""
        older = list(self.chunks)[:-1]
        if not older or not older[0].carried or not tokens:
            return tokens
        tok = self.tokenizer
        carried = older[0].tokens[:older[0].carried]
        ends = {tok.decode(carried[j:]).strip() for j in range(len(carried))} - {""}
        for k in range(min(len(tokens), len(carried) + 2), 0, -1):
            if tok.decode(tokens[:k]).strip() in ends:
                return tokens[k:]
        return tokens


__all__ = ["Chunk", "DecoderWindow", "HEADER_TOKENS", "Prefix", "positions_needed"]
