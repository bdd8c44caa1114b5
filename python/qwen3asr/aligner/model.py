"""ForcedAligner: a loaded Qwen3-ForcedAligner bundle, and the one orchestrator of an alignment.

Every alignment, on every backend, runs the same stages::

    audio -> log-mel (mel) -> the aligner's audio encoder (backend) -> [audio_start] audio
    [audio_end] w1 <ts> <ts> ... wN <ts> <ts> (words), embedded with the aligner's own table ->
    slot scorer (backend, the SlotScorer seam) -> argmax class per slot -> repair, seconds (timing)

The official ``Qwen3ForcedAligner.align()`` does the same in one forward pass of the whole model.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import Optional

import numpy as np

from .. import checks
from .. import mel as melmod
from ..audio import MAX_STREAM_SECONDS, SAMPLE_RATE, AudioError, AudioInput, prepare_audio
from ..backends import BackendOptions, create_aligner_backend
from ..bundle import Bundle, BundleError, EmbeddingTable
from ..encoder import TOKENS_PER_CHUNK, tokens_for_frames
from ..errors import Qwen3ASRError
from ..languages import resolve_language
from ..results import Word
from ..tokenizer import Tokenizer
from .timing import between_bins as times_between, word_spans
from .words import ALIGNER_LANGUAGES, AlignerText, aligner_text

logger = logging.getLogger(__name__)

DEFAULT_ALIGNER_ENV = "QWEN3ASR_ALIGNER"
# Longest audio aligned in one pass. The official chain aligns up to 180 s at once on a GPU; on a
# CPU the attention of one pass grows with the square of its rows (60 s: about 800 audio rows plus
# three per word), and a board has 4 GB. transcribe(word_timestamps=True) aligns each segment
# (at most 30 s) on its own, so only align() of a longer clip meets this limit.
MAX_ALIGN_SECONDS = 60.0
# Input positions a second of dense speech takes besides its 13 audio rows: 8 word units a second
# (fast Mandarin, one unit per character; fast English is about 4 words), each at least one token
# and its two <timestamp> slots. A scorer of P positions takes (P - 2) / (13 + this) seconds for
# sure (``ForcedAligner.piece_seconds``): an RKLLM aligner converted for 2048 positions 55 s, one run
# with max_context=1024 27 s; the CPU's 4096 more than MAX_ALIGN_SECONDS.
DENSE_TEXT_POSITIONS_PER_SECOND = 24
SPECIALS = ("<|audio_start|>", "<|audio_pad|>", "<|audio_end|>", "<timestamp>")


class AlignmentError(Qwen3ASRError, ValueError):
    """Text or audio the aligner cannot align (an uncovered language, too long, ...)."""


class ForcedAligner:
    """A loaded Qwen3-ForcedAligner.

    Args:
      model_dir: an aligner bundle made by scripts/export_onnx.py from a Qwen3-ForcedAligner
        checkpoint (model.json ``"kind": "aligner"``).
      backend: "auto", "onnx" or "rk", as Qwen3ASREngine.
      options: qwen3asr.backends.BackendOptions (encoder form, decoder dtype, threads, board settings).

    ``align(audio, text, language)`` returns the Words of ``text`` with their times. One aligner
    serves one alignment at a time. ``close()`` (or ``with``) frees its sessions.
    """

    def __init__(self, model_dir: str, backend: str = "auto", options=None):
        self._closed = True
        self.bundle = Bundle.load(model_dir)
        self.bundle.require_kind("aligner")
        cfg = self.bundle.aligner
        self.classes = int(cfg["classify_num"])
        self.segment_ms = float(cfg["timestamp_segment_ms"])
        self.languages = tuple(cfg.get("languages") or ALIGNER_LANGUAGES)
        self.tokenizer = Tokenizer.from_dir(self.bundle.path)
        self._ids = {}
        for name in SPECIALS:
            tid = self.tokenizer.token_id(name)
            want = self.bundle.special_tokens.get(name)
            if want is not None and tid != want:
                raise BundleError(f"{self.bundle.path}: the tokenizer and model.json disagree on {name} ({tid} vs "
                                  f"{want}); re-export the aligner bundle with scripts/export_onnx.py")
            self._ids[name] = tid
        if self._ids["<timestamp>"] != int(cfg["timestamp_token_id"]):
            raise BundleError(f"{self.bundle.path}: <timestamp> is {self._ids['<timestamp>']} in the tokenizer but "
                              f"{cfg['timestamp_token_id']} in model.json; re-export the aligner bundle")
        self.embeddings = EmbeddingTable(self.bundle)
        self.n_mels = int(self.bundle.audio_config["num_mel_bins"])
        loaded = create_aligner_backend(backend, self.bundle, options if options is not None else BackendOptions())
        self._backend = loaded
        self.backend = loaded.name
        self.encoder, self.scorer = loaded.encoder, loaded.scorer
        self.max_seconds = MAX_ALIGN_SECONDS
        self._closed = False
        logger.info("loaded aligner %s (backend %s)", self.bundle.path, self.backend)

    @property
    def piece_seconds(self) -> float:
        """The longest audio whose alignment fits one pass however dense its speech (whole
        seconds): MAX_ALIGN_SECONDS, or less when the scorer's positions would not hold that much
        (DENSE_TEXT_POSITIONS_PER_SECOND). The engine cuts word requests into pieces no longer than
        this; ``align`` itself takes up to ``max_seconds`` while the input fits the positions."""
        fits = (self.scorer.max_positions - 2) // (TOKENS_PER_CHUNK + DENSE_TEXT_POSITIONS_PER_SECOND)
        return float(max(1, min(MAX_ALIGN_SECONDS, fits)))

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Free the scorer and the encoder (safe to call twice)."""
        if not self._closed:
            self._closed = True
            self._backend.close()

    def __enter__(self) -> "ForcedAligner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ alignment
    def supports(self, language: Optional[str]) -> bool:
        """Whether ``language`` (name or code) is one the aligner was trained on."""
        name = resolve_language(language) if language else None
        return name is not None and name.lower() in {x.lower() for x in self.languages}

    def check_language(self, language: Optional[str]) -> str:
        """The language's name, or AlignmentError when the aligner does not cover it."""
        name = resolve_language(language) if language else None
        if name is None:
            raise AlignmentError("word timestamps need the language of the text; none was given or detected")
        if not self.supports(name):
            raise AlignmentError(f"the forced aligner covers {', '.join(self.languages)}; not {name}: no word "
                                 "timestamps for it")
        return name

    def align(self, audio: AudioInput, text: str, language: str, *, sample_rate: Optional[int] = None,
              offset: float = 0.0, between_bins: bool = False) -> tuple[Word, ...]:
        """The Words of ``text`` (the aligner's word units, in order) with their start and end in
        seconds of ``audio``, plus ``offset``.

        audio: a file path or an array (any rate with ``sample_rate``, any channels).
        language: a name or code of one of ``self.languages`` (AlignmentError otherwise).
        An empty or wordless text gives ``()``. Audio longer than ``max_seconds`` is refused.
        Times are the official ones (its 80 ms bins, repaired), clipped to the audio: the model
        can place a slot past the end of a clip, where no word was said. ``between_bins``: each
        slot the repair left in its own bin timed between the bins from the same logits instead
        (timing.between_bins; what the word spans other than "raw" use).
        """
        if checks.number("offset", offset, -MAX_STREAM_SECONDS, MAX_STREAM_SECONDS):
            raise ValueError(f"offset must be a finite number of seconds within +-{MAX_STREAM_SECONDS:g} "
                             f"(got {checks.show(offset)})")
        t0 = time.perf_counter()
        pcm = prepare_audio(audio, sample_rate)
        layout, logits = self.slot_logits(pcm, text, language)
        if not layout.words:
            return ()
        classes = [int(c) for c in np.argmax(logits, axis=-1)]
        spans = word_spans(classes, len(layout.words), self.segment_ms,
                           times_between(logits, self.segment_ms) if between_bins else None)
        logger.debug("aligned %d words in %.0f ms", len(layout.words), (time.perf_counter() - t0) * 1000)
        cap = math.floor((pcm.shape[0] / SAMPLE_RATE + offset) * 1000) / 1000  # the audio's end, in whole ms
        return tuple(Word(w, min(round(s.start + offset, 3), cap), min(round(s.end + offset, 3), cap))
                     for w, s in zip(layout.words, spans))

    def slot_logits(self, audio: AudioInput, text: str, language: str, *,
                    sample_rate: Optional[int] = None) -> tuple[AlignerText, np.ndarray]:
        """The aligner's input layout of ``text`` and its time-class logits at every slot,
        ``(n_slots, classes)`` float32 (what ``align`` takes the argmax of; empty for a text
        without words). Same arguments and errors as ``align``."""
        inp = self.prepare(audio, text, language, sample_rate=sample_rate)
        if not inp.layout.words:
            return inp.layout, np.zeros((0, self.classes), np.float32)
        return inp.layout, self.scorer.score(inp.embeds, inp.rows)

    def prepare(self, audio: AudioInput, text: str, language: str, *,
                sample_rate: Optional[int] = None) -> "AlignerInput":
        """The scorer's input for ``audio`` and ``text``: the layout, the whole input embedded
        (the encoder's output over the audio pads) and the slot rows. What every backend scores,
        and what scripts/export_rkllm.py calibrates the board's model on. Same arguments and
        errors as ``align``; a text without words gives empty embeds and rows."""
        if self._closed:
            raise RuntimeError("this ForcedAligner was closed; create a new one")
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        n_bytes = len(text.encode("utf-8"))  # refused from its length when no tokens could fit (before tokenizing)
        if n_bytes > self.scorer.max_positions * self.tokenizer.max_token_bytes:
            raise AlignmentError(f"text is {n_bytes} bytes, at least {n_bytes // self.tokenizer.max_token_bytes} "
                                 f"tokens: over the aligner's {self.scorer.max_positions} positions; align shorter "
                                 f"pieces")
        name = self.check_language(language)
        pcm = prepare_audio(audio, sample_rate)
        seconds = pcm.shape[0] / SAMPLE_RATE
        if seconds > self.max_seconds:
            raise AudioError(f"{seconds:.1f} s of audio is over the aligner's {self.max_seconds:g} s per pass; align "
                             f"shorter pieces (Qwen3ASREngine.transcribe(word_timestamps=True) aligns each segment)")
        layout = aligner_text(self.tokenizer, text, name)
        if not layout.words:
            return AlignerInput(layout, np.zeros((0, self.embeddings.hidden_size), np.float32),
                                np.zeros(0, np.int64))
        mel = melmod.log_mel(pcm, self.n_mels)
        n_audio = tokens_for_frames(mel.shape[1])
        total = n_audio + 2 + layout.ids.shape[0]
        if total > self.scorer.max_positions:
            raise AlignmentError(f"text of {len(layout.words)} words over {seconds:.1f} s make {total} aligner "
                                 f"positions, over its {self.scorer.max_positions}; align shorter pieces")
        ids = np.concatenate([[self._ids["<|audio_start|>"]], np.full(n_audio, self._ids["<|audio_pad|>"]),
                              [self._ids["<|audio_end|>"]], layout.ids]).astype(np.int64)
        x = self.embeddings(ids)
        x[1:1 + n_audio] = self.encoder.encode(mel)
        return AlignerInput(layout, x, (layout.slots + n_audio + 2).astype(np.int64))


@dataclasses.dataclass(frozen=True)
class AlignerInput:
    """One alignment's input to the slot scorer (ForcedAligner.prepare)."""

    layout: AlignerText  # the word units, their token ids and slot positions after the audio block
    embeds: np.ndarray   # (L, hidden) float32: [audio_start] audio [audio_end] w1 <ts> <ts> ..., embedded
    rows: np.ndarray     # (2 x words,) int64: the <timestamp> rows of embeds


__all__ = ["AlignerInput", "AlignmentError", "DEFAULT_ALIGNER_ENV", "ForcedAligner", "MAX_ALIGN_SECONDS"]
