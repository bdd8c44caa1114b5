#!/usr/bin/env python3
"""The two waits a live user feels (first text, final), measured on the CPU and predicted for the boards.

Launcher of qwen3asr_tools.bench_waits (python/qwen3asr_tools/bench_waits.py; same as
`python -m qwen3asr_tools.bench_waits`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("bench_waits")
