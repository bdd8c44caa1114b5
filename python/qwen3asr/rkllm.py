"""Deprecated: ``qwen3asr.rkllm`` moved to ``qwen3asr.backends.rk.rkllm``
(this shim goes away in the next release)."""

from ._compat import moved

moved(globals(), "qwen3asr.rkllm",
      "qwen3asr.backends.rk.rkllm")
