"""One Wyoming utterance (audio-start .. audio-stop) and what a ``transcribe`` event asks for it.

``Utterance`` owns the utterance's scheduler client and stream session: audio-chunk payloads
are converted (qwen3asr.audio.PcmConverter: any rate, width 1-4, channels 1-32 -> 16 kHz mono
float32) and fed to the session in a worker task that sends each newly committed piece at
once; ``final`` gives the transcript at audio-stop (the stream's own, or with
WyomingOptions.final="one-pass" one decode of the whole utterance when it fits the model's
one-pass limit). The helpers turn a ``transcribe`` event into UtteranceOptions: its language
(code, name or code with region) and its biasing text (context, names, terms).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import math
import time
from concurrent.futures import Executor
from typing import Any, Dict, List, Optional

import numpy as np

from ...audio import MIN_SAMPLES, SAMPLE_RATE, PcmConverter, PcmFormat, PcmFormatError
from ...checks import show, text
from ...languages import LANGUAGE_CODES, LanguageError, resolve_language
from ...options import build_options, chunk_problems
from .early import EarlyFinal

logger = logging.getLogger(__name__)

MAX_UTTERANCE_S = 600.0  # longest utterance (seconds of audio) accepted
MAX_CONTEXT_CHARS = 2000  # biasing text kept from transcript_names / transcript_terms / context
FINALS = ("pieces", "one-pass", "stream")  # WyomingOptions.final
EARLY_FINAL = False  # WyomingOptions.early_final (docs/wyoming.md: measured on the test split)


class UtteranceError(ValueError):
    """A request the server refuses (bad language or audio format, too long); code names it."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


def language_code(name: Optional[str]) -> Optional[str]:
    """The Wyoming language code ("en") of a canonical language name ("English"), None for None."""
    return LANGUAGE_CODES.get(name) if name else None


def pcm_format(data: dict) -> PcmFormat:
    """The PCM format of an audio-start / audio-chunk ``data``; UtteranceError if unusable."""
    try:
        return PcmFormat.from_data(data)
    except PcmFormatError as exc:
        raise UtteranceError(str(exc), "bad-audio-format") from None


def resolve_wyoming_language(language: Any) -> Optional[str]:
    """Language name for a Wyoming ``language`` (code, name, or code with region), None to detect."""
    if language is None or (isinstance(language, str) and not language.strip()):
        return None
    if not isinstance(language, str):
        raise UtteranceError(f"language must be a string, got {type(language).__name__}", "bad-language")
    try:
        return resolve_language(language)
    except LanguageError as exc:
        primary = language.strip().replace("_", "-").split("-")[0]
        if primary and primary != language.strip():
            with contextlib.suppress(LanguageError):
                return resolve_language(primary)
        raise UtteranceError(str(exc), "bad-language") from None


def biasing_text(context: Any, names: Any, terms: Any) -> str:
    """Context text for the model: a string ``context``, then names (first), then terms.

    Lists are joined with ", "; the result keeps whole entries up to MAX_CONTEXT_CHARS
    (names take priority over terms, as the Wyoming Transcribe event defines).
    """
    entries: List[List[str]] = []
    if isinstance(context, str) and context.strip():
        entries.append([context.strip()])
    for group in (names, terms):
        if isinstance(group, list):
            entries.append([s.strip() for s in group if isinstance(s, str) and s.strip()])
    lines, used, dropped = [], 0, 0
    for group in entries:
        kept = []
        for s in group:
            if used + len(s) + 2 > MAX_CONTEXT_CHARS:
                dropped += 1
                continue
            kept.append(s)
            used += len(s) + 2
        if kept:
            lines.append(", ".join(kept))
    if dropped:
        logger.warning("biasing text limited to %d characters: %d names/terms dropped", MAX_CONTEXT_CHARS, dropped)
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class WyomingOptions:
    """Server settings (validated here).

    The defaults are measured on the bundled model (docs/wyoming.md): 2 s is the shortest chunk
    whose streamed text equals the one-pass text on every short demo command; the final text is
    one decode of each finished piece of the utterance (the speech between its pauses), which
    was right more often than the streamed text (432 against 420 of 461 test-split commands)
    and than one pass over a whole utterance of several commands joined by pauses (10 against 7
    of 10), for about 30 ms more CPU after audio-stop.
    """

    chunk_size: float = 2.0  # seconds of audio per stream chunk (see StreamOptions.chunk_size)
    # "pieces": each finished piece of the utterance decoded again in one pass (the stream's
    # final passes, TranscribeOptions.final_pass): a single command is one piece, so its
    # transcript is the one-pass text of the whole utterance; "one-pass": one decode of the whole
    # utterance at audio-stop, as wyoming-faster-whisper does; "stream": the streamed text. With
    # "pieces" and "one-pass" the streamed transcript-chunks are interim (the transcript may
    # revise them); both fall back to the stream's text where a piece or the utterance does not
    # fit one pass.
    final: str = "pieces"
    # With final="pieces": the last piece's final pass runs once the server's VAD has heard
    # early.MIN_SILENCE_S of silence, during the silence before audio-stop (early.py); its text is
    # the transcript unless speech came after it.
    early_final: bool = EARLY_FINAL

    def __post_init__(self):
        if not isinstance(self.final, str) or self.final not in FINALS:
            raise ValueError(f"final must be one of {', '.join(FINALS)}, got {show(self.final)}")
        if not isinstance(self.early_final, bool):
            raise ValueError(f"early_final must be True or False, got {show(self.early_final)}")
        problems = chunk_problems(self.chunk_size, optional=False)  # the stream options' own check
        if problems:
            raise ValueError(problems[0])


@dataclasses.dataclass(frozen=True)
class UtteranceOptions:
    """What a ``transcribe`` event asked for the next utterance."""

    language: Optional[str] = None  # canonical name, None to detect
    context: str = ""  # biasing text for the model
    echo: Optional[Dict[str, Any]] = None  # the event's context object, copied into the transcript events

    def __post_init__(self):
        if self.language is not None and not (isinstance(self.language, str) and self.language in LANGUAGE_CODES):
            raise ValueError(f"language must be a supported language name or None (got {show(self.language)})")
        problem = text("context", self.context, MAX_CONTEXT_CHARS)
        if problem:
            raise ValueError(problem)
        if self.echo is not None and not isinstance(self.echo, dict):
            raise ValueError(f"echo must be the event's context object (a dict) or None (got {show(self.echo)})")


class Utterance:
    """One audio-start .. audio-stop: a scheduler client, a stream session and the audio kept
    for the one-pass final decode. Engine calls run in worker threads, one at a time."""

    def __init__(self, engine, client, fmt: PcmFormat, options: UtteranceOptions, server: WyomingOptions,
                 executor: Optional[Executor] = None):
        self.engine, self.client, self.fmt, self.options = engine, client, fmt, options
        self.executor = executor  # threads for the engine calls (None: the loop's default executor)
        self.converter = PcmConverter(fmt)
        self.pieces: List[str] = []  # committed text pieces from the session (its worker thread)
        self.session = engine.create_stream(language=options.language, context=options.context,
                                            chunk_size=server.chunk_size, on_text=self.pieces.append,
                                            final_pass=server.final == "pieces", work=client.work)
        # the options of the one-pass final (engine.transcribe's): the plan decides whether it fits
        self.final_options = build_options(engine.options, {"language": options.language,
                                                            "context": options.context}, "Utterance")
        limit = engine.planner.one_pass_seconds(self.final_options)
        self.keep_limit = int(SAMPLE_RATE * min(limit if limit is not None else math.inf, MAX_UTTERANCE_S))
        # 16 kHz audio while it may be decoded in one pass (final="one-pass")
        self.kept: Optional[List[np.ndarray]] = [] if server.final == "one-pass" else None
        self.early = EarlyFinal() if server.early_final and server.final == "pieces" else None
        self.samples = 0  # 16 kHz samples received
        self.pending: List[np.ndarray] = []  # audio not yet fed to the session
        self.wake = asyncio.Event()
        self.stopped = False  # audio-stop received (or the utterance abandoned)
        self.one_pass = False  # the final text comes from a one-pass decode
        self.sent = ""  # text already sent as transcript-chunk
        self.worker: Optional[asyncio.Task] = None
        self.started = time.perf_counter()  # audio-start: the metrics' first text counts from here
        self.first_sent = False  # a transcript-chunk was sent

    def add(self, payload: bytes) -> None:
        pcm = self.converter.convert(payload)
        self._append(pcm)

    def _append(self, pcm: np.ndarray) -> None:
        if not pcm.size:
            return
        self.samples += pcm.shape[0]
        if self.samples > MAX_UTTERANCE_S * SAMPLE_RATE:
            raise UtteranceError(f"utterance longer than {MAX_UTTERANCE_S:.0f} s; send audio-stop sooner",
                                 "too-long")
        if self.kept is not None:
            if self.samples <= self.keep_limit:
                self.kept.append(pcm)
            else:
                self.kept = None  # too long for one pass: the stream's text is final
        self.pending.append(pcm)
        self.wake.set()

    def stop(self) -> None:
        """audio-stop: decide how the final text is made; the worker then ends."""
        self._append(self.converter.flush())
        pcm = self.audio()
        self.one_pass = pcm is not None and self.engine.planner.fits_one_pass(pcm.shape[0], self.final_options)
        if self.one_pass:
            self.pending.clear()  # the stream need not catch up: the whole utterance is decoded at once
        self.stopped = True
        self.client.ending.set()  # the final comes next: a running preview stops (Work.newer)
        self.wake.set()

    def audio(self) -> Optional[np.ndarray]:
        if self.kept is None:
            return None
        return np.concatenate(self.kept) if self.kept else np.zeros(0, np.float32)

    def abandon(self) -> None:
        """The client went away or the server stops: drop queued work, stop a running decode."""
        self.stopped = True
        self.pending.clear()
        self.client.cancel()
        self.wake.set()

    async def run_stream(self, send_piece) -> None:
        """Worker task: feed pending audio to the session as it arrives, sending committed text."""
        while True:
            await self.wake.wait()
            self.wake.clear()
            if self.pending:
                await self.step(send_piece)
                self.wake.set()  # more may have arrived meanwhile
            elif self.stopped:
                return

    async def step(self, send_piece) -> None:
        """Feed the pending audio to the session, sending newly committed text; then, before
        audio-stop, the early final's pass when it is due."""
        pcm = np.concatenate(self.pending)
        self.pending.clear()
        await self._call(self._feed, pcm)
        await self._send_new(send_piece)
        if self.early is not None and not self.stopped and self.early.due():
            await self._call(self.early.run, self.session)

    def _feed(self, pcm: np.ndarray) -> None:
        if self.early is not None:
            self.early.feed(pcm)
            if self.stopped and self.early.text(self.session) is not None:
                return  # the early final stands: the stream need not catch up
        self.session.feed_audio(pcm)

    async def _send_new(self, send_piece) -> None:
        while self.pieces:
            piece = self.pieces.pop(0)
            if piece:
                self.sent += piece
                await send_piece(piece)

    async def final(self, send_piece):
        """After stop(): (text, language code or None) of the whole utterance."""
        if self.worker is not None:
            await self.worker
        if self.one_pass:
            pcm = self.audio()
            if pcm.shape[0] < MIN_SAMPLES:  # under one 10 ms frame: nothing to decode
                return "", language_code(self.options.language)
            result = await self._call(self.engine.transcribe, pcm, self.final_options, work=self.client.work)
            return result.text, result.language_code or language_code(self.options.language)
        early = self.early.text(self.session) if self.early is not None else None
        if early is not None:
            return early[0], language_code(early[1])
        result = await self._call(self.session.finish)
        await self._send_new(send_piece)
        return result.text, language_code(result.language)

    async def _call(self, fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))
