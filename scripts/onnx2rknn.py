#!/usr/bin/env python3
"""Convert a bundle's encoder ONNX graphs to fp16 .rknn models for the Rockchip NPU.

Launcher of qwen3asr_tools.onnx2rknn (python/qwen3asr_tools/onnx2rknn.py; same as
`python -m qwen3asr_tools.onnx2rknn`). Needs the package importable: `pip install -e .` in the
checkout, or PYTHONPATH=python.
"""

if __name__ == "__main__":
    from _launch import run

    run("onnx2rknn")
