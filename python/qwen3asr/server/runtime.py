"""The server's shared state: the engine (loaded in the background), the scheduler, the worker
threads that run blocking engine calls, the API-key check, and the live streams to drain on
shutdown. One Runtime per process, shared by the HTTP, WebSocket and Wyoming front ends."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import hmac
import logging
from typing import Callable, Optional

from .errors import ApiError
from .metrics import Metrics
from .scheduler import QueueFull, Scheduler, SchedulerClosed
from .settings import ServerSettings

logger = logging.getLogger(__name__)

EXTRA_THREADS = 4  # worker threads beyond one per admitted client (audio decoding, loading)


class Runtime:
    """Everything a request handler needs besides its own request.

    Args:
      engine: a loaded Qwen3ASREngine, or None with ``loader``.
      scheduler: the one Scheduler of this process (its max_clients sizes the thread pool).
      settings: ServerSettings.
      loader: called in a worker thread at startup to load the engine (``/health`` answers 503
        until it returns); an exception it raises is kept in ``load_error``.
    """

    def __init__(self, engine, scheduler: Scheduler, settings: ServerSettings,
                 loader: Optional[Callable[[], object]] = None):
        if engine is None and loader is None:
            raise ValueError("give a loaded engine or a loader")
        self.engine = engine
        self.scheduler = scheduler
        self.settings = settings
        self.loader = loader
        self.load_error: Optional[BaseException] = None
        self.draining = False
        # Every admitted client may hold a thread while it waits for its turn on the decoder.
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=scheduler.max_clients + EXTRA_THREADS,
                                                              thread_name_prefix="qwen3asr-worker")
        self.live: set = set()  # live connections (live.py, realtime) to finish on shutdown
        self.metrics = Metrics(self)
        # Silero VAD models no session uses now (realtime server_vad): reused, because loading one
        # per connection grows the process (ONNX Runtime sessions made and freed on many threads)
        self.idle_vad_models: list = []
        scheduler.observer = self.metrics.observe_turn
        self._loaded: Optional[asyncio.Event] = None
        self._closed = False

    # ------------------------------------------------------------------ loading
    def loaded_event(self) -> asyncio.Event:
        """Set once the engine is loaded or loading failed (create inside the server's loop)."""
        if self._loaded is None:
            self._loaded = asyncio.Event()
            if self.engine is not None:
                self._loaded.set()
        return self._loaded

    async def load(self) -> None:
        """Load the engine with the loader in a worker thread (no-op when already given)."""
        event = self.loaded_event()
        if self.engine is not None:
            return
        try:
            self.engine = await self.run(self.loader)
            logger.info("engine loaded: %s, backend %s", getattr(self.engine.bundle, "path", "?"),
                        self.engine.backend)
        except Exception as exc:  # reported by /health and by the CLI, which exits
            logger.error("loading the model failed: %s", exc)
            self.load_error = exc
        finally:
            event.set()

    def ready_engine(self):
        """The engine, or ApiError 503 while it loads (or after loading failed / during shutdown)."""
        if self.draining:
            raise self.shutting_down()
        if self.engine is None:
            if self.load_error is not None:
                raise ApiError(503, f"the model failed to load: {self.load_error}", code="model_unavailable")
            raise ApiError(503, "the model is still loading; retry shortly", code="model_loading",
                           retry_after=self.settings.retry_after)
        return self.engine

    # ------------------------------------------------------------------ requests
    async def run(self, fn, *args, **kwargs):
        """Run a blocking call in a worker thread and await its result."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    def shutting_down(self) -> ApiError:
        """The 503 of a request refused or stopped because the server is shutting down."""
        return ApiError(503, "the server is shutting down; retry on another server", code="shutting_down",
                        retry_after=self.settings.retry_after)

    def admit(self, name: str, kind: str):
        """A scheduler client, or ApiError 503 (busy, with Retry-After) at once."""
        try:
            return self.scheduler.admit(name, kind)
        except QueueFull as exc:
            raise ApiError(503, str(exc), code="server_busy", retry_after=max(exc.retry_after,
                                                                              self.settings.retry_after)) from None
        except SchedulerClosed as exc:
            raise ApiError(503, str(exc), code="shutting_down", retry_after=self.settings.retry_after) from None

    def check_key(self, authorization: Optional[str], query_key: Optional[str] = None) -> None:
        """ApiError 401 unless the API key (if one is set) is given as "Bearer KEY" (or query_key)."""
        key = self.settings.api_key
        if key is None:
            return
        given = None
        if authorization:
            scheme, _, value = authorization.partition(" ")
            if scheme.lower() != "bearer" or not value.strip():
                raise ApiError(401, "the Authorization header must be 'Bearer YOUR_API_KEY'", code="invalid_api_key")
            given = value.strip()
        elif query_key:
            given = query_key
        if given is None:
            raise ApiError(401, "this server needs an API key: send 'Authorization: Bearer YOUR_API_KEY'",
                           code="missing_api_key")
        if not hmac.compare_digest(given.encode(), key.encode()):
            raise ApiError(401, "incorrect API key", code="invalid_api_key")

    # ------------------------------------------------------------------ shutdown
    async def drain(self, timeout: float) -> None:
        """Finish every live stream (its final text is sent) within ``timeout`` seconds."""
        self.draining = True
        streams = list(self.live)
        if not streams:
            return
        logger.info("finishing %d live stream(s)", len(streams))
        for s in streams:
            s.request_finish("the server is shutting down")
        waits = [asyncio.ensure_future(s.done.wait()) for s in streams]
        done, pending = await asyncio.wait(waits, timeout=timeout)
        for w in pending:
            w.cancel()
        if pending:
            logger.warning("%d live stream(s) did not finish within %.0f s", len(pending), timeout)

    async def finish(self, grace: float) -> None:
        """Graceful shutdown: admit no new request (503, a Wyoming error), finish the live streams
        (each gets its final text), let admitted requests finish within ``grace`` seconds in all,
        then cancel what is still running (an upload then answers 503 shutting_down at its next
        token)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + grace
        self.scheduler.refuse_new()
        await self.drain(grace)  # (sets draining: new HTTP and WebSocket requests get 503 at once)
        idle = await loop.run_in_executor(None, self.scheduler.wait_idle, max(0.0, end - loop.time()))
        if not idle:
            n = self.scheduler.cancel_all()
            logger.warning("the grace period of %g s is over: cancelling %d request(s) still in progress", grace, n)

    def close(self) -> None:
        """Refuse new work, cancel what still waits, release the engine and the threads (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.draining = True
        self.scheduler.close()
        self.executor.shutdown(wait=True, cancel_futures=True)
        close = getattr(self.engine, "close", None)
        if callable(close):
            close()
