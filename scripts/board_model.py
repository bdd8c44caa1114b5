#!/usr/bin/env python3
"""Board cost model: predicted wall time, RTF and caption latency on RK3576 / RK3588.

Launcher of qwen3asr_tools.board.cli (the package python/qwen3asr_tools/board/; same as
`python -m qwen3asr_tools.board.cli`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("board.cli")
