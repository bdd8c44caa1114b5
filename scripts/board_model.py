#!/usr/bin/env python3
"""Board cost model: predicted wall time, RTF and caption latency on RK3576 / RK3588.

Launcher of qwen3asr_tools.board_model (python/qwen3asr_tools/board_model.py; same as
`python -m qwen3asr_tools.board_model`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("board_model")
