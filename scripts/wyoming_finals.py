#!/usr/bin/env python3
"""Which final transcript should the Wyoming server send: the stream's, or one pass over the utterance?

Launcher of qwen3asr_tools.wyoming_finals (python/qwen3asr_tools/wyoming_finals.py; same as
`python -m qwen3asr_tools.wyoming_finals`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""
import sys

try:
    from qwen3asr_tools.wyoming_finals import main
except ModuleNotFoundError as exc:
    if exc.name != "qwen3asr_tools":
        raise
    sys.exit("error: the qwen3asr_tools package is not installed: run `pip install -e .` in the checkout "
             "(or set PYTHONPATH=python)")

if __name__ == "__main__":
    sys.exit(main())
