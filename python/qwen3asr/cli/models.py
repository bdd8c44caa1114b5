"""qwen3asr-models: the models fetched by name, and the board conversion.

    qwen3asr-models list                 cached models: name, source, revision, size, path
    qwen3asr-models list --known         the names qwen3asr knows (0.6b, 1.7b, aligner)
    qwen3asr-models pull 0.6b            fetch (and convert) now; a branch is looked up again
    qwen3asr-models convert 0.6b aligner --target rk3588   a board bundle and tarball, on a PC
    qwen3asr-models verify [NAME ...]    re-check every cached file's SHA-256 (exit 1: a mismatch)
    qwen3asr-models rm NAME ...          delete cached bundles of NAME

Exit status: 0 done, 1 verify found damaged files, 2 an error (one line on stderr), 3 convert
finished without a step whose toolkit is missing (named on stderr).
"""

from __future__ import annotations

import argparse
import logging
import reprlib
import sys

from .. import checks
from .common import ArgumentParser

MAX_ERROR_CHARS = 1000  # an error line quotes at most this much of what it names (a path given may be huge)

EXIT_BAD_FILES, EXIT_ERROR, EXIT_TOOLKIT_MISSING = 1, 2, 3


def build_parser() -> argparse.ArgumentParser:
    from ..backends import MEMORY_PROFILES
    from qwen3asr_tools.board_convert import TARGETS

    ap = ArgumentParser(prog="qwen3asr-models", description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress bars, errors only")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="cached models")
    p.add_argument("--known", action="store_true", help="the short names and the repos they stand for")
    p = sub.add_parser("pull", help="fetch (and convert) models now")
    p.add_argument("names", nargs="+", help="hub ids (Org/Name[@revision]) or known names")
    p.add_argument("--memory", default="default", choices=MEMORY_PROFILES, help="the conversion's memory profile")
    p.add_argument("--soc", default=None, choices=TARGETS,
                   help="a published bundle: fetch this SoC's Rockchip files (default: this board's, none on a PC)")
    p = sub.add_parser("convert", help="a board bundle (RKNN encoder, RKLLM decoder) and its tarball, on an x86 PC")
    p.add_argument("names", nargs="+", help="official checkpoints: hub ids or known names (e.g. 0.6b aligner)")
    p.add_argument("--target", required=True, choices=TARGETS, help="the board's SoC")
    p.add_argument("--out", default=None, help="output directory (default ./qwen3asr-TARGET; the tarball beside it)")
    p.add_argument("--rknn-python", default=None,
                   help="python of the rknn-toolkit2 venv (default $QWEN3ASR_RKNN_PYTHON, else the checkout's "
                        ".venv-rknn)")
    p.add_argument("--rkllm-python", default=None,
                   help="python with rkllm-toolkit (default $QWEN3ASR_RKLLM_PYTHON, else this one if it imports it)")
    p.add_argument("--calib-audio", nargs="+", default=(), metavar="FILE",
                   help="calibration audio for the RKLLM quantisation (ASR models)")
    p.add_argument("--rknn-args", default="", help="extra onnx2rknn flags, e.g. \"--sizes 2,4 --shapes fixed\"")
    p.add_argument("--no-tar", action="store_true", help="no tarball")
    p = sub.add_parser("verify", help="re-check the SHA-256 of every cached file")
    p.add_argument("names", nargs="*", help="only these models (default: all)")
    p = sub.add_parser("rm", help="delete cached models")
    p.add_argument("names", nargs="+", help="hub ids or known names (@revision: only that revision's bundles)")
    return ap


def _entries_of(name: str):
    from ..hub import cache
    from ..hub.names import DEFAULT_REVISION, parse

    ref = parse(name)
    found = cache.entries(ref.repo)
    if "@" in name and ref.revision != DEFAULT_REVISION:
        commit = cache.read_ref(ref.repo, ref.revision)
        found = [e for e in found if e.commit == commit or e.revision == ref.revision]
    return found


def _list(args) -> int:
    from ..hub import cache
    from ..hub.names import KNOWN_MODELS

    if args.known:
        for m in KNOWN_MODELS:
            print(f"{', '.join(m.aliases):40s} {m.repo:32s} {m.about}")
        return 0
    rows = cache.entries()
    if not rows:
        print(f"no models in {cache.cache_root()}; fetch one with: qwen3asr-models pull 0.6b")
        return 0
    print(f"{'MODEL':40s} {'SOURCE':9s} {'COMMIT':12s} {'VARIANT':16s} {'SIZE':>9s}  PATH")
    for e in rows:
        name = e.repo if e.revision == "main" else f"{e.repo}@{e.revision}"
        print(f"{name:40s} {e.source:9s} {e.commit[:12]:12s} {e.variant:16s} {e.size_bytes / 1e6:7.0f}MB  {e.path}")
    return 0


def _verify(args) -> int:
    from ..hub import cache
    from ..hub.names import HubError

    rows = [e for n in args.names for e in _entries_of(n)] if args.names else cache.entries()
    if args.names and not rows:
        raise HubError(f"no cached bundle of {', '.join(args.names)}: qwen3asr-models list shows what is cached")
    status = 0
    for e in rows:
        bad = cache.verify_entry(e)
        print(f"{'ok ' if not bad else 'BAD'} {e.repo}@{e.commit[:12]} {e.variant}" +
              (f": {len(bad)} damaged ({', '.join(bad[:3])}); qwen3asr-models rm {e.repo} and pull it again"
               if bad else ""))
        status = status or (EXIT_BAD_FILES if bad else 0)
    return status


def _rm(args) -> int:
    from ..hub import cache
    from ..hub.names import HubError

    for name in args.names:
        rows = _entries_of(name)
        if not rows:
            raise HubError(f"no cached bundle of {name}: qwen3asr-models list shows what is cached")
        for e in rows:
            cache.remove(e)
            print(f"removed {e.path} ({e.size_bytes / 1e6:.0f} MB)")
    return 0


def run(args) -> int:
    from ..hub.names import parse
    from ..hub.resolve import pull

    if args.command == "list":
        return _list(args)
    if args.command == "verify":
        return _verify(args)
    if args.command == "rm":
        return _rm(args)
    progress = False if args.quiet else None
    if args.command == "pull":
        for name in args.names:
            entry = pull(parse(name), memory=args.memory, soc=args.soc, progress=progress, refresh=True)
            print(entry.path)
        return 0
    from qwen3asr_tools.board_convert import convert_for_board

    result = convert_for_board(args.names, args.target, args.out, rknn_py=args.rknn_python,
                               rkllm_py=args.rkllm_python, calib_audio=args.calib_audio,
                               rknn_args=args.rknn_args.split(), tarball=not args.no_tar, progress=progress)
    for m in result.models:
        print(m.path)
    if result.tarball:
        print(result.tarball)
    for line in result.missing:
        print(f"not done: {line}", file=sys.stderr)
    return EXIT_TOOLKIT_MISSING if result.missing else 0


def main(argv=None) -> int:
    from ..hub.names import HubError

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(message)s")
    try:
        for flag in ("out", "rknn_python", "rkllm_python"):  # checked before any work, named in the error
            problem = checks.path("--" + flag.replace("_", "-"), getattr(args, flag, None), optional=True)
            if problem:
                raise ValueError(problem)
        return run(args)
    except (HubError, OSError, ValueError, RuntimeError) as exc:  # BundleError, RknnModelError: RuntimeError
        print(f"error: {reprlib.Repr(maxstring=MAX_ERROR_CHARS).repr(str(exc))[1:-1]}"
              if len(str(exc)) > MAX_ERROR_CHARS else f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted: nothing half-written is kept; run the command again", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
