#!/usr/bin/env python3
"""Convert an official Qwen3-ASR checkpoint directory into a model bundle for qwen3asr.

Launcher of qwen3asr_tools.export_onnx (python/qwen3asr_tools/export_onnx.py; same as
`python -m qwen3asr_tools.export_onnx`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""
import sys

try:
    from qwen3asr_tools.export_onnx import main
except ModuleNotFoundError as exc:
    if exc.name != "qwen3asr_tools":
        raise
    sys.exit("error: the qwen3asr_tools package is not installed: run `pip install -e .` in the checkout "
             "(or set PYTHONPATH=python)")

if __name__ == "__main__":
    sys.exit(main())
