"""Qwen3-ASR speech recognition for Rockchip NPUs and any CPU (ONNX Runtime).

Importing this package never touches hardware SDKs; backends load them lazily.
"""

__version__ = "0.1.0"

from .audio import AudioError, prepare_audio  # noqa: E402
from .bundle import BundleError  # noqa: E402
from .decoding import DecodingOptions, Generation  # noqa: E402
from .engine import Qwen3ASREngine  # noqa: E402
from .results import Transcription, TranscriptionStats  # noqa: E402

__all__ = ["Qwen3ASREngine", "Transcription", "TranscriptionStats", "DecodingOptions", "Generation",
           "AudioError", "BundleError", "prepare_audio", "__version__"]
