#!/usr/bin/env python3
"""Load a running qwen3asr server with real clients: throughput and live latency.

Launcher of qwen3asr_tools.bench_server (python/qwen3asr_tools/bench_server.py; same as
`python -m qwen3asr_tools.bench_server`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""
import sys

try:
    from qwen3asr_tools.bench_server import main
except ModuleNotFoundError as exc:
    if exc.name != "qwen3asr_tools":
        raise
    sys.exit("error: the qwen3asr_tools package is not installed: run `pip install -e .` in the checkout "
             "(or set PYTHONPATH=python)")

if __name__ == "__main__":
    sys.exit(main())
