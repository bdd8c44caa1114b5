"""Qwen3-ASR speech recognition for Rockchip NPUs and any CPU (ONNX Runtime).

Importing this package never touches hardware SDKs; backends load them lazily.
"""

__version__ = "0.2.0"

from .audio import AudioError, prepare_audio  # noqa: E402
from .bundle import BundleError  # noqa: E402
from .decoding import DecodingOptions, Generation  # noqa: E402
from .engine import EngineClosed, Qwen3ASREngine  # noqa: E402
from .errors import Qwen3ASRError  # noqa: E402
from .options import TranscribeOptions  # noqa: E402
from .backends import PrefixCacheOptions, RKOptions  # noqa: E402
from .results import Segment, Transcription, TranscriptionStats  # noqa: E402
from .vad import SileroVAD, VADOptions  # noqa: E402
from .work import Cancelled, Work  # noqa: E402

__all__ = ["Qwen3ASREngine", "TranscribeOptions", "RKOptions", "Transcription", "TranscriptionStats", "Segment",
           "DecodingOptions", "Generation", "SileroVAD", "VADOptions", "Work", "Cancelled", "EngineClosed",
           "AudioError", "BundleError", "Qwen3ASRError", "PrefixCacheOptions", "prepare_audio", "__version__"]
