"""Serving Wyoming: the listening socket (tcp:// or unix://), one WyomingHandler per
connection, a graceful stop, and the zeroconf advertisement Home Assistant discovers.

``serve_wyoming`` is what ``qwen3asr-serve --wyoming URI`` runs next to the HTTP server (same
engine, same scheduler); the ``qwen3asr-wyoming`` program (``__main__``) runs ``serve`` alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Dict
from urllib.parse import urlparse

from ...checks import show
from .handler import WyomingHandler
from .protocol import MAX_LINE_BYTES
from .utterance import WyomingOptions

logger = logging.getLogger(__name__)

DEFAULT_URI = "tcp://127.0.0.1:10300"
STOP_GRACE_S = 10.0  # on stop, utterances in progress get this long to finish


async def serve_wyoming(uri: str, engine, scheduler, *, stop: asyncio.Event | None = None, zeroconf: bool = False,
                        ready: asyncio.Event | None = None, metrics=None) -> None:
    """Serve Wyoming on ``uri`` (tcp://HOST:PORT or unix://PATH) until ``stop`` is set or the task is cancelled.

    ``engine`` is a loaded Qwen3ASREngine, ``scheduler`` the process's Scheduler (each
    utterance is one "live" client). ``ready`` is set once listening (the bound address is
    logged; port 0 picks a free one). On ``stop``: no new connections; idle ones are closed,
    utterances in progress get STOP_GRACE_S to finish, then are cancelled. ``zeroconf``
    advertises a tcp:// server for Home Assistant discovery (needs ``pip install zeroconf``).
    Installs no signal handlers. Settings are the WyomingOptions defaults (see ``serve``).
    ``metrics``: the combined server's qwen3asr.server.metrics.Metrics (surface "wyoming").
    """
    await serve(uri, engine, scheduler, WyomingOptions(), stop=stop, zeroconf=zeroconf, ready=ready, metrics=metrics)


async def serve(uri: str, engine, scheduler, options: WyomingOptions, *, stop: asyncio.Event | None = None,
                zeroconf: bool = False, ready: asyncio.Event | None = None, metrics=None) -> None:
    """``serve_wyoming`` with explicit WyomingOptions."""
    parsed = check_uri(uri)
    handlers: Dict[asyncio.Task, WyomingHandler] = {}
    # Engine calls block while they wait for a scheduler turn: they get threads of their own (one
    # per admissible client), so they never starve the loop's default executor (name lookups,
    # the HTTP server's work in the combined server).
    executor = ThreadPoolExecutor(max_workers=scheduler.max_clients, thread_name_prefix="wyoming")

    def on_connect(reader, writer):
        handler = WyomingHandler(reader, writer, engine, scheduler, options, executor, metrics)
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
            raise ValueError(f"a tcp:// URI needs a host and a port (0-65535), e.g. {DEFAULT_URI} (got {show(uri)})")
    elif parsed.scheme == "unix":
        if not parsed.path:
            raise ValueError(f"a unix:// URI needs a socket path, e.g. unix:///run/qwen3asr.sock (got {show(uri)})")
    else:
        raise ValueError(f"Wyoming URI must be tcp://HOST:PORT or unix://PATH, got {show(uri)}")
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
