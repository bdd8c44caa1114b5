"""The ASGI application: OpenAI-compatible HTTP (transcriptions, alignments), the live WebSocket,
Realtime transcription sessions, the page, /health and /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Callable, Optional

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from .alignments import alignments
from .errors import ApiError
from .live import live_stream
from .openai_api import models, transcriptions
from .realtime import realtime_endpoint
from .runtime import Runtime
from .scheduler import Scheduler
from .settings import ServerSettings

logger = logging.getLogger(__name__)

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")


async def _api_error(request: Request, exc: ApiError) -> Response:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers())


async def _http_error(request: Request, exc) -> Response:
    status = getattr(exc, "status_code", 500)
    code = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
    err = ApiError(status, f"{request.method} {request.url.path}: {getattr(exc, 'detail', '')}", code=code)
    return JSONResponse(err.body(), status_code=status)


async def _internal_error(request: Request, exc: Exception) -> Response:
    logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    err = ApiError(500, f"internal error: {type(exc).__name__}: {exc}", code="internal_error")
    return JSONResponse(err.body(), status_code=500)


async def health(request: Request) -> Response:
    rt: Runtime = request.app.state.runtime
    if rt.engine is None or rt.draining:
        status = "error" if rt.load_error is not None else ("stopping" if rt.draining else "loading")
        body = {"status": status}
        if rt.load_error is not None:
            body["message"] = str(rt.load_error)
        return JSONResponse(body, status_code=503, headers={"Retry-After": str(rt.settings.retry_after)})
    s = rt.scheduler.stats()
    return JSONResponse({"status": "ok", "model": rt.settings.model_name, "backend": rt.engine.backend,
                         "active": s.active, "waiting": s.waiting, "admitted": s.admitted, "rejected": s.rejected,
                         "cancelled": s.cancelled, "units": s.units, "max_clients": rt.scheduler.max_clients})


async def metrics(request: Request) -> Response:
    rt: Runtime = request.app.state.runtime
    if rt.settings.metrics_auth:
        rt.check_key(request.headers.get("authorization"))
    body, content_type = rt.metrics.render()
    return Response(body, media_type=content_type.split(";")[0], headers={"Content-Type": content_type})


async def index(request: Request) -> Response:
    return FileResponse(os.path.join(STATIC_DIR, "index.html"), media_type="text/html")


def create_app(engine, scheduler: Scheduler, settings: ServerSettings = ServerSettings(), *,
               loader: Optional[Callable[[], object]] = None) -> Starlette:
    """The server's ASGI app over one engine and one scheduler.

    engine: a loaded Qwen3ASREngine, or None and ``loader`` (called in a worker thread at
      startup; /health answers 503 until it returns).
    The app's ``state.runtime`` (qwen3asr.server.runtime.Runtime) holds the shared state; whoever
    runs the app calls ``runtime.drain()`` before stopping and ``runtime.close()`` after (cli.py).
    """
    runtime = Runtime(engine, scheduler, settings, loader)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        load = asyncio.ensure_future(runtime.load())
        try:
            yield
        finally:
            runtime.draining = True
            if not load.done():
                load.cancel()

    app = Starlette(
        routes=[
            Route("/", index, methods=["GET"]),
            Route("/favicon.ico", lambda request: Response(status_code=204), methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),
            Route("/v1/audio/alignments", alignments, methods=["POST"]),
            WebSocketRoute("/v1/stream", live_stream),
            WebSocketRoute("/v1/realtime", realtime_endpoint),
            Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
        ],
        exception_handlers={ApiError: _api_error, 404: _http_error, 405: _http_error, Exception: _internal_error},
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    return app
