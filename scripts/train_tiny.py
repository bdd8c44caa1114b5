#!/usr/bin/env python3
"""Train the bundled tiny Qwen3-ASR (official architecture) on synthetic speech, end to end.

Launcher of qwen3asr_tools.train_tiny (python/qwen3asr_tools/train_tiny.py; same as
`python -m qwen3asr_tools.train_tiny`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""
import sys

try:
    from qwen3asr_tools.train_tiny import main
except ModuleNotFoundError as exc:
    if exc.name != "qwen3asr_tools":
        raise
    sys.exit("error: the qwen3asr_tools package is not installed: run `pip install -e .` in the checkout "
             "(or set PYTHONPATH=python)")

if __name__ == "__main__":
    sys.exit(main())
