#!/usr/bin/env python3
"""What word timestamps add to a transcription on the CPU, in one process, runs interleaved.

Launcher of qwen3asr_tools.bench_aligner (python/qwen3asr_tools/bench_aligner.py; same as
`python -m qwen3asr_tools.bench_aligner`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("bench_aligner")
