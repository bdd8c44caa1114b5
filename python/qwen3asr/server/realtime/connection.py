"""``/v1/realtime``: OpenAI Realtime transcription sessions over a WebSocket.

One connection is one session and one "live" client of the scheduler (admitted at connect, as a
/v1/stream connection). Its audio goes through qwen3asr.server.realtime.items (the input buffer
cut into items, each an engine stream session) in the server's worker threads, one call at a
time; a receiver task reads the client's events meanwhile, converts the audio and applies
backpressure as /v1/stream does. docs/serving.md describes the events.

Errors in a client event are ``error`` events and the session goes on. A wrong API key, a full
or loading server, a client that stops reading and the shutdown close the connection (after an
``error`` event naming why): 1008 key or slow client, 1013 busy or loading, 1001 shutdown,
1009 (by the WebSocket layer) an event over MAX_MESSAGE_BYTES.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
import logging
import time
from typing import Optional

import numpy as np
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from ...audio import SAMPLE_RATE, AudioError
from ...work import Cancelled
from ..errors import ApiError
from ..live import (CLOSE_GOING_AWAY, CLOSE_INTERNAL, CLOSE_POLICY, CLOSE_TRY_LATER, MAX_PENDING_SECONDS,
                    SEND_TIMEOUT)
from ..scheduler import LIVE
from .config import ConfigError, RealtimeConfig
from .items import BufferError, InputBuffer, new_id

logger = logging.getLogger(__name__)

SURFACE = "realtime"
KEY_PROTOCOL = "openai-insecure-api-key."  # browsers send the key as a subprotocol
# Realtime client events a transcription session has no use for (refused with unsupported_event)
CONVERSATION_EVENTS = ("response.create", "response.cancel", "conversation.item.create", "conversation.item.delete",
                       "conversation.item.retrieve", "conversation.item.truncate", "output_audio_buffer.clear")
CLIENT_EVENTS = ("session.update", "transcription_session.update", "input_audio_buffer.append",
                 "input_audio_buffer.commit", "input_audio_buffer.clear")


class Fatal(Exception):
    """Sent as an error event, then the connection is closed with ``close_code``."""

    def __init__(self, close_code: int, code: str, message: str, type_: str = "invalid_request_error"):
        super().__init__(message)
        self.close_code, self.code, self.message, self.type = close_code, code, message, type_


_STOP = object()


class RealtimeConnection:
    """One session's state on the event loop (the blocking part is its InputBuffer)."""

    def __init__(self, ws: WebSocket, rt):
        self.ws, self.rt = ws, rt
        self.session_id = new_id("sess")
        self.queue: asyncio.Queue = asyncio.Queue()
        self.pending = 0  # samples queued for the worker (16 kHz)
        self.room = asyncio.Event()
        self.done = asyncio.Event()
        self.lock = asyncio.Lock()  # one sender at a time
        self.finish_reason: Optional[str] = None
        self.client = None
        self.config = RealtimeConfig()
        self.converter = self.config.converter()
        self.silero = None  # the connection's Silero VAD model, loaded with the first server_vad
        self.first_audio: Optional[float] = None  # perf_counter of the first append
        self.first_text_seen = False
        self.audio_seconds = 0.0

    def request_finish(self, reason: str) -> None:
        """Runtime.drain: commit the open item, send its transcript, close with 1001."""
        self.finish_reason = reason
        self.queue.put_nowait(_STOP)

    async def send(self, event: dict) -> None:
        event = {"event_id": new_id("event"), **event}
        async with self.lock:
            try:
                await asyncio.wait_for(self.ws.send_text(json.dumps(event, ensure_ascii=False)), SEND_TIMEOUT)
            except asyncio.TimeoutError:
                raise Fatal(CLOSE_POLICY, "slow_client", f"the client did not read its events for "
                            f"{SEND_TIMEOUT:g} s") from None

    async def error(self, code: str, message: str, *, param: Optional[str] = None, event_id: Optional[str] = None,
                    type_: str = "invalid_request_error") -> None:
        await self.send({"type": "error", "error": {"type": type_, "code": code, "message": message, "param": param,
                                                    "event_id": event_id}})

    async def fail(self, err: Fatal) -> None:
        try:
            if err.code != "slow_client":
                await self.error(err.code, err.message, type_=err.type)
            await asyncio.wait_for(self.ws.close(err.close_code, reason=err.code), SEND_TIMEOUT)
        except (WebSocketDisconnect, RuntimeError, Fatal, asyncio.TimeoutError):
            pass

    def vad_stream(self, options):
        """A VADStream on the connection's Silero model (worker thread)."""
        from ...vad import SileroVAD, VADStream

        if self.silero is None:
            try:
                self.silero = self.rt.idle_vad_models.pop()
            except IndexError:
                self.silero = SileroVAD()
        return VADStream(options, model=self.silero)  # (resets the model's state)


def _offered_key(ws: WebSocket) -> tuple[Optional[str], Optional[str]]:
    """(the subprotocol to accept, the API key a browser sent as a subprotocol)."""
    offered = ws.scope.get("subprotocols") or []
    key = next((p[len(KEY_PROTOCOL):] for p in offered if p.startswith(KEY_PROTOCOL)), None)
    accept = "realtime" if "realtime" in offered else next((p for p in offered if not p.startswith(KEY_PROTOCOL)),
                                                           None)
    return accept, key


async def realtime_endpoint(ws: WebSocket) -> None:
    """The /v1/realtime endpoint."""
    rt = ws.app.state.runtime
    conn = RealtimeConnection(ws, rt)
    subprotocol, key = _offered_key(ws)
    await ws.accept(subprotocol=subprotocol)
    gauge = rt.metrics.streams(SURFACE)
    gauge.inc()
    outcome, code = "ok", None
    try:
        await _serve(conn, key)
        if ws.application_state == WebSocketState.CONNECTED and ws.client_state == WebSocketState.CONNECTED:
            await conn.fail(Fatal(CLOSE_GOING_AWAY, "session_ended", "the session was ended by the server"))
            outcome, code = "refused", "session_ended"
    except Fatal as err:
        logger.info("realtime session closed: %s", err.message)
        outcome = "refused" if err.close_code in (CLOSE_TRY_LATER, CLOSE_GOING_AWAY) else \
            ("error" if err.close_code == CLOSE_INTERNAL else "client_error")
        code = err.code
        await conn.fail(err)
    except WebSocketDisconnect:
        pass  # the client closed the session: its normal end
    except RuntimeError as exc:  # a send after the client vanished
        logger.info("realtime session ended: %s", exc)
        outcome = "cancelled"
    finally:
        gauge.dec()
        if conn.client is not None:
            conn.client.cancel()
            conn.rt.metrics.audio(SURFACE, conn.audio_seconds, conn.client.busy_ms / 1000)
            conn.client.close()
        rt.metrics.request(SURFACE, outcome, code)
        rt.live.discard(conn)
        if conn.silero is not None:
            rt.idle_vad_models.append(conn.silero)
        conn.done.set()


async def _serve(conn: RealtimeConnection, subprotocol_key: Optional[str]) -> None:
    ws, rt = conn.ws, conn.rt
    try:
        rt.check_key(ws.headers.get("authorization"), ws.query_params.get("api_key") or subprotocol_key)
        engine = rt.ready_engine()
        conn.client = rt.admit(f"realtime:{ws.client.host if ws.client else '?'}:{time.monotonic_ns()}", LIVE)
    except ApiError as err:
        raise Fatal(CLOSE_POLICY if err.status == 401 else CLOSE_TRY_LATER, err.code, err.message,
                    "invalid_request_error" if err.status == 401 else "server_error") from None
    create = functools.partial(engine.create_stream, work=conn.client.work)
    buffer = await rt.run(InputBuffer, conn.config, create, conn.vad_stream)
    has_aligner = engine.aligner_dir is not None
    rt.live.add(conn)
    await conn.send({"type": "session.created", "session": conn.config.describe(
        conn.session_id, beta=False, model_name=rt.settings.model_name)})
    receiver = asyncio.ensure_future(_receive(conn, has_aligner))
    try:
        await _process(conn, buffer)
    finally:
        receiver.cancel()


async def _receive(conn: RealtimeConnection, has_aligner: bool) -> None:
    """Read client events: audio converted and queued (with backpressure), settings checked and
    queued, errors in an event answered at once. A disconnect cancels the scheduler client."""
    ws = conn.ws
    try:
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(msg.get("code", 1000))
            if msg.get("text") is None:
                await conn.error("invalid_event", "binary messages are not part of the Realtime protocol; send audio "
                                 "as {\"type\": \"input_audio_buffer.append\", \"audio\": BASE64}")
                continue
            try:
                event = json.loads(msg["text"])
            except (json.JSONDecodeError, TypeError) as exc:
                await conn.error("invalid_json", f"an event is not valid JSON ({exc})")
                continue
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                await conn.error("invalid_event", "an event must be a JSON object with a string \"type\"")
                continue
            await _on_event(conn, event, has_aligner)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        conn.client.cancel()
        conn.queue.put_nowait(exc)


async def _on_event(conn: RealtimeConnection, event: dict, has_aligner: bool) -> None:
    kind, event_id = event["type"], event.get("event_id")
    if kind == "input_audio_buffer.append":
        audio = event.get("audio")
        try:
            if not isinstance(audio, str):
                raise ValueError("\"audio\" must be a base64 string")
            pcm = conn.converter.convert(base64.b64decode(audio, validate=True))
        except (ValueError, binascii.Error, AudioError) as exc:
            await conn.error("invalid_audio", f"input_audio_buffer.append: {exc}", param="audio", event_id=event_id)
            return
        if conn.first_audio is None:
            conn.first_audio = time.perf_counter()
        await _queue_audio(conn, pcm)
    elif kind in ("session.update", "transcription_session.update"):
        rt = conn.rt
        try:
            new = conn.config.update(event.get("session"), beta=kind != "session.update", has_aligner=has_aligner,
                                     model_name=rt.settings.model_name, strict_model=rt.settings.strict_model)
        except ConfigError as exc:
            await conn.error(exc.code, exc.message, param=exc.param, event_id=event_id)
            return
        if (new.format, new.rate) != (conn.config.format, conn.config.rate):
            await _queue_audio(conn, conn.converter.flush())
            conn.converter = new.converter()
        conn.config = new
        conn.queue.put_nowait(("config", new, kind))
    elif kind == "input_audio_buffer.commit":
        await _queue_audio(conn, conn.converter.flush())  # the resampler's last samples belong to the item
        conn.converter = conn.config.converter()
        conn.queue.put_nowait(("commit", event_id, time.perf_counter()))
    elif kind == "input_audio_buffer.clear":
        conn.converter = conn.config.converter()
        conn.queue.put_nowait(("clear", event_id))
    elif kind in CONVERSATION_EVENTS:
        await conn.error("unsupported_event", f"{kind} is not part of a transcription session; this server "
                         f"transcribes: {', '.join(CLIENT_EVENTS)}", event_id=event_id)
    else:
        await conn.error("unknown_event", f"unknown event type {kind[:60]!r}; accepted: {', '.join(CLIENT_EVENTS)}",
                         event_id=event_id)


async def _queue_audio(conn: RealtimeConnection, pcm: np.ndarray) -> None:
    if not pcm.size:
        return
    while conn.pending >= MAX_PENDING_SECONDS * SAMPLE_RATE:  # backpressure: stop reading the socket
        conn.room.clear()
        await conn.room.wait()
    conn.pending += pcm.shape[0]
    conn.audio_seconds += pcm.shape[0] / SAMPLE_RATE
    conn.queue.put_nowait(("audio", pcm))


async def _process(conn: RealtimeConnection, buffer: InputBuffer) -> None:
    """Run the queued events in order on the worker threads and send what they produce."""
    rt = conn.rt
    while True:
        item = await conn.queue.get()
        audio = []
        while isinstance(item, tuple) and item[0] == "audio":
            audio.append(item[1])
            item = None if conn.queue.empty() else conn.queue.get_nowait()
        try:
            if audio:
                pcm = np.concatenate(audio)
                t0 = time.perf_counter()
                events = await rt.run(buffer.append, pcm)
                conn.pending -= pcm.shape[0]
                conn.room.set()
                await _send_all(conn, events, t0)
            if item is None:
                continue
            if isinstance(item, BaseException):
                if isinstance(item, (Fatal, WebSocketDisconnect)):
                    raise item
                raise Fatal(CLOSE_INTERNAL, "internal_error", f"receiving failed: {item}", "server_error")
            if item is _STOP:
                await _send_all(conn, await rt.run(buffer.finish))
                await conn.ws.close(CLOSE_GOING_AWAY, reason="the server is shutting down")
                return
            kind = item[0]
            if kind == "config":
                await rt.run(buffer.configure, item[1])
                beta = item[2] != "session.update"
                await conn.send({"type": "transcription_session.updated" if beta else "session.updated",
                                 "session": item[1].describe(conn.session_id, beta=beta,
                                                             model_name=rt.settings.model_name)})
            elif kind == "commit":
                try:
                    events = await rt.run(buffer.commit)
                except BufferError as err:
                    await conn.error(err.code, err.message, event_id=item[1])
                    continue
                await _send_all(conn, events, item[2])
            elif kind == "clear":
                await _send_all(conn, await rt.run(buffer.clear))
        except Cancelled:  # the receiver cancelled the client: a disconnect, or an error to report
            while not conn.queue.empty():
                queued = conn.queue.get_nowait()
                if isinstance(queued, (Fatal, WebSocketDisconnect)):
                    raise queued from None
            return


async def _send_all(conn: RealtimeConnection, events: list, t0: Optional[float] = None) -> None:
    """Send the events of one buffer call; ``t0``: when the audio or the commit that may end an
    item arrived (the final latency runs from there to the completed event)."""
    metrics = conn.rt.metrics
    for event in events:
        if not conn.first_text_seen and event.get("delta") and conn.first_audio is not None:
            conn.first_text_seen = True
            metrics.first_text.labels(SURFACE).observe(time.perf_counter() - conn.first_audio)
        await conn.send(event)
        if t0 is not None and event["type"] == "conversation.item.input_audio_transcription.completed":
            metrics.final_latency.labels(SURFACE).observe(time.perf_counter() - t0)
