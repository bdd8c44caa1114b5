"""qwen3asr-serve: one process, one loaded engine, OpenAI-compatible HTTP + live WebSocket
(+ Wyoming with --wyoming). See docs/serving.md.

    qwen3asr-serve --model models/default --port 8000
    python -m qwen3asr.server --host 0.0.0.0 --api-key secret --wyoming tcp://0.0.0.0:10300
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys

from .. import checks
from ..cli.common import (ArgumentParser, add_engine_args, backend_options_from_args, engine_from_args, float_arg,
                          int_arg)

log = logging.getLogger("qwen3asr-serve")
# After Runtime.finish (the grace period), how long uvicorn waits for the last responses (the
# 503s of cancelled requests) before it cancels their tasks.
BACKSTOP_SECONDS = 5.0
MAX_PORT = 65535  # TCP ports are 16-bit (0: any free port)


def build_parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="qwen3asr-serve", description="Serve Qwen3-ASR: OpenAI-compatible HTTP "
                        "transcription, live captions over WebSocket with a browser page, and Wyoming.")
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s; "
                    "0.0.0.0 for all interfaces)")
    ap.add_argument("--port", type=int_arg, default=8000, help="HTTP port (default %(default)s)")
    add_engine_args(ap)
    ap.add_argument("--model-name", default=None, help="model id /v1/models lists (default qwen3-asr)")
    ap.add_argument("--strict-model", action="store_true",
                    help="refuse requests that name another model (400 model_not_found); by default any name "
                         "is served, so clients with a fixed name such as whisper-1 work")
    ap.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' (default: "
                    "$QWEN3ASR_API_KEY; none: open)")
    ap.add_argument("--metrics-auth", action="store_true",
                    help="/metrics needs the API key too (default: open to scrapers)")
    ap.add_argument("--max-upload-mb", type=float_arg, default=100.0, help="largest upload (default %(default)s MB)")
    ap.add_argument("--max-audio-seconds", type=float_arg, default=3600.0,
                    help="longest uploaded audio (default %(default)s s)")
    ap.add_argument("--max-clients", type=int_arg, default=64,
                    help="requests admitted at once (running or queued); more get 503 (default %(default)s)")
    ap.add_argument("--grace-seconds", type=float_arg, default=30.0,
                    help="on SIGTERM, time in-flight requests get to finish (default %(default)s s)")
    ap.add_argument("--wyoming", default=None, metavar="tcp://HOST:PORT",
                    help="also serve the Wyoming protocol (Home Assistant) at this URI")
    ap.add_argument("--zeroconf", action="store_true", help="advertise the Wyoming service over zeroconf")
    ap.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return ap


def _make_server(config, runtime, grace: float):
    """A uvicorn.Server whose shutdown stops accepting, then runs Runtime.finish (live streams
    get their final text, requests in flight get ``grace`` seconds, the rest is cancelled and
    answered 503), then lets uvicorn close the connections (its own timeout_graceful_shutdown
    is only a backstop). SIGTERM and SIGINT only ask it to stop: uvicorn's own handler
    re-raises the signal after shutdown, which would kill the process instead of letting it
    exit 0."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):
            previous = {s: signal.signal(s, self.handle_exit) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for s, h in previous.items():
                    signal.signal(s, h)

        async def shutdown(self, sockets=None):
            for server in self.servers:  # stop accepting first
                server.close()
            await runtime.finish(grace)
            await super().shutdown(sockets)

    return Server(config)


def _load_wyoming():
    """serve_wyoming, imported only with --wyoming; None and a printed reason when it is missing."""
    try:
        from .wyoming import serve_wyoming
    except ImportError as exc:
        missing = getattr(exc, "name", None) or ""
        if missing == "wyoming" or missing.startswith("wyoming."):
            print("error: --wyoming needs the wyoming package: pip install 'wyoming>=1.10,<1.11' "
                  "(or the server extra: pip install '.[server]')", file=sys.stderr)
        else:
            print(f"error: --wyoming is not available in this installation ({exc})", file=sys.stderr)
        return None
    return serve_wyoming


async def _serve(args, app, runtime, serve_wyoming) -> int:
    import uvicorn

    from .live import MAX_MESSAGE_BYTES

    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            timeout_graceful_shutdown=BACKSTOP_SECONDS, ws="websockets-sansio",
                            ws_max_size=MAX_MESSAGE_BYTES,
                            lifespan="on", access_log=False)
    server = _make_server(config, runtime, args.grace_seconds)
    http = asyncio.ensure_future(server.serve())
    stop = asyncio.Event()
    wyoming = None
    rc = 0
    loaded = runtime.loaded_event()
    waiter = asyncio.ensure_future(loaded.wait())
    await asyncio.wait({http, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if runtime.load_error is not None:
        print(f"error: cannot load the model: {runtime.load_error}", file=sys.stderr)
        server.should_exit = True
        rc = 2
    elif loaded.is_set() and serve_wyoming is not None and not http.done():
        wyoming = asyncio.ensure_future(serve_wyoming(args.wyoming, runtime.engine, runtime.scheduler, stop=stop,
                                                      zeroconf=args.zeroconf, metrics=runtime.metrics))
    waits = {http} | ({wyoming} if wyoming is not None else set())
    done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    if wyoming is not None and wyoming in done and not http.done():
        exc = wyoming.exception()
        print(f"error: the Wyoming server stopped: {exc}", file=sys.stderr)
        server.should_exit = True
        rc = 2
    await http
    waiter.cancel()
    if not server.started and rc == 0:
        rc = 2  # uvicorn could not bind (it logged why)
    stop.set()
    if wyoming is not None and not wyoming.done():
        try:
            await asyncio.wait_for(wyoming, args.grace_seconds + 5)
        except asyncio.TimeoutError:
            log.warning("the Wyoming server did not stop within the grace period")
        except Exception as exc:
            log.warning("the Wyoming server failed while stopping: %s", exc)
    await asyncio.get_running_loop().run_in_executor(None, runtime.close)
    return rc


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        from .app import create_app
        from .scheduler import Scheduler
        from .settings import DEFAULT_MODEL_NAME, ServerSettings
    except ImportError as exc:
        print(f"error: the server needs its extra dependencies ({exc}); pip install '.[server]'", file=sys.stderr)
        return 1
    serve_wyoming = None
    if args.wyoming:
        serve_wyoming = _load_wyoming()
        if serve_wyoming is None:
            return 2
    try:
        problem = checks.integer("--port", args.port, 0, MAX_PORT)
        if problem:
            raise ValueError(problem)
        settings = ServerSettings(api_key=args.api_key or os.environ.get("QWEN3ASR_API_KEY") or None,
                                  model_name=args.model_name or DEFAULT_MODEL_NAME,
                                  max_upload_mb=args.max_upload_mb, max_audio_seconds=args.max_audio_seconds,
                                  grace_seconds=args.grace_seconds, strict_model=args.strict_model,
                                  metrics_auth=args.metrics_auth)
        scheduler = Scheduler(args.max_clients)
        backend_options_from_args(args)  # the engine flags, before the server starts and the model loads
        if args.wyoming:
            from .wyoming.server import check_uri

            check_uri(args.wyoming)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def load():
        return engine_from_args(args)

    app = create_app(None, scheduler, settings, loader=load)
    return asyncio.run(_serve(args, app, app.state.runtime, serve_wyoming))


if __name__ == "__main__":
    sys.exit(main())
