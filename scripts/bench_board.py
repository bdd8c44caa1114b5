#!/usr/bin/env python3
"""Measure on a board what scripts/board_model.py predicts: same clips, same settings, same table.

Launcher of qwen3asr_tools.bench_board (python/qwen3asr_tools/bench_board.py; same as
`python -m qwen3asr_tools.bench_board`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""
import sys

try:
    from qwen3asr_tools.bench_board import main
except ModuleNotFoundError as exc:
    if exc.name != "qwen3asr_tools":
        raise
    sys.exit("error: the qwen3asr_tools package is not installed: run `pip install -e .` in the checkout "
             "(or set PYTHONPATH=python)")

if __name__ == "__main__":
    sys.exit(main())
