"""Whole commands in fresh processes, interleaved: wall time and peak RSS, and each command's
per-round ratio to the first one (the reference).

    python scripts/bench_oneshot.py --rounds 5 \\
        --cmd "old=env PYTHONPATH=../old/python .venv/bin/python -m qwen3asr.cli.transcribe --audio c.wav" \\
        --cmd "lean=.venv/bin/python -m qwen3asr.cli.transcribe --audio c.wav --memory lean --model B"

What a user pays for a one-shot CLI run (interpreter, imports, load, one call, exit), which no
in-process timer sees. Each round runs every command once, in an order that rotates from round to
round, after ``--warmup`` uncounted rounds; a round's processes run back to back, so the ratio to
the reference cancels most of a noisy machine's drift (docs/benchmarks.md). Wall time is from spawn
to exit; peak RSS is the child's ``ru_maxrss`` from ``wait4``. A command that fails stops the run
with its output. Commands are split as a shell would (``shlex``) but not run through one.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
from typing import Dict, List, Sequence, Tuple

from .bench_peers import interleaved, run_child


def parse_commands(specs: Sequence[str]) -> List[Tuple[str, List[str]]]:
    """``NAME=COMMAND`` strings -> [(name, argv)]; ValueError naming a malformed or repeated one."""
    out: List[Tuple[str, List[str]]] = []
    for spec in specs:
        name, sep, cmd = spec.partition("=")
        name = name.strip()
        if not sep or not name or not cmd.strip():
            raise ValueError(f"--cmd {spec!r}: give NAME=COMMAND")
        if any(name == n for n, _ in out):
            raise ValueError(f"--cmd: the name {name!r} is given twice")
        out.append((name, shlex.split(cmd)))
    if len(out) < 1:
        raise ValueError("give at least one --cmd NAME=COMMAND")
    return out


def bench(commands: Sequence[Tuple[str, List[str]]], rounds: int, warmup: int, progress=print) -> Dict[str, list]:
    """{name: [(wall s, peak MB) of each counted round]}; RuntimeError with the output of a failed run."""
    runs: Dict[str, list] = {name: [] for name, _ in commands}
    for i, tag, (name, argv) in interleaved(commands, rounds, warmup):
        wall, peak, code, out, err = run_child(argv, dict(os.environ))
        if code != 0:
            raise RuntimeError(f"{name} exited with {code}: ...{(out + err)[-2000:]}")
        progress(f"{tag} {name}: {wall:.2f} s, {peak:.0f} MB")
        if i >= warmup:
            runs[name].append((wall, peak))
    return runs


def summarize(runs: Dict[str, list]) -> List[dict]:
    """Per command: median and range of wall s and peak MB, and of the per-round ratio of its wall
    time to the first command's."""
    names = list(runs)
    ref = [w for w, _ in runs[names[0]]]
    rows = []
    for name in names:
        walls, peaks = [w for w, _ in runs[name]], [p for _, p in runs[name]]
        ratios = [w / r for w, r in zip(walls, ref)]
        rows.append({"name": name, "wall_s": statistics.median(walls), "wall_range": (min(walls), max(walls)),
                     "peak_mb": statistics.median(peaks), "peak_range": (min(peaks), max(peaks)),
                     "ratio": statistics.median(ratios), "ratio_range": (min(ratios), max(ratios))})
    return rows


def format_table(rows: Sequence[dict]) -> str:
    lines = [f"| command | wall s, median (min-max) | peak RSS MB, median (min-max) | wall / {rows[0]['name']}, "
             "per round |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['wall_s']:.2f} ({r['wall_range'][0]:.2f}-{r['wall_range'][1]:.2f}) | "
                     f"{r['peak_mb']:.0f} ({r['peak_range'][0]:.0f}-{r['peak_range'][1]:.0f}) | "
                     f"{r['ratio']:.3f} ({r['ratio_range'][0]:.3f}-{r['ratio_range'][1]:.3f}) |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cmd", action="append", default=[], metavar="NAME=COMMAND",
                    help="a command to time; the first is the reference of the ratios (repeat)")
    ap.add_argument("--rounds", type=int, default=5, help="counted rounds (default %(default)s)")
    ap.add_argument("--warmup", type=int, default=1, help="uncounted rounds first (default %(default)s)")
    ap.add_argument("--json", help="also write the per-round figures and the summary here")
    args = ap.parse_args(argv)
    if not 1 <= args.rounds <= 1000 or not 0 <= args.warmup <= 100:
        ap.error("--rounds takes 1-1000 and --warmup 0-100")
    try:
        commands = parse_commands(args.cmd)
    except ValueError as exc:
        ap.error(str(exc))
    try:
        runs = bench(commands, args.rounds, args.warmup, progress=lambda m: print(m, file=sys.stderr, flush=True))
    except (RuntimeError, OSError) as exc:
        print(f"bench_oneshot: {exc}", file=sys.stderr)
        return 1
    rows = summarize(runs)
    print(format_table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"commands": {n: a for n, a in commands}, "runs": runs, "summary": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
