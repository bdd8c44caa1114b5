#!/usr/bin/env python3
"""Encoder latency per variant (form x duration x NPU core mask): mean, spread and real-time factor.

Launcher of qwen3asr_tools.bench_encoder (python/qwen3asr_tools/bench_encoder.py; same as
`python -m qwen3asr_tools.bench_encoder`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""
import sys

try:
    from qwen3asr_tools.bench_encoder import main
except ModuleNotFoundError as exc:
    if exc.name != "qwen3asr_tools":
        raise
    sys.exit("error: the qwen3asr_tools package is not installed: run `pip install -e .` in the checkout "
             "(or set PYTHONPATH=python)")

if __name__ == "__main__":
    sys.exit(main())
