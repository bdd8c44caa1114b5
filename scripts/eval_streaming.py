#!/usr/bin/env python3
"""Streaming versus offline on the long multi-utterance clip (audio/long_mixed.wav).

Launcher of qwen3asr_tools.eval_streaming (python/qwen3asr_tools/eval_streaming.py; same as
`python -m qwen3asr_tools.eval_streaming`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""
import sys

try:
    from qwen3asr_tools.eval_streaming import main
except ModuleNotFoundError as exc:
    if exc.name != "qwen3asr_tools":
        raise
    sys.exit("error: the qwen3asr_tools package is not installed: run `pip install -e .` in the checkout "
             "(or set PYTHONPATH=python)")

if __name__ == "__main__":
    sys.exit(main())
