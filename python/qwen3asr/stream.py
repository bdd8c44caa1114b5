"""Deprecated: ``qwen3asr.stream`` moved to ``qwen3asr.streaming``
(this shim goes away in the next release)."""

from ._compat import moved

moved(globals(), "qwen3asr.stream",
      "qwen3asr.streaming.session",
      "qwen3asr.streaming.results",
      "qwen3asr.streaming.window",
      "qwen3asr.streaming.pause",
      "qwen3asr.streaming")
