#!/usr/bin/env python3
"""Our ONNX Runtime CPU path against the ggml ports of Qwen3-ASR (CrispASR, llama.cpp), each in
fresh processes, interleaved round by round, on the same random weights, clip and token count.

    python scripts/bench_peers.py --preset 0.6b --rounds 10 --tokens 32 --threads 2 --json build/peers.json
    python scripts/bench_peers.py --preset 0.6b --ours-args "" --ours-args "--memory lean"   # two rows of ours

The peers are installed from the package registries into ``--work`` (default
``~/.cache/qwen3asr-peers``; never into the project's venv) and the checkpoint is converted for
each on the first run (qwen3asr_tools.peer_setup: the ``crispasr`` wheel with our own writer of its
GGUF layout, qwen3asr_tools.crispasr_gguf; llama.cpp built from the ``llama-cpp-python`` sdist,
its own converter and quantiser). The model is the random-weight checkpoint of ``--preset`` and
our bundle exported from it, as scripts/bench.py builds them (``bench.ensure_model``).

Each round starts every runtime once, in a new process, in an order that rotates from round to
round; ``--warmup`` rounds come first and are not counted. A process loads the model and
transcribes the clip ``--calls`` times (llama.cpp's CLI: once), always ``--tokens`` decoded
tokens with the end of sequence ignored (qwen3asr_tools.peer_runs says how each side does it).
Per process: the stage figures (of the second call where there is one), the first ("cold") and
second ("warm") call, the whole process's wall time (start to exit: interpreter, imports, load,
calls) and its peak RSS (``wait4`` of the child). Printed: the median (min-max) of each over the
counted rounds, and per ours row and peer the median (min-max) of the per-round ratio ours / peer
(each round's two processes ran back to back, so the ratio cancels most of the machine's drift).

llama.cpp makes 52 audio rows from 48000 samples where the official model makes 39 (its mel
framing pads differently), so it gets the first ``--llama-samples`` (47840) samples of the clip,
which give it the same 39 rows.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import wave
from typing import Callable, Optional, Sequence

import numpy as np

from . import child_env
from .peer_runs import ProcessReport, parse_llama_log, report_from_stdout
from .peer_setup import env_with_site

log = logging.getLogger("bench_peers")

PEERS = ("crispasr", "llama.cpp")
LLAMA_SAMPLES = 47840  # llama.cpp's framing of these samples gives the official model's 39 rows for 3 s
SETTLE_S = 0.5  # idle between two processes
# ggml's AMX matmul (built in by -march=native where the CPU has AMX) crashed llama-mtmd-cli in its
# warm-up on the Xeon of docs/benchmarks.md; --no-repack keeps weights in plain ggml buffers
# (no AMX, no CPU repacking), as CrispASR's wheel runs them
LLAMA_EXTRA = ("--no-repack",)
# (key, header, format); rates from the warm call where the process made one
METRICS = (("encoder_ms", "mel+enc ms", ".0f"), ("prefill_tok_s", "prefill tok/s", ".0f"),
           ("decode_tok_s", "decode tok/s", ".1f"), ("warm_ms", "warm call ms", ".0f"),
           ("cold_ms", "cold call ms", ".0f"), ("process_s", "process s", ".2f"),
           ("peak_rss_mb", "peak RSS MB", ".0f"))


@dataclasses.dataclass(frozen=True)
class Runtime:
    """One row: a command that runs one process of one runtime."""

    name: str
    kind: str  # "ours", "crispasr" or "llama.cpp"
    argv: tuple
    env: Optional[dict] = None  # None: the parent's environment


@dataclasses.dataclass(frozen=True)
class Measure:
    """One process of one runtime."""

    runtime: str
    round: int  # 0-based, warm-up rounds included
    process_s: float
    peak_rss_mb: float
    report: ProcessReport


def metrics(m: Measure) -> dict:
    """The METRICS of one process (None where the runtime gives no figure)."""
    calls = m.report.calls
    cold = calls[0]
    warm = calls[1] if len(calls) > 1 else None
    c = warm or cold

    def rate(n, ms):
        return None if n is None or not ms else n / ms * 1000

    return {"encoder_ms": c.encoder_ms, "prefill_tok_s": rate(c.prompt_tokens, c.prefill_ms),
            "decode_tok_s": rate(c.decode_tokens, c.decode_ms), "warm_ms": warm.call_ms if warm else None,
            "cold_ms": cold.call_ms, "process_s": m.process_s, "peak_rss_mb": m.peak_rss_mb}


def spread(values: Sequence[Optional[float]]) -> Optional[tuple]:
    """(median, min, max) of the values that are not None; None if there are none."""
    v = [x for x in values if x is not None]
    return (statistics.median(v), min(v), max(v)) if v else None


def _cell(s: Optional[tuple], fmt: str) -> str:
    return "-" if s is None else f"{s[0]:{fmt}} ({s[1]:{fmt}}-{s[2]:{fmt}})"


def summarize(measures: Sequence[Measure], names: Sequence[str], warmup: int) -> dict:
    """name -> metric -> (median, min, max) over the counted rounds."""
    out = {}
    for name in names:
        ms = [metrics(m) for m in measures if m.runtime == name and m.round >= warmup]
        out[name] = {k: spread([x[k] for x in ms]) for k, _, _ in METRICS}
    return out


def round_ratios(measures: Sequence[Measure], ours: str, peer: str, warmup: int) -> dict:
    """metric -> (median, min, max) of ours / peer, one ratio per counted round."""
    by_round: dict = {}
    for m in measures:
        if m.round >= warmup and m.runtime in (ours, peer):
            by_round.setdefault(m.round, {})[m.runtime] = metrics(m)
    out = {}
    for k, _, _ in METRICS:
        r = [pair[ours][k] / pair[peer][k] for pair in by_round.values()
             if len(pair) == 2 and pair[ours][k] is not None and pair[peer][k]]
        out[k] = spread(r)
    return out


def format_medians(summary: dict, tokens: dict) -> str:
    head = "| runtime | " + " | ".join(h for _, h, _ in METRICS) + " | tokens (prompt + decoded) |"
    lines = [head, "|" + "---|" * (len(METRICS) + 2)]
    for name, s in summary.items():
        cells = [_cell(s[k], fmt) for k, _, fmt in METRICS]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {tokens.get(name, '-')} |")
    return "\n".join(lines)


def format_ratios(ratios: dict) -> str:
    """ratios: (ours, peer) -> round_ratios(...)."""
    head = "| ours / peer | " + " | ".join(h for _, h, _ in METRICS) + " |"
    lines = [head, "|" + "---|" * (len(METRICS) + 1)]
    for (ours, peer), r in ratios.items():
        lines.append(f"| {ours} / {peer} | " + " | ".join(_cell(r[k], ".2f") for k, _, _ in METRICS) + " |")
    return "\n".join(lines)


def token_counts(measures: Sequence[Measure]) -> dict:
    """name -> 'P + D' of the last call of its last process (the same in every process)."""
    out = {}
    for m in measures:
        c = m.report.calls[-1]
        out[m.runtime] = f"{c.prompt_tokens if c.prompt_tokens is not None else '?'} + " \
                         f"{c.decode_tokens if c.decode_tokens is not None else '?'}"
    return out


# ----------------------------------------------------------------------------- processes
# Started by run_child, it starts the measured command and writes its wall time, ru_maxrss and
# wait status to the file descriptor it is given. A child's ru_maxrss includes the memory map it
# had before exec: a child forked (or vforked) straight from a large parent (a test runner of
# 1.8 GB) reports the parent's size. This helper is a bare interpreter (-I -S: about 10 MB), so the
# commands it spawns start from that.
_SPAWN_HELPER = """
import json, os, sys, time
fd, argv = int(sys.argv[1]), sys.argv[2:]
os.set_inheritable(fd, False)  # the report's file is not the command's
t0 = time.perf_counter()
try:
    pid = os.posix_spawnp(argv[0], argv, os.environ)
except OSError as exc:
    os.write(fd, json.dumps({"error": f"cannot start {argv[0]}: {exc}"}).encode())
    sys.exit(0)
_, status, usage = os.wait4(pid, 0)
os.write(fd, json.dumps({"wall": time.perf_counter() - t0, "maxrss_kb": usage.ru_maxrss,
                         "status": status}).encode())
"""


def interleaved(items: Sequence, rounds: int, warmup: int):
    """(round index, tag, item) for every item once per round, ``warmup`` uncounted rounds
    ("warm-up") first, the order rotating from round to round (so no item always runs after the
    same one); SETTLE_S of idle after each."""
    n = len(items)
    for i in range(warmup + rounds):
        tag = "warm-up" if i < warmup else f"round {i - warmup + 1}/{rounds}"
        for j in range(n):
            yield i, tag, items[(i + j) % n]
            time.sleep(SETTLE_S)


def run_child(argv: Sequence[str], env: dict) -> tuple[float, float, int, str, str]:
    """(wall s from spawn to exit, peak RSS MB from ``wait4``, exit code, stdout, stderr) of one
    process, started through a small helper process (_SPAWN_HELPER: the peak is the command's
    own, whatever the caller's size); its output goes to temporary files, so a chatty child never
    blocks on a full pipe. OSError when the command cannot be started."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, \
            tempfile.TemporaryFile("w+b") as rep:
        p = subprocess.run([sys.executable, "-I", "-S", "-c", _SPAWN_HELPER, str(rep.fileno()), *argv], stdout=out,
                           stderr=err, stdin=subprocess.DEVNULL, env=env, text=True, pass_fds=(rep.fileno(),))
        for f in (out, err, rep):
            f.seek(0)
        stdout, stderr, report = out.read(), err.read(), rep.read()
    try:
        got = json.loads(report)
    except ValueError:
        raise OSError(f"the process helper of {argv[0]} exited with {p.returncode} and no report: "
                      f"...{stderr[-500:]}") from None
    if "error" in got:
        raise OSError(got["error"])
    return got["wall"], got["maxrss_kb"] / 1024, os.waitstatus_to_exitcode(got["status"]), stdout, stderr


def run_process(rt: Runtime, tokens: int) -> tuple[float, float, ProcessReport]:
    """(wall s, peak RSS MB, report) of one process of ``rt``; RuntimeError if it fails."""
    wall, peak_mb, code, stdout, stderr = run_child(rt.argv, rt.env)
    if code != 0:
        raise RuntimeError(f"{rt.name} exited with {code}: ...{(stdout + stderr)[-2000:]}")
    if rt.kind == "llama.cpp":
        report = parse_llama_log(stdout + stderr)
    else:
        report = report_from_stdout(stdout)
    return wall, peak_mb, report


def bench(runtimes: Sequence[Runtime], rounds: int, warmup: int, tokens: int,
          progress: Callable[[str], None] = lambda s: None) -> list[Measure]:
    """All processes, interleaved: round i starts the runtimes rotated by i."""
    measures = []
    for i, tag, rt in interleaved(runtimes, rounds, warmup):
        wall, rss, report = run_process(rt, tokens)
        m = Measure(rt.name, i, wall, rss, report)
        measures.append(m)
        x = metrics(m)
        progress(f"{tag} {rt.name}: process {wall:.2f} s, {rss:.0f} MB, cold {x['cold_ms']:.0f} ms, "
                 f"decode {x['decode_tok_s'] or float('nan'):.1f} tok/s")
    return measures


def write_clip(pcm: np.ndarray, path: str) -> None:
    """16 kHz mono float32 -> 16-bit WAV (every runtime reads the same samples)."""
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((np.clip(pcm, -1.0, 1.0) * 32767.0).round().astype("<i2").tobytes())


def make_runtimes(bundle: str, clip: str, llama_clip: str, tokens: int, threads: int, calls: int,
                  ours_dtypes: Sequence[str], ours_args: Sequence[str], peers: Sequence[str], files) -> list[Runtime]:
    """The rows: ours for each dtype x extra-argument string, then the peers asked for."""
    rts = []
    child = [sys.executable, "-m", "qwen3asr_tools.peer_runs"]
    common = ["--audio", clip, "--tokens", str(tokens), "--threads", str(threads), "--calls", str(calls)]
    for dtype in ours_dtypes:
        for extra in ours_args:
            name = f"ours {dtype}" + (f" {extra.strip()}" if extra.strip() else "")
            rts.append(Runtime(name, "ours", (*child, "ours", "--model", bundle, "--dtype", dtype, *common, "--",
                                              *shlex.split(extra)), child_env()))
    if "crispasr" in peers:
        rts.append(Runtime("CrispASR Q4_K", "crispasr", (*child, "crispasr", "--gguf", files.crispasr_gguf, *common),
                           env_with_site(files.site)))
    if "llama.cpp" in peers:
        rts.append(Runtime("llama.cpp Q4_K_M (one call)", "llama.cpp",
                           (files.mtmd_cli, "-m", files.llama_text, "--mmproj", files.llama_mmproj, "--audio",
                            llama_clip, "-p", "<__media__>", "-n", str(tokens), "--ignore-eos", "--temp", "0",
                            "-t", str(threads), "-tb", str(threads), "-c", "1024", "--perf", "-lv", "4",
                            *LLAMA_EXTRA)))
    return rts


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="0.6b", help="random-weight checkpoint preset, built into build/ (default %(default)s)")
    ap.add_argument("--checkpoint", help="official checkpoint directory (with --bundle: no preset)")
    ap.add_argument("--bundle", help="our bundle exported from it")
    ap.add_argument("--audio", default=None, help="speech file (default: bench.py's clip)")
    ap.add_argument("--seconds", type=float, default=3.0, help="clip length (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=10, help="counted rounds (default %(default)s)")
    ap.add_argument("--warmup", type=int, default=1, help="uncounted rounds first (default %(default)s)")
    ap.add_argument("--tokens", type=int, default=32, help="decoded tokens, end of sequence ignored (default %(default)s)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads of every runtime (default %(default)s)")
    ap.add_argument("--calls", type=int, default=2, help="calls per process of ours and CrispASR (default %(default)s)")
    ap.add_argument("--ours-dtypes", default="int4", help="our decoder dtypes, comma-separated (default %(default)s)")
    ap.add_argument("--ours-args", action="append", default=None,
                    help="extra qwen3asr-transcribe engine flags for ours, one row per use (e.g. \"--memory lean\"; "
                         "\"\" = none; default: one row with none)")
    ap.add_argument("--peers", default=",".join(PEERS), help="peers to run, comma-separated (default %(default)s; '' = none)")
    ap.add_argument("--llama-samples", type=int, default=LLAMA_SAMPLES,
                    help="samples of the clip given to llama.cpp (default %(default)s)")
    ap.add_argument("--work", default=None, help="where the peers are installed and converted (default ~/.cache/qwen3asr-peers)")
    ap.add_argument("--jobs", type=int, default=2, help="parallel jobs of the llama.cpp build (default %(default)s)")
    ap.add_argument("--setup-only", action="store_true", help="install, build and convert, then stop")
    ap.add_argument("--json", help="write every process's figures and the tables here")
    args = ap.parse_args(argv)
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    args.ours_dtypes = [d.strip() for d in args.ours_dtypes.split(",") if d.strip()]
    args.ours_args = args.ours_args if args.ours_args is not None else [""]
    bad = [p for p in args.peers if p not in PEERS]
    problems = [f"unknown peers {bad}; accepted: {', '.join(PEERS)}"] if bad else []
    problems += [f"--{k.replace('_', '-')} must be >= {lo}" for k, lo in (("rounds", 1), ("warmup", 0), ("tokens", 1), ("threads", 1),
                                                         ("calls", 1), ("jobs", 1), ("llama_samples", 1600))
                 if getattr(args, k) < lo]
    problems += [f"--ours-dtypes: unknown {d!r}; accepted: fp32, int8, int4" for d in args.ours_dtypes
                 if d not in ("fp32", "int8", "int4")]
    if args.seconds <= 0:
        problems.append("--seconds must be > 0")
    for extra in args.ours_args:
        try:
            shlex.split(extra)
        except ValueError as exc:
            problems.append(f"--ours-args {extra!r}: {exc}")
    if problems:
        ap.error("; ".join(problems))
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from qwen3asr.audio import SAMPLE_RATE, prepare_audio

    from . import bench as ours_bench
    from .peer_setup import DEFAULT_WORK, SetupError, prepare

    work = args.work or DEFAULT_WORK
    try:
        ckpt, bundle = ours_bench.ensure_model(None if args.checkpoint else args.preset, args.checkpoint, args.bundle,
                                               args.ours_dtypes, int(np.ceil(args.seconds)))
        files = prepare(ckpt, work, crispasr="crispasr" in args.peers, llama="llama.cpp" in args.peers,
                        jobs=args.jobs)
        if args.setup_only:
            print(json.dumps(dataclasses.asdict(files), indent=2))
            return 0
        audio = args.audio or ours_bench.DEFAULT_AUDIO
        pcm = prepare_audio(audio)
        n = int(round(args.seconds * SAMPLE_RATE))
        start = int(ours_bench.AUDIO_OFFSET_S * SAMPLE_RATE)
        if pcm.shape[0] < start + n:
            start = 0
        if pcm.shape[0] < start + n:
            raise ValueError(f"{audio} holds {pcm.shape[0] / SAMPLE_RATE:.2f} s, less than --seconds {args.seconds}")
        run_dir = os.path.join(work, "run")
        os.makedirs(run_dir, exist_ok=True)
        clip, llama_clip = os.path.join(run_dir, "clip.wav"), os.path.join(run_dir, "clip-llama.wav")
        write_clip(pcm[start:start + n], clip)
        write_clip(pcm[start:start + min(n, args.llama_samples)], llama_clip)
        runtimes = make_runtimes(bundle, clip, llama_clip, args.tokens, args.threads, args.calls, args.ours_dtypes,
                                 args.ours_args, args.peers, files)
        load0 = os.getloadavg()[0]
        measures = bench(runtimes, args.rounds, args.warmup, args.tokens,
                         progress=lambda s: print(s, file=sys.stderr, flush=True))
        load1 = os.getloadavg()[0]
    except (ValueError, OSError, RuntimeError, SetupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    names = [r.name for r in runtimes]
    summary = summarize(measures, names, args.warmup)
    ours = [r.name for r in runtimes if r.kind == "ours"]
    peers = [r.name for r in runtimes if r.kind != "ours"]
    ratios = {(o, p): round_ratios(measures, o, p, args.warmup) for o in ours for p in peers}
    tokens = token_counts(measures)
    medians, ratio_table = format_medians(summary, tokens), format_ratios(ratios)
    facts = ours_bench.machine_facts(args.threads)
    print(f"{args.seconds:.2f} s clip ({os.path.basename(audio)}), {args.tokens} decoded tokens (end of sequence "
          f"ignored), {args.threads} threads, {args.rounds} rounds (+{args.warmup} warm-up), fresh process each; "
          f"{facts.get('cpu', '?')}; load avg {load0:.1f} -> {load1:.1f}")
    print(medians)
    if ratios:
        print("\nper-round ratio ours / peer, median (min-max): below 1 favours ours for ms, s and MB, above 1 "
              "for tok/s")
        print(ratio_table)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"settings": {k: v for k, v in vars(args).items()}, "machine": facts,
                       "loadavg_1min": [load0, load1], "measures": [dataclasses.asdict(m) for m in measures],
                       "medians": medians, "ratios": ratio_table}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
