"""Deprecated: ``qwen3asr.rknn_backend`` moved to ``qwen3asr.backends.rk.rknn``
(this shim goes away in the next release)."""

from ._compat import moved

moved(globals(), "qwen3asr.rknn_backend",
      "qwen3asr.backends.rk.elf",
      "qwen3asr.backends.rk.soc",
      "qwen3asr.backends.rk.rknn_meta",
      "qwen3asr.backends.rk.rknn")
