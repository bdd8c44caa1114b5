#!/usr/bin/env python3
"""Build a random-weight Qwen3-ASR checkpoint in the official layout.

Launcher of qwen3asr_tools.make_random_checkpoint (python/qwen3asr_tools/make_random_checkpoint.py; same as
`python -m qwen3asr_tools.make_random_checkpoint`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""
import sys

try:
    from qwen3asr_tools.make_random_checkpoint import main
except ModuleNotFoundError as exc:
    if exc.name != "qwen3asr_tools":
        raise
    sys.exit("error: the qwen3asr_tools package is not installed: run `pip install -e .` in the checkout "
             "(or set PYTHONPATH=python)")

if __name__ == "__main__":
    sys.exit(main())
