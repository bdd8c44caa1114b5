#!/usr/bin/env python3
"""Would decoding concurrent streams in one decoder call pay on the CPU (measured, not built)?

Launcher of qwen3asr_tools.bench_batch (python/qwen3asr_tools/bench_batch.py; same as
`python -m qwen3asr_tools.bench_batch`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("bench_batch")
