#!/usr/bin/env python3
"""Load a running qwen3asr server with real clients: throughput and live latency.

Launcher of qwen3asr_tools.bench_server (python/qwen3asr_tools/bench_server.py; same as
`python -m qwen3asr_tools.bench_server`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("bench_server")
