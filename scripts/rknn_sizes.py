#!/usr/bin/env python3
"""How big an encoder .rknn is beyond its weights, with fixed and with dynamic shapes.

Launcher of qwen3asr_tools.rknn_sizes (python/qwen3asr_tools/rknn_sizes.py; same as
`python -m qwen3asr_tools.rknn_sizes`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("rknn_sizes")
