#!/usr/bin/env python3
"""Whole commands (a one-shot CLI run) in fresh processes, interleaved: wall time, peak RSS and the
per-round ratio to the first command.

Launcher of qwen3asr_tools.bench_oneshot (python/qwen3asr_tools/bench_oneshot.py; same as
`python -m qwen3asr_tools.bench_oneshot`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("bench_oneshot")
