"""Models by name: hub ids and short names fetched, converted once and cached.

==============  ============================================================================
``names``       what a model string means: a directory, ``Org/Name[@revision]``, a short name
``fetch``       files through huggingface_hub (HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE, its cache)
``cache``       the converted-bundle cache: keys, lock, atomic install, checks, list, remove
``resolve``     ``resolve_model``: a model string to a bundle directory (the one call sites make)
==============  ============================================================================

The board conversion on a PC (``qwen3asr-models convert``) is qwen3asr_tools.board_convert.
Importing this package imports neither huggingface_hub nor the converter; they are loaded when
an id is resolved.
"""

from .names import HubError
from .resolve import resolve_model

__all__ = ["HubError", "resolve_model"]
