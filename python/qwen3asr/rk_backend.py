"""Deprecated: ``qwen3asr.rk_backend`` moved to ``qwen3asr.backends.rk.backend``
(this shim goes away in the next release)."""

from ._compat import moved

moved(globals(), "qwen3asr.rk_backend",
      "qwen3asr.backends.rk.soc",
      "qwen3asr.backends.rk.options",
      "qwen3asr.backends.rk.backend")
