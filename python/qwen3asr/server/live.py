"""Live captions over a WebSocket (``/v1/stream``): one StreamSession per connection.

Protocol (docs/serving.md has the full description):

client -> server
  1. a JSON text message ``{"type": "start", "sample_rate": 16000, "format": "s16le"|"f32le",
     "language": null|"en"|"English", "context": "", "chunk_size": 1.0, "vad": false, "words": false,
     "word_spans": "speech"|"raw"|"checked", "final_pass": true, "partial_every": null|seconds,
     "first_words": 0.5|null}``
  2. binary messages: mono PCM in that format and rate (any length, whole samples)
  3. ``{"type": "stop"}``: no more audio
server -> client (JSON text messages)
  ``{"type": "ready", ...}`` after the start message was accepted;
  ``{"type": "committed", "text": piece}`` each newly committed piece (append it; never changes);
  ``{"type": "tail", "text": tail, "received_seconds": s, "chunks": n}`` after each decoded
  batch: the whole unstable tail (replace the previous one), ``received_seconds`` the audio
  received when it was decoded (input seconds); with ``"partial_every": s`` the tail also shows a
  preview of the open chunk every s seconds of audio (one decoder run each;
  TranscribeOptions.partial_every); ``"first_words"`` (default 0.5) makes such previews only
  until each segment shows text (TranscribeOptions.first_words), null none;
  ``{"type": "segment", "start": s, "end": s, "text": ..., "language": ..., "words": [{"word",
  "start", "end"}]}``: each finished segment, in stream seconds. With ``"final_pass": true``
  (the default) a segment is a piece of speech that ended (at a pause, a VAD speech end or
  stop), its text the one-pass decode of that piece, which replaces the committed pieces sent
  for that span; ``words`` (with ``"words": true``) are its word times (the forced aligner;
  ``"word_spans"`` as TranscribeOptions.word_spans);
  ``{"type": "final", "text": full, "language": ..., "segments": [...]}`` after stop (each
  segment with its ``words`` when asked for; a stream keeps a bounded history: the latest
  65536 characters and 1000 segments), then the server closes with 1000;
  ``{"type": "error", "code": ..., "message": ...}`` then a close with a code that says why.

A message over MAX_MESSAGE_BYTES closes the connection with 1009; audio sent faster than it is
decoded waits in the client's connection beyond MAX_PENDING_SECONDS (the server stops reading);
a client that stops reading its messages for SEND_TIMEOUT is closed with 1008 "slow_client".
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from typing import Optional

import numpy as np
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from .. import checks
from ..audio import SAMPLE_RATE, AudioError, PcmConverter, PcmFormat
from ..languages import LanguageError, resolve_language
from ..options import WORD_SPANS, chunk_problems, interval_problem
from ..work import Cancelled
from .errors import ApiError
from .scheduler import LIVE
from .settings import MAX_CONTEXT_CHARS

logger = logging.getLogger(__name__)

FORMATS = {"s16le": (2, "int"), "f32le": (4, "float")}  # start "format" -> PcmFormat width, encoding
MIN_RATE, MAX_RATE = 8000, 192000  # Hz accepted in the start message
START_TIMEOUT = 30.0  # seconds a new connection may take to send its start message
# What one connection may hold (docs/serving.md "Memory ceilings of one request"):
MAX_MESSAGE_BYTES = 1 << 20  # largest client message (1 MiB: 33 s of 16 kHz s16le); larger: closed with 1009
# Audio received but not yet decoded: beyond it the server stops reading the connection (TCP
# backpressure) until the decoder catches up, so a client that sends faster than real time
# holds at most this much (60 s, 3.8 MB of 16 kHz float32).
MAX_PENDING_SECONDS = 60.0
# A message the client does not take within this time (its connection's buffers full: it stopped
# reading) closes the connection with 1008 "slow_client"; the other connections are not held up.
SEND_TIMEOUT = 10.0
SURFACE = "stream"  # the metrics' name of this endpoint

# Close codes (RFC 6455 and the IANA registry)
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001  # the server shuts down (after the final message)
CLOSE_UNSUPPORTED = 1003  # a message of the wrong kind (binary before start, unknown type)
CLOSE_INVALID = 1007  # malformed JSON, bad start fields, PCM not whole samples
CLOSE_POLICY = 1008  # missing or wrong API key; a client that does not read its messages (slow_client)
CLOSE_INTERNAL = 1011
CLOSE_TRY_LATER = 1013  # busy, or the model is still loading


class LiveProtocolError(Exception):
    """A client message that breaks the protocol: sent as an error message, then closed."""

    def __init__(self, close_code: int, code: str, message: str):
        super().__init__(message)
        self.close_code, self.code, self.message = close_code, code, message


@dataclasses.dataclass(frozen=True)
class StartMessage:
    """The validated start message of a live stream."""

    sample_rate: int = SAMPLE_RATE  # Hz of the PCM frames
    format: str = "s16le"  # "s16le" (int16 little-endian) or "f32le" (float32 little-endian, [-1, 1])
    language: Optional[str] = None  # canonical name, None: detect
    context: str = ""  # context biasing text
    chunk_size: float = 1.0  # seconds per decoded chunk (StreamOptions.chunk_size)
    vad: bool = False  # decode only speech (Silero VAD)
    words: bool = False  # word timestamps: a "segment" message per finished segment, words in "final"
    word_spans: str = "speech"  # what the word times say (TranscribeOptions.word_spans)
    final_pass: bool = True  # each finished piece of speech decoded again in one pass (a "segment" message)
    partial_every: Optional[float] = None  # seconds of audio between previews of the open chunk (None: none)
    first_words: Optional[float] = 0.5  # the same until each segment shows text (None: none)

    @classmethod
    def parse(cls, text: str) -> "StartMessage":
        msg = _json(text)
        if msg.get("type") != "start":
            raise LiveProtocolError(CLOSE_UNSUPPORTED, "expected_start", f"the first message must be "
                                    f"{{\"type\": \"start\", ...}}, got type {checks.show(msg.get('type'))}")
        known = {"type", "sample_rate", "format", "language", "context", "chunk_size", "vad", "words", "word_spans",
                 "final_pass", "partial_every", "first_words"}
        unknown = sorted(set(msg) - known)
        if unknown:
            shown = ", ".join(checks.show(k) for k in unknown[:5]) + (", ..." if unknown[5:] else "")
            raise LiveProtocolError(CLOSE_INVALID, "unknown_field", f"unknown start field(s) {shown}; "
                                    f"accepted: {', '.join(sorted(known))}")
        rate = msg.get("sample_rate", SAMPLE_RATE)
        problem = checks.integer("sample_rate", rate, MIN_RATE, MAX_RATE)
        if problem:
            raise LiveProtocolError(CLOSE_INVALID, "invalid_sample_rate", problem)
        fmt = msg.get("format", "s16le")
        if not isinstance(fmt, str) or fmt not in FORMATS:
            raise LiveProtocolError(CLOSE_INVALID, "invalid_format",
                                    f"format must be one of {', '.join(FORMATS)}, got {checks.show(fmt)}")
        try:
            language = resolve_language(msg.get("language"))
        except LanguageError as exc:
            raise LiveProtocolError(CLOSE_INVALID, "invalid_language", str(exc)) from None
        context = msg.get("context") or ""
        problem = checks.text("context", context, MAX_CONTEXT_CHARS)
        if problem:
            raise LiveProtocolError(CLOSE_INVALID, "invalid_context", problem)
        chunk = msg.get("chunk_size", cls.chunk_size)
        if not checks.is_number(chunk):
            raise LiveProtocolError(CLOSE_INVALID, "invalid_chunk_size",
                                    checks.problem("chunk_size", "a number of seconds", chunk))
        problems = chunk_problems(chunk, optional=False)  # the stream options' own check
        if problems:
            raise LiveProtocolError(CLOSE_INVALID, "invalid_start", f"cannot start the stream: {problems[0]}")
        flags = {}
        for name in ("partial_every", "first_words"):
            every = msg.get(name, getattr(cls, name))
            problem = interval_problem(name, every)  # the options' own check
            if problem:
                raise LiveProtocolError(CLOSE_INVALID, f"invalid_{name}", problem)
            flags[name] = None if every is None else float(every)
        for name in ("vad", "words", "final_pass"):
            flags[name] = msg.get(name, getattr(cls, name))
            if not isinstance(flags[name], bool):
                raise LiveProtocolError(CLOSE_INVALID, f"invalid_{name}",
                                        f"{name} must be true or false, got {checks.show(flags[name])}")
        spans = msg.get("word_spans", cls.word_spans)
        if not isinstance(spans, str) or spans not in WORD_SPANS:
            raise LiveProtocolError(CLOSE_INVALID, "invalid_word_spans",
                                    f"word_spans must be one of {', '.join(WORD_SPANS)}, got {checks.show(spans)}")
        return cls(sample_rate=rate, format=fmt, language=language, context=context, chunk_size=float(chunk),
                   word_spans=spans, **flags)


def _json(text: str) -> dict:
    try:
        msg = json.loads(text)
    except (json.JSONDecodeError, TypeError) as exc:
        raise LiveProtocolError(CLOSE_INVALID, "malformed_json", f"a text message is not valid JSON ({exc})") from None
    if not isinstance(msg, dict):
        raise LiveProtocolError(CLOSE_INVALID, "malformed_json", "a text message must be a JSON object")
    return msg


def _convert(audio: PcmConverter, data: bytes) -> np.ndarray:
    """(n,) float32 16 kHz of one binary message, which must hold whole samples."""
    if len(data) % audio.fmt.frame_bytes:
        raise LiveProtocolError(CLOSE_INVALID, "partial_sample",
                                f"a binary message of {len(data)} bytes is not a whole number of "
                                f"{audio.fmt.frame_bytes}-byte samples; send whole samples")
    try:
        return audio.convert(data)
    except AudioError as exc:  # non-finite float32 samples
        raise LiveProtocolError(CLOSE_INVALID, "invalid_samples", str(exc)) from None


_STOP = object()


class LiveStream:
    """One connection's state: the scheduler client, the session, the audio queue."""

    def __init__(self, ws: WebSocket, rt):
        self.ws, self.rt = ws, rt
        self.queue: asyncio.Queue = asyncio.Queue()  # bounded by pending (MAX_PENDING_SECONDS of audio)
        self.pending = 0  # samples queued for the decoder (16 kHz)
        self.room = asyncio.Event()  # set when pending drops below MAX_PENDING_SECONDS
        self.done = asyncio.Event()
        self.finish_reason: Optional[str] = None  # set when the server asks the stream to finish
        self.client = None
        self.chunks_sent = 0  # chunks decoded when the last tail message was sent
        self.partials_sent = 0  # previews made by then
        self.segments_sent = 0  # finished segments sent as "segment" messages
        self.words = False
        self.segment_messages = False  # with words or final passes
        self.outcome, self.code = "cancelled", None  # the metrics' outcome (until the final message)
        self.first_audio: Optional[float] = None  # perf_counter of the first audio, of the stop
        self.stop_at: Optional[float] = None
        self.first_text = False

    def request_finish(self, reason: str) -> None:
        """Finish this stream as if the client had sent stop (shutdown)."""
        self.finish_reason = reason
        self.queue.put_nowait(_STOP)

    async def send(self, msg: dict) -> None:
        """Send one message; LiveProtocolError slow_client when the client does not take it
        within SEND_TIMEOUT."""
        try:
            await asyncio.wait_for(self.ws.send_text(json.dumps(msg, ensure_ascii=False)), SEND_TIMEOUT)
        except asyncio.TimeoutError:
            raise LiveProtocolError(CLOSE_POLICY, "slow_client", f"the client did not read its messages for "
                                    f"{SEND_TIMEOUT:g} s") from None

    async def fail(self, err: LiveProtocolError) -> None:
        try:
            if err.code != "slow_client":  # its buffers are full: only the close is tried
                await self.send({"type": "error", "code": err.code, "message": err.message})
            await asyncio.wait_for(self.ws.close(err.close_code, reason=err.code), SEND_TIMEOUT)
        except (WebSocketDisconnect, RuntimeError, LiveProtocolError, asyncio.TimeoutError):
            pass


async def live_stream(ws: WebSocket) -> None:
    """The /v1/stream endpoint."""
    rt = ws.app.state.runtime
    stream = LiveStream(ws, rt)
    await ws.accept()
    gauge = rt.metrics.streams(SURFACE)
    gauge.inc()
    try:
        await _serve(stream)
        if ws.application_state == WebSocketState.CONNECTED and ws.client_state == WebSocketState.CONNECTED:
            # ended without a final message (its work was cancelled, e.g. at shutdown)
            await stream.fail(LiveProtocolError(CLOSE_GOING_AWAY, "stream_ended", "the stream was ended by the server"))
    except LiveProtocolError as err:
        logger.info("live stream refused: %s", err.message)
        stream.outcome = "refused" if err.close_code in (CLOSE_TRY_LATER, CLOSE_GOING_AWAY) else \
            ("error" if err.close_code == CLOSE_INTERNAL else "client_error")
        stream.code = err.code
        await stream.fail(err)
    except WebSocketDisconnect:
        pass
    except RuntimeError as exc:  # a send after the client vanished
        logger.info("live stream ended: %s", exc)
    finally:
        gauge.dec()
        rt.metrics.request(SURFACE, stream.outcome, stream.code)
        if stream.client is not None:
            stream.client.cancel()  # no-op when finished; stops work of a vanished client
            stream.client.close()
        rt.live.discard(stream)
        stream.done.set()


async def _serve(stream: LiveStream) -> None:
    ws, rt = stream.ws, stream.rt
    try:
        rt.check_key(ws.headers.get("authorization"), ws.query_params.get("api_key"))
        engine = rt.ready_engine()
    except ApiError as err:
        raise LiveProtocolError(CLOSE_POLICY if err.status == 401 else CLOSE_TRY_LATER, err.code, err.message) from None
    try:
        first = await asyncio.wait_for(ws.receive(), START_TIMEOUT)
    except asyncio.TimeoutError:
        raise LiveProtocolError(CLOSE_INVALID, "no_start", f"no start message within {START_TIMEOUT:.0f} s") from None
    if first["type"] == "websocket.disconnect":
        return
    if first.get("text") is None:
        raise LiveProtocolError(CLOSE_UNSUPPORTED, "expected_start",
                                "binary audio before the start message; send {\"type\": \"start\", ...} first")
    start = StartMessage.parse(first["text"])
    try:
        stream.client = rt.admit(f"ws:{ws.client.host if ws.client else '?'}:{time.monotonic_ns()}", LIVE)
    except ApiError as err:
        raise LiveProtocolError(CLOSE_TRY_LATER, err.code, err.message) from None
    pieces: list = []
    try:
        session = await rt.run(engine.create_stream, language=start.language, context=start.context,
                               chunk_size=start.chunk_size, vad=True if start.vad else None,
                               word_timestamps=start.words, word_spans=start.word_spans, final_pass=start.final_pass,
                               partial_every=start.partial_every, first_words=start.first_words,
                               on_text=pieces.append, work=stream.client.work)
    except (ValueError, FileNotFoundError, ImportError) as exc:
        raise LiveProtocolError(CLOSE_INVALID, "invalid_start", f"cannot start the stream: {exc}") from None
    width, encoding = FORMATS[start.format]
    audio = PcmConverter(PcmFormat(start.sample_rate, width, 1, encoding))
    rt.live.add(stream)
    stream.words = start.words
    stream.segment_messages = start.words or start.final_pass
    await stream.send({"type": "ready", "sample_rate": start.sample_rate, "format": start.format,
                       "chunk_size": start.chunk_size, "language": start.language, "vad": start.vad,
                       "words": start.words, "word_spans": start.word_spans, "final_pass": start.final_pass,
                       "partial_every": start.partial_every,
                       "first_words": start.first_words})
    receiver = asyncio.ensure_future(_receive(stream, audio))
    try:
        await _decode(stream, session, audio, pieces)
    finally:
        receiver.cancel()


async def _receive(stream: LiveStream, audio: PcmConverter) -> None:
    """Read client messages into the queue. A disconnect or a protocol error cancels the
    scheduler client at once (its running chunk stops at the next token) and is handed to the
    decoder loop; after stop, only a disconnect is watched for."""
    ws = stream.ws
    stopped = False
    try:
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(msg.get("code", 1000))
            if stopped:
                continue  # nothing more is expected; the final message is on its way
            if msg.get("bytes") is not None:
                pcm = _convert(audio, msg["bytes"])
                while stream.pending >= MAX_PENDING_SECONDS * SAMPLE_RATE:  # backpressure: stop reading
                    stream.room.clear()
                    await stream.room.wait()
                stream.pending += pcm.shape[0]
                if stream.first_audio is None:
                    stream.first_audio = time.perf_counter()
                stream.queue.put_nowait((pcm, audio.frames_in / audio.fmt.rate))
                continue
            m = _json(msg.get("text") or "")
            if m.get("type") != "stop":
                raise LiveProtocolError(CLOSE_UNSUPPORTED, "unknown_message",
                                        f"unknown message type {m.get('type')!r}; after start send binary audio "
                                        f"or {{\"type\": \"stop\"}}")
            stream.stop_at = time.perf_counter()
            stream.queue.put_nowait(_STOP)
            stream.client.ending.set()  # the final comes next: a running preview stops (Work.newer)
            stopped = True
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        if not stopped or isinstance(exc, WebSocketDisconnect):
            stream.client.cancel()
        stream.queue.put_nowait(exc)


async def _decode(stream: LiveStream, session, audio: PcmConverter, pieces: list) -> None:
    """Feed queued audio to the session (all that is waiting in one call), send updates; on
    stop, finish and send the final message."""
    rt = stream.rt
    while True:
        item = await stream.queue.get()
        frames = []
        while isinstance(item, tuple):  # (pcm, input seconds received so far)
            frames.append(item)
            item = None if stream.queue.empty() else stream.queue.get_nowait()
        if frames:
            pcm = np.concatenate([f[0] for f in frames])
            frames_in = frames[-1][1]
            frames.clear()
            try:
                result = await rt.run(session.feed_audio, pcm)
            except Cancelled:  # the receiver cancelled it: a disconnect, or an error to report
                if isinstance(item, LiveProtocolError):
                    raise item from None
                _raise_queued_error(stream)
                return
            stream.pending -= pcm.shape[0]
            stream.room.set()
            del pcm
            await _send_update(stream, result, pieces, frames_in)
        if item is None:
            continue
        if isinstance(item, BaseException):
            if isinstance(item, (LiveProtocolError, WebSocketDisconnect)):
                raise item
            raise LiveProtocolError(CLOSE_INTERNAL, "internal_error", f"receiving failed: {item}")
        # _STOP: the client sent stop, or the server finishes the stream (shutdown)
        try:
            rest = audio.flush()
            if rest.size:
                await rt.run(session.feed_audio, rest)
            result = await rt.run(session.finish)
        except Cancelled:
            return
        for p in pieces:
            await stream.send({"type": "committed", "text": p})
        pieces.clear()
        await _send_segments(stream, result)
        await stream.send({"type": "final", "text": result.text, "language": result.language,
                           "audio_seconds": round(result.stats.audio_seconds, 3),
                           "segments": [_segment(s, stream.words) for s in result.segments],
                           **({"reason": stream.finish_reason} if stream.finish_reason else {})})
        stream.outcome = "ok"
        rt.metrics.audio(SURFACE, result.stats.audio_seconds, stream.client.busy_ms / 1000)
        rt.metrics.final_latency.labels(SURFACE).observe(time.perf_counter() - (stream.stop_at or time.perf_counter()))
        await stream.ws.close(CLOSE_GOING_AWAY if stream.finish_reason else CLOSE_NORMAL)
        return


def _raise_queued_error(stream: LiveStream) -> None:
    while not stream.queue.empty():
        item = stream.queue.get_nowait()
        if isinstance(item, LiveProtocolError):
            raise item


async def _send_update(stream: LiveStream, result, pieces: list, received: float) -> None:
    """Committed pieces, then the tail, once per feed that decoded a chunk or made a preview."""
    if not pieces and result.stats.chunks == stream.chunks_sent and result.stats.partials == stream.partials_sent:
        return
    stream.chunks_sent, stream.partials_sent = result.stats.chunks, result.stats.partials
    if not stream.first_text and (pieces or result.tail) and stream.first_audio is not None:
        stream.first_text = True
        stream.rt.metrics.first_text.labels(SURFACE).observe(time.perf_counter() - stream.first_audio)
    for p in pieces:
        await stream.send({"type": "committed", "text": p})
    pieces.clear()
    await _send_segments(stream, result)
    await stream.send({"type": "tail", "text": result.tail, "received_seconds": round(received, 3),
                       "chunks": result.stats.chunks})


def _segment(seg, words: bool) -> dict:
    d = {"start": round(seg.start, 3), "end": round(seg.end, 3), "text": seg.text, "language": seg.language}
    if words:
        d["words"] = [w.to_dict() for w in seg.words]
    return d


async def _send_segments(stream: LiveStream, result) -> None:
    """With words or final passes on: a "segment" message for every segment finished since the
    last one sent (segments[:final_segments] of the session's result are final)."""
    if not stream.segment_messages:
        return
    final = len(result.segments) if result.finished else result.final_segments
    first = result.dropped_segments  # the stream's number of segments[0] (a live stream keeps the latest)
    for seg in result.segments[max(0, stream.segments_sent - first):final]:
        await stream.send({"type": "segment", **_segment(seg, stream.words)})
    stream.segments_sent = max(stream.segments_sent, first + final)
