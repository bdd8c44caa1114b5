"""Final passes: each finished piece of live speech decoded again in one pass.

A piece is the speech between two pauses (or a speech start and end). With
``TranscribeOptions.final_pass`` its audio is kept while it lasts (up to
``plan.FINAL_PASS_MAX_SECONDS``), and when it ends its one-pass text replaces its streamed
text (qwen3asr.streaming.committed), when the plan says it fits one pass (``Planner.final_pass``:
the bundle's and the aligner's limits, the context). Words come from that one pass.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional

import numpy as np

from ..audio import SAMPLE_RATE
from ..options import TranscribeOptions
from ..plan import final_pass_options
from ..results import Segment
from ..onepass import transcribe_one_pass
from ..prompt import answer_header
from ..work import NO_WORK, Work
from .. import plan as planmod
from .ahead import PieceAhead

logger = logging.getLogger(__name__)


class FinalPasses:
    """Where the open piece began, whether its audio is still kept, and its one-pass decode.

    ``engine``: the loaded engine (its planner and ``transcribe``); ``options``: the stream's
    resolved options (``final_pass`` turns this on); ``work``: the stream's scheduling hooks.
    """

    def __init__(self, engine, options: TranscribeOptions, work: Work):
        self.engine = engine
        self.on = bool(options.final_pass)
        self.options = final_pass_options(options)  # the one-pass decode's
        self._work = work
        self.start: Optional[int] = None  # sample where the open piece began (None: no speech open)
        self.kept = True  # the open piece is short enough for its final pass (its audio is kept)
        self.last = None  # the Transcription of the latest final pass (its stats: what it cost)
        self._headers: dict = {}  # language -> the answer header ids its one pass writes
        self.ahead = PieceAhead(engine) if self.on else None  # its log-mel and stems, while spoken

    def open(self, start: Optional[int]) -> None:
        """A piece opens at sample ``start`` (None: none until a speech start)."""
        self.start, self.kept = start, True
        if self.ahead is not None:
            self.ahead.open(start)

    def advance(self, audio) -> None:
        """Work the open piece's final pass can do before its end, on the stream's kept ``audio``
        (a streaming.buffer.AudioBuffer): its whole chunks' log-mel and conv stems."""
        if self.ahead is not None and self.kept and self.start is not None and self.ahead.due(audio):
            if not self.ahead.split:
                self.ahead.advance(audio)  # the log-mel only: host work, no turn of the model
                return
            with self._work.unit():  # model work (the stems), held like a chunk's
                self.ahead.advance(audio)

    def keep_from(self, pos: int, keep: int) -> int:
        """The first sample a stream at ``pos`` samples must keep, given it keeps ``keep`` for
        itself: the open piece's start while its audio may still get a final pass."""
        if self.on and self.start is not None:
            if pos - self.start > planmod.FINAL_PASS_MAX_SECONDS * SAMPLE_RATE:
                self.kept = False  # too long to keep for its final pass: its streamed text stays
            elif self.kept:
                keep = min(keep, self.start)
        return keep

    def footprint(self) -> int:
        """Bytes held for the open piece's final pass besides its audio (what was computed ahead)."""
        return self.ahead.footprint() if self.ahead is not None else 0

    def audio(self, end: int, audio: Callable[[int, int], np.ndarray]) -> Optional[np.ndarray]:
        """The open piece's audio up to sample ``end`` (``audio(a, b)``: the stream's kept samples)
        when it gets a final pass, else None."""
        a = self.start
        if not (self.on and self.kept and a is not None):
            return None
        if not self.engine.planner.final_pass(end - a, self.options):
            return None
        return audio(a, end)

    def draft(self, language: Optional[str], ids) -> list:
        """The draft of the open piece's one pass: the header it writes when the language is not
        forced (``language``: the one the stream detected), then the piece's streamed ``ids``."""
        in_text = self.options.language is not None or self.options.compact_prompt
        if in_text:
            return [int(t) for t in ids]
        if language not in self._headers:  # two prompt builds: once per language a stream meets
            self._headers[language] = answer_header(self.engine.tokenizer, language)
        return self._headers[language] + [int(t) for t in ids]

    def preview(self, end: int, session) -> Optional[tuple[str, Optional[str]]]:
        """(text, language) the open ``session`` (a StreamSession with a segment open) would
        finish with were its audio to end at sample ``end`` (fed already, after the piece's
        start): the piece decoded in one pass up to ``end`` (one unit of model work, its streamed
        text as the draft), the stream left as it is. None when the piece gets no final pass."""
        if self.start is None or not self.start < end <= session._audio.pos:
            return None
        pcm = self.audio(end, session._audio)
        if pcm is None:
            return None
        ids = session._text.piece_ids + session._window.tail_ids()
        text, _, language = self.decode(pcm, end, session._in_unit, self.draft(session._language, ids))
        language = language or session._language
        return session._text.with_piece(text, session.options.itn, language), language

    def decode(self, pcm: np.ndarray, end: int, in_unit: bool,
               draft=()) -> tuple[str, Optional[Segment], Optional[str]]:
        """The one-pass decode of the piece [start, end) whose audio is ``pcm``: (its text, its
        Segment in stream seconds with its words, None without text; its language). ``draft``: the
        ids it is expected to give (``draft()``), verified in its prefill: the text is the one
        pass's own, each confirmed id a decode step saved after the stop. One unit of model work
        unless the caller is inside one (``in_unit``)."""
        self.engine.check_open()
        if in_unit:
            r = transcribe_one_pass(self.engine, pcm, self.options, work=NO_WORK, draft=draft, front=self.ahead)
        else:
            with self._work.unit():
                r = transcribe_one_pass(self.engine, pcm, self.options, work=NO_WORK, draft=draft, front=self.ahead)
        self.last = r
        self._work.check()
        t0 = self.start / SAMPLE_RATE
        seg = Segment(t0, end / SAMPLE_RATE, r.text, r.language, tuple(w.shifted(t0) for w in r.words),
                      r.finish_reason, r.words_flag) if r.text else None
        return r.text, seg, r.language


__all__ = ["FinalPasses"]
