#!/usr/bin/env python3
"""Evaluate a model bundle (and optionally the official PyTorch model) on a dataset manifest.

Launcher of qwen3asr_tools.evaluate (python/qwen3asr_tools/evaluate.py; same as
`python -m qwen3asr_tools.evaluate`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("evaluate")
