"""The Wyoming handler: answers the events of one connection (reading and the connection's
life are protocol.EventConnection's, one utterance is utterance.Utterance).

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
  (qwen3asr.audio.PcmConverter) and fed to the session; text the session commits (never retracted) is
  sent at once as ``transcript-chunk`` (pieces that concatenate to the transcript).
- ``audio-stop``: the rest of the text as a last ``transcript-chunk``, the final
  ``transcript`` (always; empty text for silence), then ``transcript-stop``. The final text
  is one decode of each finished piece of the utterance (WyomingOptions.final="pieces", chosen
  by measurement: docs/wyoming.md), or the stream's own (final="stream");
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

import asyncio
import contextlib
import logging
import os
import time
from concurrent.futures import Executor
from typing import Optional

from wyoming.asr import Transcribe, Transcript, TranscriptChunk, TranscriptStart, TranscriptStop
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import AsrModel, AsrProgram, Attribution, Describe, Info
from wyoming.ping import Ping, Pong

from ...audio import SAMPLE_RATE
from ...languages import LANGUAGE_CODES
from ...work import Cancelled
from ..scheduler import LIVE, QueueFull, SchedulerClosed
from .protocol import EventConnection
from .utterance import (Utterance, UtteranceError, UtteranceOptions, WyomingOptions, biasing_text, language_code,
                        pcm_format, resolve_wyoming_language)

logger = logging.getLogger(__name__)

PROJECT_URL = "https://github.com/QwenLM/Qwen3-ASR"  # shown by Home Assistant as the attribution link

SURFACE = "wyoming"  # the metrics' name of this surface


def info_event(engine) -> Event:
    """The ``info`` answer to ``describe``: one AsrProgram with one AsrModel."""
    from ... import __version__

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


class WyomingHandler(EventConnection):
    """Answers the events of one Wyoming connection (see the module docstring)."""

    def __init__(self, reader, writer, engine, scheduler, options: WyomingOptions = WyomingOptions(),
                 executor: Optional[Executor] = None, metrics=None):
        super().__init__(reader, writer)
        self.engine, self.scheduler, self.server_options = engine, scheduler, options
        self.executor = executor
        self.metrics = metrics  # the combined server's Metrics (surface "wyoming"), or None
        self.options = UtteranceOptions()
        self.utterance: Optional[Utterance] = None
        self.stray_chunks = False  # an error was sent for audio-chunks outside an utterance
        self.refused = False  # an error was sent for this utterance: its audio is dropped until audio-stop
        self.close_at_stop = False  # refused as busy / shutting down: close once its audio-stop arrives

    @property
    def busy(self) -> bool:
        return self.utterance is not None

    def on_gone(self) -> None:
        if self.utterance is not None:
            logger.info("%s: connection ended mid-utterance; its work is cancelled", self.name)
            self.utterance.abandon()

    async def on_close(self) -> None:
        await self._end_utterance(abandon=True)

    async def handle(self, event: Event) -> bool:
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
        fmt = pcm_format(event.data)
        try:
            client = self.scheduler.admit(self.name, LIVE)
        except (QueueFull, SchedulerClosed) as exc:
            logger.warning("%s: %s", self.name, exc)
            code = "busy" if isinstance(exc, QueueFull) else "shutting-down"
            self._count("refused", code)
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
        lang = language_code(self.options.language)
        await self._send(TranscriptStart(language=lang, context=self.options.echo).event())
        return True

    async def _send_piece(self, piece: str) -> None:
        utt = self.utterance
        if self.metrics is not None and utt is not None and not utt.first_sent:
            utt.first_sent = True
            self.metrics.first_text.labels(SURFACE).observe(time.perf_counter() - utt.started)
        await self._send(TranscriptChunk(text=piece).event())

    def _count(self, outcome: str, code: Optional[str] = None) -> None:
        if self.metrics is not None:
            self.metrics.request(SURFACE, outcome, code)

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
            fmt = pcm_format(event.data)
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
        stopped = time.perf_counter()
        try:
            text, lang = await utt.final(self._send_piece)
        except Cancelled:
            self._count("cancelled")
            await self._end_utterance(abandon=True)
            if not self.gone:
                await self._send(Error(text="the transcription was cancelled (server stopping)",
                                       code="cancelled").event())
            return not self.gone
        except Exception as exc:  # noqa: BLE001 - any engine failure becomes an error event
            logger.exception("%s: transcription failed", self.name)
            self._count("error", "transcription-failed")
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
        if self.metrics is not None:
            self._count("ok")
            self.metrics.final_latency.labels(SURFACE).observe(time.perf_counter() - stopped)
            self.metrics.audio(SURFACE, utt.samples / SAMPLE_RATE, utt.client.busy_ms / 1000)
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
