#!/usr/bin/env python3
"""Convert an official Qwen3-ASR checkpoint directory into a model bundle for qwen3asr.

Launcher of qwen3asr_tools.export_onnx (python/qwen3asr_tools/export_onnx.py; same as
`python -m qwen3asr_tools.export_onnx`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("export_onnx")
