"""Deprecated: ``qwen3asr.prefix`` moved to ``qwen3asr.backends.prefix_cache``
(this shim goes away in the next release)."""

from ._compat import moved

moved(globals(), "qwen3asr.prefix",
      "qwen3asr.backends.prefix_cache")
