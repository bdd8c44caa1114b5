"""Deprecated: ``qwen3asr.onnx_backend`` moved to ``qwen3asr.backends.onnx``
(this shim goes away in the next release)."""

from ._compat import moved

moved(globals(), "qwen3asr.onnx_backend",
      "qwen3asr.backends.onnx")
