#!/usr/bin/env python3
"""Measure on a board what scripts/board_model.py predicts: same clips, same settings, same table.

Launcher of qwen3asr_tools.bench_board (python/qwen3asr_tools/bench_board.py; same as
`python -m qwen3asr_tools.bench_board`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("bench_board")
