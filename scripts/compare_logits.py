#!/usr/bin/env python3
"""Teacher-forced comparison of our backend against the official PyTorch Qwen3-ASR.

Launcher of qwen3asr_tools.compare_logits (python/qwen3asr_tools/compare_logits.py; same as
`python -m qwen3asr_tools.compare_logits`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""
import sys

try:
    from qwen3asr_tools.compare_logits import main
except ModuleNotFoundError as exc:
    if exc.name != "qwen3asr_tools":
        raise
    sys.exit("error: the qwen3asr_tools package is not installed: run `pip install -e .` in the checkout "
             "(or set PYTHONPATH=python)")

if __name__ == "__main__":
    sys.exit(main())
