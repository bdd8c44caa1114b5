"""Qwen3-ASR speech recognition for Rockchip NPUs and any CPU (ONNX Runtime).

Importing this package never touches hardware SDKs; backends load them lazily.
"""

__version__ = "0.1.0"
