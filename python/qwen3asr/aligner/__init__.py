"""Word timestamps with Qwen3-ForcedAligner.

The aligner reads the audio and the transcript split into word units, each followed by two
``<timestamp>`` slots (start, end), and classifies every slot into a time bin in one forward
pass.

==============  ============================================================================
``model``       :class:`ForcedAligner`, the loaded aligner and the orchestrator of one alignment
``words``       the official word units and the input layout after the audio block
``timing``      the official repair of the predicted bins and their conversion to seconds
``scoring``     the backend seam: the time-class logits at the slot rows of one input
==============  ============================================================================
"""

from .words import ALIGNER_LANGUAGES, align_words

__all__ = ["ALIGNER_LANGUAGES", "AlignmentError", "ForcedAligner", "align_words"]


def __getattr__(name):  # the model imports the backends, which import this package's seam: load it on use
    if name in ("ForcedAligner", "AlignmentError", "MAX_ALIGN_SECONDS", "DEFAULT_ALIGNER_ENV"):
        from . import model

        return getattr(model, name)
    raise AttributeError(f"module 'qwen3asr.aligner' has no attribute {name!r}")
