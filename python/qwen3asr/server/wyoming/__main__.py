"""qwen3asr-wyoming: the Wyoming speech-to-text server for Home Assistant, alone in its process
(``python -m qwen3asr.server.wyoming`` runs the same).

    qwen3asr-wyoming --uri tcp://0.0.0.0:10300 --model models/default --zeroconf

It loads the engine, makes the scheduler, and serves (server.serve) until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

from .server import DEFAULT_URI, check_uri, serve
from .utterance import FINALS, WyomingOptions


def build_parser() -> argparse.ArgumentParser:
    from ...cli.common import ArgumentParser, add_engine_args, float_arg, int_arg

    ap = ArgumentParser(prog="qwen3asr-wyoming",
                        description="Wyoming speech-to-text server for Home Assistant (Qwen3-ASR).")
    ap.add_argument("--uri", default=DEFAULT_URI,
                    help="where to listen: tcp://HOST:PORT or unix://PATH (default %(default)s; "
                         "tcp://0.0.0.0:10300 to accept other machines, such as Home Assistant's)")
    add_engine_args(ap)
    ap.add_argument("--max-clients", type=int_arg, default=16, help="utterances admitted at once (default %(default)s)")
    ap.add_argument("--chunk-size", type=float_arg, default=WyomingOptions.chunk_size,
                    help="stream chunk in seconds (default %(default)s)")
    ap.add_argument("--final", choices=FINALS, default=WyomingOptions.final,
                    help="final transcript: one pass over each finished piece of the utterance (pieces), one "
                         "pass over the whole utterance (one-pass), or the streamed text (stream); the one-pass "
                         "kinds where the audio fits the model's one-pass limit (default %(default)s; "
                         "docs/wyoming.md)")
    ap.add_argument("--early-final", action=argparse.BooleanOptionalAction, default=WyomingOptions.early_final,
                    help="with --final pieces, run the final pass once this server's VAD hears the speech end, "
                         "before audio-stop (default: %(default)s; docs/wyoming.md)")
    ap.add_argument("--zeroconf", action="store_true", help="advertise the server for Home Assistant discovery "
                                                            "(needs: pip install zeroconf)")
    ap.add_argument("-v", "--verbose", action="store_true", help="log each request")
    return ap


async def _main_async(args) -> None:
    from ...cli.common import engine_from_args
    from ..scheduler import Scheduler

    options = WyomingOptions(chunk_size=args.chunk_size, final=args.final, early_final=args.early_final)
    check_uri(args.uri)  # the flags before the model loads
    scheduler = Scheduler(max_clients=args.max_clients)
    engine = engine_from_args(args)  # checks the engine flags before it loads
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
    logging.getLogger(__package__).setLevel(logging.INFO)  # this package logs the listening address always
    try:
        asyncio.run(_main_async(args))
    except (ValueError, RuntimeError, OSError, ImportError) as exc:
        print(f"qwen3asr-wyoming: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
