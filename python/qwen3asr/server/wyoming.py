"""Wyoming speech-to-text server (Home Assistant voice pipelines), on the ``wyoming`` package.

One connection is one Wyoming client; Home Assistant connects once per utterance
(``describe`` -> ``info`` on one connection; ``transcribe``, ``audio-start``,
``audio-chunk``..., ``audio-stop`` -> the transcript on another). Events handled:

- ``describe``: ``info`` with one AsrProgram and one AsrModel (the model's languages as codes).
- ``transcribe``: options for the next utterance: ``language`` (code such as "en" or name
  such as "English"; a region subtag is dropped: "en-US" -> "en"); ``transcript_names`` and
  ``transcript_terms`` (and a ``context`` given as a string) become the model's context
  biasing text; a ``context`` object is copied back into the transcript events.
- ``audio-start``: admits the utterance as a "live" client of the scheduler and opens a
  ``create_stream()`` session; answers ``transcript-start``.
- ``audio-chunk``: PCM of any rate, width 1 (unsigned 8-bit), 2, 3 or 4 (signed
  little-endian) bytes and channel count, mixed to mono, resampled to 16 kHz float32
  (soxr, streaming) and fed to the session; text the session commits (never retracted) is
  sent at once as ``transcript-chunk`` (pieces that concatenate to the transcript).
- ``audio-stop``: the rest of the text as a last ``transcript-chunk``, the final
  ``transcript`` (always; empty text for silence), then ``transcript-stop``. The final text
  is the stream's own (WyomingOptions.final="stream", chosen by measurement: docs/wyoming.md);
  with final="one-pass" it is one decode of the whole utterance when that fits the model's
  one-pass limit, the streamed pieces are then interim, and if the one-pass text does not
  continue them the ``transcript`` event is authoritative.
- ``ping``: ``pong``. Other events are ignored (logged at debug level).

Faults: an ``audio-chunk`` outside an utterance is dropped and answered with one ``error``
event (the connection stays usable; a later ``audio-stop`` still gets an empty transcript);
an event header over the size limits, malformed JSON, a stalled event body or utterance, or a
full scheduler gets an ``error`` event and the connection is closed; a client that disconnects
mid-utterance has its scheduler client cancelled (queued work dropped, a running decode
stopped at its next token).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import math
import os
import signal
import sys
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Dict, List, Optional
from urllib.parse import urlparse

import numpy as np

from ..audio import SAMPLE_RATE, PcmConverter, PcmFormat, PcmFormatError
from ..languages import LANGUAGE_CODES, LanguageError, resolve_language
from ..work import Cancelled
from .scheduler import LIVE, QueueFull, SchedulerClosed

try:
    from wyoming.asr import Transcribe, Transcript, TranscriptChunk, TranscriptStart, TranscriptStop
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.error import Error
    from wyoming.event import Event, async_write_event
    from wyoming.info import AsrModel, AsrProgram, Attribution, Describe, Info
    from wyoming.ping import Ping, Pong
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(f"the Wyoming server needs the 'wyoming' package ({exc}); "
                      f"install the server extra: pip install '.[server]'") from None

logger = logging.getLogger(__name__)

DEFAULT_URI = "tcp://127.0.0.1:10300"
MAX_LINE_BYTES = 64 * 1024  # longest JSON header line
MAX_DATA_BYTES = 1024 * 1024  # longest additional data block (data_length)
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024  # largest payload (payload_length): 4 MiB = 21 s of 48 kHz 16-bit stereo
BODY_TIMEOUT_S = 30.0  # an event's data and payload must arrive within this time of its header
IDLE_TIMEOUT_S = 30.0  # an open utterance with no event for this long is abandoned
MAX_UTTERANCE_S = 600.0  # longest utterance (seconds of audio) accepted
MAX_CONTEXT_CHARS = 2000  # biasing text kept from transcript_names / transcript_terms / context
STOP_GRACE_S = 10.0  # on stop, utterances in progress get this long to finish
PROJECT_URL = "https://github.com/QwenLM/Qwen3-ASR"  # shown by Home Assistant as the attribution link
FINALS = ("stream", "one-pass")
QUEUE_EVENTS = 256  # events read ahead of the handler (then TCP backpressure)
# After a protocol error, what the client still sends is read and dropped (up to this long and
# this much) before the socket is closed: closing with unread input resets the connection, and
# the reset can destroy the error event before the client has read it.
LINGER_S = 2.0
LINGER_BYTES = 8 * 1024 * 1024


class WyomingProtocolError(ValueError):
    """A malformed or oversized event; the connection cannot continue (code names the fault)."""

    def __init__(self, message: str, code: str = "bad-event"):
        super().__init__(message)
        self.code = code


class UtteranceError(ValueError):
    """A request the server refuses (bad language or audio format, too long); code names it."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------- reading events
async def read_event(reader: asyncio.StreamReader) -> Optional[Event]:
    """The next Wyoming event, or None at end of stream (the client closed).

    Like ``wyoming.event.async_read_event`` but bounded: a header over MAX_LINE_BYTES, a
    ``data_length`` over MAX_DATA_BYTES or a ``payload_length`` over MAX_PAYLOAD_BYTES is
    refused before anything is allocated, the body must follow within BODY_TIMEOUT_S, and
    malformed headers raise WyomingProtocolError instead of ending the connection silently.
    """
    try:
        line = await reader.readline()
    except ValueError:  # asyncio.LimitOverrunError wrapped: no newline within the limit
        raise WyomingProtocolError(f"event header longer than {MAX_LINE_BYTES} bytes", "event-too-large") from None
    if not line:
        return None
    if not line.endswith(b"\n"):
        return None  # the client closed mid-header
    try:
        header = json.loads(line)
    except ValueError as exc:
        raise WyomingProtocolError(f"event header is not JSON ({exc})") from None
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise WyomingProtocolError("event header must be a JSON object with a string 'type'")
    data = header.get("data") or {}
    if not isinstance(data, dict):
        raise WyomingProtocolError("event 'data' must be a JSON object")
    data_length = _length(header, "data_length", MAX_DATA_BYTES)
    payload_length = _length(header, "payload_length", MAX_PAYLOAD_BYTES)
    try:
        extra = await asyncio.wait_for(reader.readexactly(data_length), BODY_TIMEOUT_S) if data_length else b""
        payload = await asyncio.wait_for(reader.readexactly(payload_length), BODY_TIMEOUT_S) \
            if payload_length else None
    except asyncio.IncompleteReadError:
        return None  # the client closed mid-event
    except asyncio.TimeoutError:
        raise WyomingProtocolError(f"event body ({data_length} + {payload_length} bytes) did not arrive within "
                                   f"{BODY_TIMEOUT_S:.0f} s", "timeout") from None
    if extra:
        try:
            more = json.loads(extra)
        except ValueError as exc:
            raise WyomingProtocolError(f"event additional data is not JSON ({exc})") from None
        if not isinstance(more, dict):
            raise WyomingProtocolError("event additional data must be a JSON object")
        data = {**data, **more}
    return Event(type=header["type"], data=data, payload=payload)


def _length(header: dict, key: str, limit: int) -> int:
    v = header.get(key)
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise WyomingProtocolError(f"{key} must be a non-negative integer, got {v!r}")
    if v > limit:
        raise WyomingProtocolError(f"{key} {v} exceeds the limit of {limit} bytes", "event-too-large")
    return v


# ---------------------------------------------------------------------------- requests
def _format(data: dict) -> PcmFormat:
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

    The defaults are measured on the bundled model and clips (docs/wyoming.md): 2 s is the
    shortest chunk whose streamed text equals the one-pass text on every short demo command,
    and the stream's own final text was right on commands joined by pauses where one pass
    over the whole utterance was not.
    """

    chunk_size: float = 2.0  # seconds of audio per stream chunk (see StreamOptions.chunk_size)
    final: str = "stream"  # "stream": the session's final text; "one-pass": decode the whole utterance
    # once at audio-stop when it fits the model's one-pass limit (the streamed pieces are then interim)

    def __post_init__(self):
        if self.final not in FINALS:
            raise ValueError(f"final must be one of {', '.join(FINALS)}, got {self.final!r}")
        cs = self.chunk_size
        if isinstance(cs, bool) or not isinstance(cs, (int, float)) or not cs >= 0.2:
            raise ValueError(f"chunk_size must be a number of seconds >= 0.2, got {cs!r}")


@dataclasses.dataclass(frozen=True)
class UtteranceOptions:
    """What a ``transcribe`` event asked for the next utterance."""

    language: Optional[str] = None  # canonical name, None to detect
    context: str = ""  # biasing text for the model
    echo: Optional[Dict[str, Any]] = None  # the event's context object, copied into the transcript events


def info_event(engine) -> Event:
    """The ``info`` answer to ``describe``: one AsrProgram with one AsrModel."""
    from .. import __version__

    names = engine.bundle.manifest.get("config", {}).get("support_languages") or list(LANGUAGE_CODES)
    codes = [LANGUAGE_CODES[n] for n in names if n in LANGUAGE_CODES]
    model_name = os.path.basename(os.path.normpath(engine.bundle.path))
    qwen = Attribution(name="Qwen Team, Alibaba Cloud", url="https://github.com/QwenLM/Qwen3-ASR")
    model = AsrModel(name=model_name, attribution=qwen, installed=True,
                     description=f"Qwen3-ASR bundle '{model_name}' ({engine.backend} backend)",
                     version=str(engine.bundle.manifest.get("exporter_version", "")) or None, languages=codes)
    program = AsrProgram(name="qwen3asr-rk", attribution=Attribution(name="qwen3asr-rk", url=PROJECT_URL),
                         installed=True, description="Qwen3-ASR speech recognition (Rockchip NPU or CPU)",
                         version=__version__, models=[model], supports_transcript_streaming=True)
    return Info(asr=[program]).event()


# ---------------------------------------------------------------------------- one utterance
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
                                            work=client.work)
        limit = engine.bundle.one_pass_seconds
        self.keep_limit = int(SAMPLE_RATE * min(limit if limit is not None else math.inf, MAX_UTTERANCE_S))
        # 16 kHz audio while it may be decoded in one pass (final="one-pass")
        self.kept: Optional[List[np.ndarray]] = [] if server.final == "one-pass" else None
        self.samples = 0  # 16 kHz samples received
        self.pending: List[np.ndarray] = []  # audio not yet fed to the session
        self.wake = asyncio.Event()
        self.stopped = False  # audio-stop received (or the utterance abandoned)
        self.one_pass = False  # the final text comes from a one-pass decode
        self.sent = ""  # text already sent as transcript-chunk
        self.worker: Optional[asyncio.Task] = None

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
        self.one_pass = pcm is not None and self.engine.fits_one_pass(pcm, context=self.options.context,
                                                                      language=self.options.language)
        if self.one_pass:
            self.pending.clear()  # the stream need not catch up: the whole utterance is decoded at once
        self.stopped = True
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
                pcm = np.concatenate(self.pending)
                self.pending.clear()
                await self._call(self.session.feed_audio, pcm)
                await self._send_new(send_piece)
                self.wake.set()  # more may have arrived meanwhile
            elif self.stopped:
                return

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
            if pcm.shape[0] < 160:  # under one 10 ms frame: nothing to decode
                return "", self._code(self.options.language)
            result = await self._call(self.engine.transcribe, pcm, language=self.options.language,
                                      context=self.options.context, work=self.client.work)
            return result.text, result.language_code or self._code(self.options.language)
        result = await self._call(self.session.finish)
        await self._send_new(send_piece)
        return result.text, self._code(result.language)

    async def _call(self, fn, *args, **kwargs):
        return await asyncio.get_running_loop().run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    @staticmethod
    def _code(name: Optional[str]) -> Optional[str]:
        return LANGUAGE_CODES.get(name) if name else None


# ---------------------------------------------------------------------------- one connection
class WyomingHandler:
    """Serves one Wyoming connection (see the module docstring for the events)."""

    def __init__(self, reader, writer, engine, scheduler, options: WyomingOptions = WyomingOptions(),
                 executor: Optional[Executor] = None):
        self.reader, self.writer = reader, writer
        self.engine, self.scheduler, self.server_options = engine, scheduler, options
        self.executor = executor
        peer = writer.get_extra_info("peername")
        self.name = f"wyoming {peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "wyoming"
        self.options = UtteranceOptions()
        self.utterance: Optional[Utterance] = None
        self.stray_chunks = False  # an error was sent for audio-chunks outside an utterance
        self.refused = False  # an error was sent for this utterance: its audio is dropped until audio-stop
        self.close_at_stop = False  # refused as busy / shutting down: close once its audio-stop arrives
        self.stopping = False  # the server stops: close after the current utterance
        self.gone = False  # the client closed or the connection broke
        self.queue: asyncio.Queue = asyncio.Queue(QUEUE_EVENTS)

    @property
    def busy(self) -> bool:
        return self.utterance is not None

    async def run(self) -> None:
        reader = asyncio.create_task(self._read_loop(), name=f"{self.name} reader")
        try:
            while True:
                try:  # an open utterance must keep sending (the wait never cuts into an event being read)
                    item = await asyncio.wait_for(self.queue.get(), IDLE_TIMEOUT_S if self.busy else None)
                except asyncio.TimeoutError:
                    item = WyomingProtocolError(f"no event for {IDLE_TIMEOUT_S:.0f} s during an utterance; send "
                                                f"audio-stop to end it", "timeout")
                    logger.warning("%s: %s; closing the connection", self.name, item)
                if isinstance(item, WyomingProtocolError):
                    await self._send(Error(text=str(item), code=item.code).event())
                    reader.cancel()  # (still reading after an idle timeout) the drain below reads alone
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await reader
                    await self._linger()
                    break
                if item is None or not await self._handle(item) or self.gone:
                    break
                if self.stopping and not self.busy:
                    break
        except (ConnectionError, OSError) as exc:
            logger.info("%s: connection lost (%s)", self.name, exc)
        finally:
            reader.cancel()
            await self._end_utterance(abandon=True)
            with contextlib.suppress(Exception):
                self.writer.close()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _read_loop(self) -> None:
        """Reads events into the queue. At the end of the stream (the client left) it cancels the
        open utterance at once; a protocol error is queued after the events read before it."""
        try:
            while True:
                try:
                    event = await read_event(self.reader)
                except WyomingProtocolError as exc:
                    logger.warning("%s: %s; closing the connection", self.name, exc)
                    await self.queue.put(exc)  # events before it are still handled
                    return
                if event is None:
                    break
                await self.queue.put(event)
        except (ConnectionError, OSError):
            pass
        self.gone = True
        self._abandon()
        await self.queue.put(None)

    async def _linger(self) -> None:
        """Half-close (the client reads the error, then the end of the stream), then drop what
        the client still sends, bounded by LINGER_S and LINGER_BYTES, so that the close that
        follows finds no unread input (see LINGER_S)."""
        if self.gone:
            return
        loop = asyncio.get_running_loop()
        end, dropped = loop.time() + LINGER_S, 0
        try:
            if self.writer.can_write_eof():
                self.writer.write_eof()
            while dropped < LINGER_BYTES and loop.time() < end:
                data = await asyncio.wait_for(self.reader.read(65536), end - loop.time())
                if not data:
                    break
                dropped += len(data)
        except (asyncio.TimeoutError, ConnectionError, OSError, ValueError):
            pass

    def _abandon(self) -> None:
        if self.utterance is not None:
            logger.info("%s: connection ended mid-utterance; its work is cancelled", self.name)
            self.utterance.abandon()

    async def _send(self, event: Event) -> None:
        if self.gone:
            return
        try:
            await async_write_event(event, self.writer)
        except (ConnectionError, OSError):
            self.gone = True
            self._abandon()

    async def _handle(self, event: Event) -> bool:
        """Handle one event; False closes the connection."""
        t = event.type
        try:
            if AudioChunk.is_type(t):
                return await self._on_chunk(event)
            if AudioStart.is_type(t):
                return await self._on_start(event)
            if AudioStop.is_type(t):
                return await self._on_stop()
            if Transcribe.is_type(t):
                return await self._on_transcribe(event)
            if Describe.is_type(t):
                await self._send(info_event(self.engine))
                return True
            if Ping.is_type(t):
                await self._send(Pong(text=event.data.get("text")).event())
                return True
        except UtteranceError as exc:
            logger.warning("%s: %s", self.name, exc)
            await self._end_utterance(abandon=True)
            self.refused = True
            await self._send(Error(text=str(exc), code=exc.code).event())
            return True
        logger.debug("%s: ignoring event %r", self.name, t)
        return True

    async def _on_transcribe(self, event: Event) -> bool:
        tr = Transcribe.from_event(event)
        self.refused = False
        if self.busy:
            logger.warning("%s: transcribe during an utterance applies to the next one", self.name)
        echo = tr.context if isinstance(tr.context, dict) else None
        try:
            language = resolve_wyoming_language(tr.language)
        except UtteranceError:
            self.options = UtteranceOptions()
            raise
        self.options = UtteranceOptions(language=language,
                                        context=biasing_text(tr.context, tr.transcript_names, tr.transcript_terms),
                                        echo=echo)
        return True

    async def _on_start(self, event: Event) -> bool:
        if self.busy:
            logger.warning("%s: audio-start during an utterance; the previous one is dropped", self.name)
            await self._end_utterance(abandon=True)
        if self.refused:
            return True  # its transcribe was refused: the error is the answer
        fmt = _format(event.data)
        try:
            client = self.scheduler.admit(self.name, LIVE)
        except (QueueFull, SchedulerClosed) as exc:
            logger.warning("%s: %s", self.name, exc)
            code = "busy" if isinstance(exc, QueueFull) else "shutting-down"
            await self._send(Error(text=str(exc), code=code).event())
            # The client is still sending this utterance's audio: closing now would reset the
            # connection before it reads the error. Drop its audio, close at its audio-stop.
            self.refused = self.close_at_stop = True
            return True
        try:
            utt = Utterance(self.engine, client, fmt, self.options, self.server_options, self.executor)
        except ValueError as exc:
            client.close()
            raise UtteranceError(f"cannot start the utterance: {exc}", "bad-request") from None
        except BaseException:
            client.close()
            raise
        self.utterance = utt
        self.stray_chunks = False
        utt.worker = asyncio.create_task(utt.run_stream(self._send_piece), name=f"{self.name} stream")
        lang = Utterance._code(self.options.language)
        await self._send(TranscriptStart(language=lang, context=self.options.echo).event())
        return True

    async def _send_piece(self, piece: str) -> None:
        await self._send(TranscriptChunk(text=piece).event())

    async def _on_chunk(self, event: Event) -> bool:
        utt = self.utterance
        if self.refused:
            return True
        if utt is None or utt.stopped:
            if not self.stray_chunks:
                self.stray_chunks = True
                logger.warning("%s: audio-chunk before audio-start; dropped", self.name)
                await self._send(Error(text="audio-chunk before audio-start: send audio-start (rate, width, "
                                            "channels) first; this audio was ignored",
                                       code="audio-not-started").event())
            return True
        if utt.worker is not None and utt.worker.done():
            await self._finish_failed_worker()
            return True
        if event.payload:
            fmt = _format(event.data)
            if fmt != utt.fmt:
                raise UtteranceError(f"audio-chunk format {fmt} differs from audio-start's {utt.fmt}; "
                                     f"send a new audio-start to change it", "bad-audio-format")
            utt.add(event.payload)
        return True

    async def _on_stop(self) -> bool:
        utt = self.utterance
        if self.close_at_stop:  # refused as busy: the error was the answer
            return False
        if utt is None:  # nothing was started (or it was refused): the answer is still a transcript
            self.refused = self.stray_chunks = False
            await self._send(Transcript(text="").event())
            return True
        utt.stop()
        try:
            text, lang = await utt.final(self._send_piece)
        except Cancelled:
            await self._end_utterance(abandon=True)
            if not self.gone:
                await self._send(Error(text="the transcription was cancelled (server stopping)",
                                       code="cancelled").event())
            return not self.gone
        except Exception as exc:  # noqa: BLE001 - any engine failure becomes an error event
            logger.exception("%s: transcription failed", self.name)
            await self._end_utterance(abandon=True)
            await self._send(Error(text=f"transcription failed: {exc}", code="transcription-failed").event())
            return True
        if text.startswith(utt.sent):
            rest = text[len(utt.sent):]
            if rest:
                await self._send_piece(rest)
        else:
            logger.info("%s: the final transcript revises the streamed pieces %r", self.name, utt.sent)
        logger.info("%s: %r", self.name, text)
        await self._send(Transcript(text=text, language=lang, context=utt.options.echo).event())
        await self._send(TranscriptStop().event())
        await self._end_utterance(abandon=False)
        self.options = UtteranceOptions()  # transcribe options hold for one utterance
        return True

    async def _finish_failed_worker(self) -> None:
        utt = self.utterance
        exc = utt.worker.exception() if utt.worker is not None and not utt.worker.cancelled() else None
        await self._end_utterance(abandon=True)
        self.refused = True
        if isinstance(exc, Cancelled):
            await self._send(Error(text="the transcription was cancelled (server stopping)", code="cancelled").event())
        else:
            logger.error("%s: streaming failed: %r", self.name, exc)
            await self._send(Error(text=f"transcription failed: {exc}", code="transcription-failed").event())

    async def _end_utterance(self, abandon: bool) -> None:
        utt, self.utterance = self.utterance, None
        if utt is None:
            return
        if abandon:
            utt.abandon()
        if utt.worker is not None and not utt.worker.done():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await utt.worker  # its engine call ends soon: the client was cancelled
        if utt.worker is not None and utt.worker.done() and not utt.worker.cancelled():
            utt.worker.exception()  # retrieved: a failure was reported (or the utterance abandoned)
        utt.client.close()


# ---------------------------------------------------------------------------- server
async def serve_wyoming(uri: str, engine, scheduler, *, stop: asyncio.Event | None = None, zeroconf: bool = False,
                        ready: asyncio.Event | None = None) -> None:
    """Serve Wyoming on ``uri`` (tcp://HOST:PORT or unix://PATH) until ``stop`` is set or the task is cancelled.

    ``engine`` is a loaded Qwen3ASREngine, ``scheduler`` the process's Scheduler (each
    utterance is one "live" client). ``ready`` is set once listening (the bound address is
    logged; port 0 picks a free one). On ``stop``: no new connections; idle ones are closed,
    utterances in progress get STOP_GRACE_S to finish, then are cancelled. ``zeroconf``
    advertises a tcp:// server for Home Assistant discovery (needs ``pip install zeroconf``).
    Installs no signal handlers. Settings are the WyomingOptions defaults (see ``serve``).
    """
    await serve(uri, engine, scheduler, WyomingOptions(), stop=stop, zeroconf=zeroconf, ready=ready)


async def serve(uri: str, engine, scheduler, options: WyomingOptions, *, stop: asyncio.Event | None = None,
                zeroconf: bool = False, ready: asyncio.Event | None = None) -> None:
    """``serve_wyoming`` with explicit WyomingOptions."""
    parsed = check_uri(uri)
    handlers: Dict[asyncio.Task, WyomingHandler] = {}
    # Engine calls block while they wait for a scheduler turn: they get threads of their own (one
    # per admissible client), so they never starve the loop's default executor (name lookups,
    # the HTTP server's work in the combined server).
    executor = ThreadPoolExecutor(max_workers=scheduler.max_clients, thread_name_prefix="wyoming")

    def on_connect(reader, writer):
        handler = WyomingHandler(reader, writer, engine, scheduler, options, executor)
        task = asyncio.create_task(handler.run(), name=handler.name)
        handlers[task] = handler
        task.add_done_callback(lambda t: handlers.pop(t, None))

    if parsed.scheme == "tcp":
        server = await asyncio.start_server(on_connect, parsed.hostname, parsed.port, limit=MAX_LINE_BYTES)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(parsed.path)
        server = await asyncio.start_unix_server(on_connect, parsed.path, limit=MAX_LINE_BYTES)
    addresses = [_address(parsed.scheme, s.getsockname()) for s in server.sockets]
    logger.info("Wyoming server listening on %s", ", ".join(addresses))
    zc = None
    try:
        if zeroconf:
            zc = await _advertise(parsed, server)
        if ready is not None:
            ready.set()
        await (stop.wait() if stop is not None else asyncio.Future())
        await _shutdown(server, handlers, STOP_GRACE_S)
    except asyncio.CancelledError:
        await _shutdown(server, handlers, 0.0)
        raise
    finally:
        server.close()  # (again, if the shutdown ran) also when the zeroconf advertisement failed
        if zc is not None:
            with contextlib.suppress(Exception):
                await zc._aiozc.async_close()  # HomeAssistantZeroconf has no close(); this unregisters
        executor.shutdown(wait=False, cancel_futures=True)
        if parsed.scheme == "unix":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(parsed.path)


def check_uri(uri: str):
    """The parsed ``uri`` if it is tcp://HOST:PORT or unix://PATH, else ValueError saying what is accepted."""
    parsed = urlparse(uri)
    if parsed.scheme == "tcp":
        try:
            port = parsed.port
        except ValueError:
            port = None
        if not parsed.hostname or port is None:
            raise ValueError(f"a tcp:// URI needs a host and a port (0-65535), e.g. {DEFAULT_URI} (got {uri!r})")
    elif parsed.scheme == "unix":
        if not parsed.path:
            raise ValueError(f"a unix:// URI needs a socket path, e.g. unix:///run/qwen3asr.sock (got {uri!r})")
    else:
        raise ValueError(f"Wyoming URI must be tcp://HOST:PORT or unix://PATH, got {uri!r}")
    return parsed


def _address(scheme: str, sockname) -> str:
    if scheme == "unix":
        return f"unix://{sockname}"
    host, port = sockname[0], sockname[1]
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


async def _shutdown(server, handlers: Dict[asyncio.Task, WyomingHandler], grace: float) -> None:
    server.close()
    for task, handler in list(handlers.items()):
        handler.stopping = True
        if not handler.busy:
            task.cancel()
    tasks = list(handlers)
    if tasks and grace > 0:
        _, pending = await asyncio.wait(tasks, timeout=grace)
    else:
        pending = set(tasks)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
    await server.wait_closed()


async def _advertise(parsed, server):
    if parsed.scheme != "tcp":
        raise ValueError("zeroconf advertises tcp:// servers only")
    try:
        from wyoming.zeroconf import HomeAssistantZeroconf
    except ImportError:
        raise RuntimeError("--zeroconf needs the zeroconf package: pip install zeroconf") from None
    port = server.sockets[0].getsockname()[1]
    host = None if parsed.hostname in ("0.0.0.0", "::") else parsed.hostname
    import socket

    # The service name must be unique on the network: one per board.
    zc = HomeAssistantZeroconf(port=port, name=f"qwen3asr-rk-{socket.gethostname()}", host=host)
    await zc.register_server()
    logger.info("zeroconf: advertised _wyoming._tcp on %s:%d", zc.host, port)
    return zc


# ---------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    from ..cli.common import add_engine_args

    ap = argparse.ArgumentParser(prog="qwen3asr-wyoming",
                                 description="Wyoming speech-to-text server for Home Assistant (Qwen3-ASR).")
    ap.add_argument("--uri", default=DEFAULT_URI,
                    help="where to listen: tcp://HOST:PORT or unix://PATH (default %(default)s; "
                         "tcp://0.0.0.0:10300 to accept other machines, such as Home Assistant's)")
    add_engine_args(ap)
    ap.add_argument("--max-clients", type=int, default=16, help="utterances admitted at once (default %(default)s)")
    ap.add_argument("--chunk-size", type=float, default=WyomingOptions.chunk_size,
                    help="stream chunk in seconds (default %(default)s)")
    ap.add_argument("--final", choices=FINALS, default=WyomingOptions.final,
                    help="final transcript from the stream, or from one pass over the whole utterance when it fits "
                         "the model's one-pass limit (default %(default)s; see docs/wyoming.md)")
    ap.add_argument("--zeroconf", action="store_true", help="advertise the server for Home Assistant discovery "
                                                            "(needs: pip install zeroconf)")
    ap.add_argument("-v", "--verbose", action="store_true", help="log each request")
    return ap


async def _main_async(args) -> None:
    from ..cli.common import engine_from_args
    from .scheduler import Scheduler

    options = WyomingOptions(chunk_size=args.chunk_size, final=args.final)
    check_uri(args.uri)  # before the model loads
    engine = engine_from_args(args)
    scheduler = Scheduler(max_clients=args.max_clients)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await serve(args.uri, engine, scheduler, options, stop=stop, zeroconf=args.zeroconf)
    finally:
        scheduler.close()


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger(__name__).setLevel(logging.INFO)  # the listening address is always logged
    try:
        asyncio.run(_main_async(args))
    except (ValueError, RuntimeError, OSError, ImportError) as exc:
        print(f"qwen3asr-wyoming: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
