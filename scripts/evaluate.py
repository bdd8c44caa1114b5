#!/usr/bin/env python3
"""Evaluate a model bundle (and optionally the official PyTorch model) on a dataset manifest.

Launcher of qwen3asr_tools.evaluate (python/qwen3asr_tools/evaluate.py; same as
`python -m qwen3asr_tools.evaluate`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""
import sys

try:
    from qwen3asr_tools.evaluate import main
except ModuleNotFoundError as exc:
    if exc.name != "qwen3asr_tools":
        raise
    sys.exit("error: the qwen3asr_tools package is not installed: run `pip install -e .` in the checkout "
             "(or set PYTHONPATH=python)")

if __name__ == "__main__":
    sys.exit(main())
