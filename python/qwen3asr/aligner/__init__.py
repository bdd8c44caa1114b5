"""Word timestamps with Qwen3-ForcedAligner.

The aligner reads the audio and the transcript split into word units, each followed by two
``<timestamp>`` slots (start, end), and classifies every slot into a time bin in one forward
pass.

==============  ============================================================================
``model``       :class:`ForcedAligner`, the loaded aligner and the orchestrator of one alignment
``words``       the official word units and the input layout after the audio block
``timing``      the official repair of the predicted bins and their conversion to seconds
``segments``    which aligner an engine uses, loaded with its settings; the words of a list of segments
``refine``      word spans fitted to the speech, the collapse check and re-alignment
``checked``     the words of the pieces at pauses checked by the ASR model (``word_spans="checked"``)
``long``        a given transcript placed over audio of any length (``engine.align``)
==============  ============================================================================

The backend seam, the time-class logits at the slot rows of one input, is
:class:`qwen3asr.scoring.SlotScorer` (stage level, so the backends never import this package).
"""

from .model import DEFAULT_ALIGNER_ENV, MAX_ALIGN_SECONDS, AlignmentError, ForcedAligner
from .words import ALIGNER_LANGUAGES, align_words

__all__ = ["ALIGNER_LANGUAGES", "AlignmentError", "DEFAULT_ALIGNER_ENV", "ForcedAligner", "MAX_ALIGN_SECONDS",
           "align_words"]
