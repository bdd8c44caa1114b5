"""Wyoming framing: events read and written with size limits, and one connection's event loop.

An event is a JSON header line (``type``, ``data``, ``data_length``, ``payload_length``), then
``data_length`` bytes of additional JSON data, then ``payload_length`` bytes of payload.
``read_event`` bounds every part before allocating it; ``EventConnection`` reads events ahead
into a queue, hands them one at a time to its subclass (handler.WyomingHandler) and closes
the connection cleanly after a protocol error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Optional

try:
    from wyoming.error import Error
    from wyoming.event import Event, async_write_event
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(f"the Wyoming server needs the 'wyoming' package ({exc}); "
                      f"install the server extra: pip install '.[server]'") from None

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024  # longest JSON header line
MAX_DATA_BYTES = 1024 * 1024  # longest additional data block (data_length)
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024  # largest payload (payload_length): 4 MiB = 21 s of 48 kHz 16-bit stereo
BODY_TIMEOUT_S = 30.0  # an event's data and payload must arrive within this time of its header
IDLE_TIMEOUT_S = 30.0  # an open utterance with no event for this long is abandoned
QUEUE_EVENTS = 256  # events read ahead of the handler (then TCP backpressure)
# Bytes of event data and payload read ahead of the handler: beyond it the reader waits (TCP
# backpressure), so a client that sends audio faster than it is decoded holds at most this
# (and one event being read, MAX_PAYLOAD_BYTES) instead of QUEUE_EVENTS full payloads (1 GiB).
READ_AHEAD_BYTES = 8 * 1024 * 1024
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


def _event_bytes(event: Event) -> int:
    """The bytes an event holds beyond its header: its data and its payload."""
    return len(event.payload or b"") + sum(len(str(v)) for v in (event.data or {}).values())


class EventConnection:
    """One Wyoming connection: events are read ahead (bounded) into a queue and handed to
    ``handle`` one at a time; a protocol error or an idle open utterance is answered with an
    ``error`` event, then the connection is half-closed, drained and closed.

    Subclasses answer the events: ``handle`` (False closes the connection), ``busy`` (an
    utterance is open: events must keep coming, a stopping server waits for it), ``on_gone``
    (the client left or the connection broke; called at once, even while ``handle`` runs) and
    ``on_close`` (cleanup after the last event).
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        peer = writer.get_extra_info("peername")
        self.name = f"wyoming {peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "wyoming"
        self.stopping = False  # the server stops: close after the current utterance
        self.gone = False  # the client closed or the connection broke
        self.queue: asyncio.Queue = asyncio.Queue(QUEUE_EVENTS)
        self.queued_bytes = 0  # data and payload bytes of the events in the queue (READ_AHEAD_BYTES)
        self._room = asyncio.Event()  # set when queued_bytes drops

    @property
    def busy(self) -> bool:
        """An utterance is open (see the class docstring)."""
        return False

    async def handle(self, event: Event) -> bool:
        """Answer one event; False closes the connection."""
        raise NotImplementedError

    def on_gone(self) -> None:
        """The client closed or the connection broke (no more events will be read or sent)."""

    async def on_close(self) -> None:
        """The connection is closing: release what an open utterance holds."""

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
                if isinstance(item, tuple):  # (event, its bytes) from the reader
                    item, size = item
                    self.queued_bytes -= size
                    self._room.set()
                if item is None or not await self.handle(item) or self.gone:
                    break
                if self.stopping and not self.busy:
                    break
        except (ConnectionError, OSError) as exc:
            logger.info("%s: connection lost (%s)", self.name, exc)
        finally:
            reader.cancel()
            await self.on_close()
            with contextlib.suppress(Exception):
                self.writer.close()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _read_loop(self) -> None:
        """Reads events into the queue. At the end of the stream (the client left) it calls
        on_gone at once; a protocol error is queued after the events read before it."""
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
                size = _event_bytes(event)
                while self.queued_bytes and self.queued_bytes + size > READ_AHEAD_BYTES:
                    self._room.clear()
                    await self._room.wait()
                self.queued_bytes += size
                await self.queue.put((event, size))
        except (ConnectionError, OSError):
            pass
        self.gone = True
        self.on_gone()
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

    async def _send(self, event: Event) -> None:
        """Write one event; a broken connection marks the client gone (on_gone) instead of raising."""
        if self.gone:
            return
        try:
            await async_write_event(event, self.writer)
        except (ConnectionError, OSError):
            self.gone = True
            self.on_gone()
