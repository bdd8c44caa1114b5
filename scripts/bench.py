#!/usr/bin/env python3
"""Speed of the ONNX Runtime CPU backend against the official PyTorch model, in one process.

Launcher of qwen3asr_tools.bench (python/qwen3asr_tools/bench.py; same as
`python -m qwen3asr_tools.bench`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("bench")
