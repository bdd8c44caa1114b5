#!/usr/bin/env python3
"""Encoder latency per variant (form x duration x NPU core mask): mean, spread and real-time factor.

Launcher of qwen3asr_tools.bench_encoder (python/qwen3asr_tools/bench_encoder.py; same as
`python -m qwen3asr_tools.bench_encoder`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("bench_encoder")
