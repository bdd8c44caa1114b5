"""One decoder, many clients: fair turns at the granularity of units of model work.

Every request (an uploaded file, a live stream, a Wyoming utterance) is a :class:`Client` of
the :class:`Scheduler`. The engine runs a request as units of model work (one pass, or one
chunk: see qwen3asr.work) and asks the client's gate for a turn before each unit. One unit
runs at a time. When the turn is free it goes to a waiting live client first (streams and
voice commands, where a person waits for each chunk), else to a bulk client (file uploads);
within a class the client served longest ago goes first, so clients take turns chunk by
chunk and a one-hour upload never starves a live caption nor another upload.

Admission is bounded: :meth:`Scheduler.admit` raises :class:`QueueFull` at once when
``max_clients`` requests are already admitted (the server answers 503 with Retry-After).
:meth:`Client.cancel` (its client disconnected) makes a waiting turn raise
``qwen3asr.work.Cancelled`` and stops a running unit at its next generated token.
:meth:`Scheduler.refuse_new`, :meth:`wait_idle` and :meth:`cancel_all` make a graceful shutdown
(admit no more, let the admitted finish for a while, then stop the rest);
:meth:`Scheduler.close` refuses new clients and cancels waiting ones. A client's
``work.newer`` is set once its ``ending`` event is (the server sets it when a live stream's end
is queued) and while another client waits for a turn: optional work (previews) yields.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import threading
import time
from typing import Iterator, Optional

from .. import checks
from ..work import Cancelled, Work

logger = logging.getLogger(__name__)

LIVE, BULK = "live", "bulk"
# Most requests admitted at once: each may hold a worker thread (server.runtime) and a socket, and
# 1024 is the default limit of open files per process (ulimit -n).
MAX_CLIENTS = 1024
CLASSES = (LIVE, BULK)  # in order of precedence


class QueueFull(RuntimeError):
    """No room for another request now; try again later (``retry_after`` seconds is a hint)."""

    def __init__(self, message: str, retry_after: int = 1):
        super().__init__(message)
        self.retry_after = retry_after


class SchedulerClosed(RuntimeError):
    """The scheduler is shutting down and admits no new request."""


@dataclasses.dataclass(frozen=True)
class SchedulerStats:
    admitted: int  # requests admitted so far
    rejected: int  # admissions refused with QueueFull
    cancelled: int  # clients cancelled
    active: int  # clients admitted and not yet closed
    waiting: int  # clients waiting for a turn now
    units: int  # units of model work run
    busy_ms: float  # time a unit held the turn (ms)


class Client:
    """One admitted request. Use ``client.work`` with the engine; ``close()`` when done
    (or use it as a context manager)."""

    def __init__(self, scheduler: "Scheduler", name: str, kind: str, seq: int):
        self.name = name
        self.kind = kind
        self.seq = seq  # admission order
        self.last_served = float("-inf")  # perf_counter() when its last unit ended (never: first)
        self.units = 0  # units run
        self.wait_ms = 0.0  # total time spent waiting for turns
        self.busy_ms = 0.0  # total time its units held the turn
        self._scheduler = scheduler
        self._cancel = threading.Event()
        self._closed = False
        # set by the server once a live stream's end is queued: its final pass comes next
        self.ending = threading.Event()
        self.work = Work(gate=self._turn, cancel=self._cancel, newer=_Newer(self))

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        """Stop this request: a waiting turn raises Cancelled, a running unit stops at its next token."""
        if not self._cancel.is_set():
            self._cancel.set()
            self._scheduler._on_cancel(self)

    def close(self) -> None:
        """Release the admission slot (idempotent)."""
        if not self._closed:
            self._closed = True
            self._scheduler._release(self)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _turn(self):
        return self._scheduler._turn(self)

    def __repr__(self) -> str:
        return f"Client({self.name!r}, {self.kind}, seq={self.seq})"


class _Newer:
    """Set once a client's stream end is queued or while another client waits for a turn: its
    optional work (a stream's previews, qwen3asr.work.Work.newer) gives way."""

    def __init__(self, client: Client):
        self.client = client

    def is_set(self) -> bool:
        return self.client.ending.is_set() or any(
            c is not self.client for c in list(self.client._scheduler._waiting))


class Scheduler:
    """Fair turns on one decoder for admitted clients (see the module docstring).

    Args:
      max_clients: requests admitted at once (running or waiting); more raise QueueFull.

    ``observer``, when set, is called as observer(kind, wait_seconds) after each turn was granted
    (the server's metrics), outside the scheduler's lock.
    """

    def __init__(self, max_clients: int = 64):
        problem = checks.integer("max_clients", max_clients, 1, MAX_CLIENTS)
        if problem:
            raise ValueError(problem)
        self.max_clients = max_clients
        self._cond = threading.Condition()
        self._active: set[Client] = set()
        self._waiting: list[Client] = []
        self._holder: Optional[Client] = None
        self._seq = itertools.count()
        self._closed = False
        self._admitted = self._rejected = self._cancelled = self._units = 0
        self._busy_ms = 0.0
        self.observer = None

    # ---------------------------------------------------------------- admission
    def admit(self, name: str = "", kind: str = BULK) -> Client:
        """A new client of class ``kind`` ("live" or "bulk"); QueueFull when full, SchedulerClosed after close()."""
        if kind not in CLASSES:
            raise ValueError(f"kind must be one of {', '.join(CLASSES)}, got {kind!r}")
        with self._cond:
            if self._closed:
                raise SchedulerClosed("the server is shutting down")
            if len(self._active) >= self.max_clients:
                self._rejected += 1
                raise QueueFull(f"the server is busy: {len(self._active)} requests in progress "
                                f"(limit {self.max_clients}); retry later")
            client = Client(self, name, kind, next(self._seq))
            self._active.add(client)
            self._admitted += 1
            return client

    @contextlib.contextmanager
    def client(self, name: str = "", kind: str = BULK) -> Iterator[Client]:
        """``admit`` as a context manager that closes the client at the end."""
        c = self.admit(name, kind)
        try:
            yield c
        finally:
            c.close()

    def refuse_new(self) -> None:
        """Admit no more clients (SchedulerClosed); the admitted ones go on."""
        with self._cond:
            self._closed = True

    def wait_idle(self, timeout: Optional[float] = None) -> bool:
        """Block until no client is admitted (True) or ``timeout`` seconds passed (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._active, timeout)

    def cancel_all(self) -> int:
        """Cancel every admitted client, waiting or running; returns how many there were."""
        with self._cond:
            clients = list(self._active)
        for c in clients:
            c.cancel()
        return len(clients)

    def close(self) -> None:
        """Admit no more clients and cancel those waiting for a turn (running units finish)."""
        with self._cond:
            self._closed = True
            waiting = list(self._waiting)
        for c in waiting:
            c.cancel()

    def stats(self) -> SchedulerStats:
        with self._cond:
            return SchedulerStats(self._admitted, self._rejected, self._cancelled, len(self._active),
                                  len(self._waiting), self._units, self._busy_ms)

    @property
    def active(self) -> int:
        with self._cond:
            return len(self._active)

    # ---------------------------------------------------------------- turns
    def _next(self) -> Optional[Client]:
        """The waiting client that gets the free turn (under the lock)."""
        if not self._waiting:
            return None
        return min(self._waiting, key=lambda c: (CLASSES.index(c.kind), c.last_served, c.seq))

    @contextlib.contextmanager
    def _turn(self, client: Client) -> Iterator[None]:
        t0 = time.perf_counter()
        with self._cond:
            if client._closed:
                raise RuntimeError(f"{client!r} was closed; admit a new client")
            self._waiting.append(client)
            try:
                while not client.cancelled and (self._holder is not None or self._next() is not client):
                    self._cond.wait()
            finally:
                self._waiting.remove(client)
                if client.cancelled:
                    self._cond.notify_all()  # the next in line may be able to go now
            if client.cancelled:
                raise Cancelled("the request was cancelled while waiting for its turn")
            self._holder = client
        start = time.perf_counter()
        client.wait_ms += (start - t0) * 1000
        if self.observer is not None:
            self.observer(client.kind, start - t0)
        try:
            yield
        finally:
            end = time.perf_counter()
            with self._cond:
                self._holder = None
                client.last_served = end
                client.units += 1
                client.busy_ms += (end - start) * 1000
                self._units += 1
                self._busy_ms += (end - start) * 1000
                self._cond.notify_all()

    def _on_cancel(self, client: Client) -> None:
        with self._cond:
            self._cancelled += 1
            self._cond.notify_all()

    def _release(self, client: Client) -> None:
        with self._cond:
            self._active.discard(client)
            self._cond.notify_all()


__all__ = ["BULK", "CLASSES", "Client", "LIVE", "QueueFull", "Scheduler", "SchedulerClosed", "SchedulerStats"]
