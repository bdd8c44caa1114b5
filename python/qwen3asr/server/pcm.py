"""Deprecated: raw PCM conversion moved to :mod:`qwen3asr.audio` (one audio-input layer for
the servers and the microphone). This module re-exports it for one release, then goes."""

from __future__ import annotations

import warnings

from ..audio import PCM_MAX_CHANNELS as MAX_CHANNELS
from ..audio import PCM_RATES as RATE_RANGE
from ..audio import PCM_WIDTHS as WIDTHS
from ..audio import PcmConverter, PcmFormat, PcmFormatError

__all__ = ["MAX_CHANNELS", "RATE_RANGE", "WIDTHS", "PcmConverter", "PcmFormat", "PcmFormatError"]

warnings.warn("qwen3asr.server.pcm is deprecated and will be removed in the next release: import PcmConverter, "
              "PcmFormat and PcmFormatError from qwen3asr.audio", DeprecationWarning, stacklevel=2)
