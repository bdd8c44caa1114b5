#!/usr/bin/env python3
"""Train a small Qwen2-style byte-level BPE for the bundled tiny Qwen3-ASR model.

Launcher of qwen3asr_tools.make_small_tokenizer (python/qwen3asr_tools/make_small_tokenizer.py; same as
`python -m qwen3asr_tools.make_small_tokenizer`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""
import sys

try:
    from qwen3asr_tools.make_small_tokenizer import main
except ModuleNotFoundError as exc:
    if exc.name != "qwen3asr_tools":
        raise
    sys.exit("error: the qwen3asr_tools package is not installed: run `pip install -e .` in the checkout "
             "(or set PYTHONPATH=python)")

if __name__ == "__main__":
    sys.exit(main())
