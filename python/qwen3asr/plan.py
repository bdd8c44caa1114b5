"""The one plan: whether audio goes to the decoder in one pass or in chunks, and in what chunks.

Every surface asks this module, so they cannot disagree: ``Qwen3ASREngine.transcribe``
(``engine.plan``), a stream's creation and its final passes (qwen3asr.streaming), the Wyoming
utterance's one-pass final (qwen3asr.server.wyoming) and the CLI's encoder preload.

A request goes in one pass when

- the prompt, the audio rows and the token budget fit the decoder context
  (``fits_context``), and
- the audio is within the one-pass limit in seconds (``one_pass_seconds``): the bundle's
  declared limit (``model.json`` ``limits.one_pass_seconds``, a model that loses its place in
  long audio) and, with word timestamps, the aligner's piece (``ForcedAligner.piece_seconds``:
  each segment's words come from one aligner pass).

``one_pass=True`` forces one pass (the context still has to hold it: ``Qwen3ASREngine.prepare``
refuses audio that does not fit). Otherwise chunked decoding takes the long-file defaults, with
the chunk size lowered until the decoder window fits the context and a chunk fits one aligner
pass (``chunk_options``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Callable, Optional

from .audio import SAMPLE_RATE, AudioError
from .encoder import TOKENS_PER_CHUNK, tokens_for_frames
from .mel import HOP_LENGTH as HOP
from .mel import n_frames
from .options import TranscribeOptions

logger = logging.getLogger(__name__)

ONE_PASS, VAD_SEGMENTS, CHUNKS = "one pass", "VAD segments", "chunks"  # the modes a plan names
# Most tokens of a detected ``language X<asr_text>`` header a stream's window keeps before its
# text prefix (qwen3asr.streaming.window): counted in a window's positions.
HEADER_TOKENS = 8
# A piece of live speech (the chunks between two pauses) longer than this keeps its streamed
# text instead of a final pass, so a stream never keeps more audio than this for it; caption
# segments and voice commands are far shorter.
FINAL_PASS_MAX_SECONDS = 60.0


@dataclasses.dataclass(frozen=True)
class Plan:
    """How a request is decoded."""

    mode: str  # ONE_PASS, VAD_SEGMENTS or CHUNKS
    options: TranscribeOptions  # the request's options with that mode's defaults filled in

    @property
    def one_pass(self) -> bool:
        return self.mode == ONE_PASS


class Planner:
    """The limits an engine knows once, and the decisions made from them.

    Args:
      max_context: the decoder's positions (an .rkllm model's KV length).
      prompt_rows: the decoder rows a request's prompt takes without its audio, for its options
        (``Qwen3ASREngine.prompt_rows``: the system turn with the context, the chat template).
      one_pass_seconds: the bundle's declared one-pass limit (None: as long as the context holds).
      aligner_piece: the longest audio one aligner pass takes (``ForcedAligner.piece_seconds``),
        asked only for requests with word timestamps (it may load the aligner).
    """

    def __init__(self, max_context: int, prompt_rows: Callable[[TranscribeOptions], int],
                 one_pass_seconds: Optional[float] = None, aligner_piece: Optional[Callable[[], float]] = None):
        self.max_context = int(max_context)
        self.prompt_rows = prompt_rows
        self.bundle_seconds = one_pass_seconds
        self._aligner_piece = aligner_piece

    # ------------------------------------------------------------------ limits
    def aligner_piece(self) -> float:
        """The aligner's piece in seconds (ForcedAligner.piece_seconds)."""
        if self._aligner_piece is None:
            raise ValueError("word timestamps need a forced aligner, and this planner has none")
        return self._aligner_piece()

    def one_pass_seconds(self, o: TranscribeOptions) -> Optional[float]:
        """The longest audio a request with options ``o`` decodes in one pass, in seconds, besides
        the context: the bundle's limit and, with word timestamps, the aligner's piece; None: no
        limit but the context."""
        return seconds_limit(self.bundle_seconds, self.aligner_piece() if o.word_timestamps else None)

    def fits_context(self, n: int, o: TranscribeOptions) -> bool:
        """Whether n samples of 16 kHz audio fit one decoder pass with options ``o``: prompt, audio
        rows and max_new_tokens within the context."""
        n_audio = max(tokens_for_frames(n_frames(n)), 1)
        return self.prompt_rows(o) + n_audio + o.decoding().max_new_tokens <= self.max_context

    def fits_one_pass(self, n: int, o: TranscribeOptions) -> bool:
        """Whether n samples go in one pass when chunks are not asked for: within the one-pass
        seconds and the context."""
        limit = self.one_pass_seconds(o)
        return (limit is None or n <= limit * SAMPLE_RATE) and self.fits_context(n, o)

    def check_context(self, n: int, o: TranscribeOptions) -> None:
        """AudioError when n samples with options ``o`` do not fit one decoder pass (what
        ``Qwen3ASREngine.prepare`` checks before the mel and the prompt, whose size grows with the
        audio, are made)."""
        n_audio = tokens_for_frames(n_frames(n))
        n_prompt, budget = self.prompt_rows(o), o.decoding().max_new_tokens
        need = n_prompt + n_audio + budget
        if need > self.max_context:
            limit_s = max(0.0, (self.max_context - n_prompt - budget) / TOKENS_PER_CHUNK)
            raise AudioError(
                f"audio too long for one pass: {n / SAMPLE_RATE:.1f} s gives {n_audio} audio tokens; with the "
                f"prompt and max_new_tokens={budget} that is {need} tokens, over the decoder context of "
                f"{self.max_context} tokens (about {limit_s:.0f} s of audio). Transcribe it in chunks "
                f"(chunk_size) or cut it shorter.")

    def check_prompt(self, o: TranscribeOptions) -> None:
        """ValueError when the prompt alone (the system turn with the context) and the token
        budget of ``o`` (resolved for its mode) leave no room for audio in the decoder."""
        n_prompt = self.prompt_rows(o)
        budget = o.decoding().max_new_tokens
        if n_prompt + budget >= self.max_context:
            raise ValueError(f"the prompt takes {n_prompt} tokens (the context {len(o.context)} characters) and "
                             f"max_new_tokens={budget}: no room for audio in the decoder context of "
                             f"{self.max_context} tokens; shorten the context or lower max_new_tokens")

    # ------------------------------------------------------------------ files
    def plan(self, n: int, o: TranscribeOptions, vad_ready: Optional[Callable[[], bool]] = None) -> Plan:
        """How ``transcribe`` decodes n samples of 16 kHz audio with options ``o``.

        One pass when forced (``one_pass``) or when chunks are not asked for (chunk_size, VAD,
        max_chunks) and the audio fits (``fits_one_pass``). Over that, VAD speech segments when
        ``vad`` is None and ``vad_ready()`` (default ``vad_available``: the Silero model is there),
        else chunks; asked-for chunks as asked, with the default chunk size made to fit."""
        self.check_prompt(o)
        vad_ready = vad_available if vad_ready is None else vad_ready
        if o.one_pass:
            return Plan(ONE_PASS, o)
        if not o.wants_chunks():
            if self.fits_one_pass(n, o):
                return Plan(ONE_PASS, o)
            limit = self.one_pass_seconds(o)
            why = "the decoder context" if not self.fits_context(n, o) else f"the one-pass limit of {limit:g} s"
            if o.vad is None and vad_ready():
                vad = dataclasses.replace(o, vad=True).vad_options
                logger.info("%.1f s of audio is over %s: decoding VAD speech segments (vad=False for chunks)",
                            n / SAMPLE_RATE, why)
                return Plan(VAD_SEGMENTS, self.chunk_options(o.for_file_chunks(vad=vad)))
            resolved = self.chunk_options(o.for_file_chunks())
            logger.info("%.1f s of audio is over %s: decoding chunks of at most %g s", n / SAMPLE_RATE, why,
                        resolved.chunk_size)
            return Plan(CHUNKS, resolved)
        resolved = o.for_file_chunks(vad=o.vad_options)
        if o.chunk_size is None:
            resolved = self.chunk_options(resolved)
        return Plan(VAD_SEGMENTS if resolved.vad_options else CHUNKS, resolved)

    def chunk_options(self, o: TranscribeOptions) -> TranscribeOptions:
        """``o`` (resolved for chunks) with its chunk size lowered, in whole seconds, until the
        decoder window fits the context (a 1024-position RKLLM model takes 30 s x 2 chunks no
        more) and, with word timestamps, a chunk fits one aligner pass."""
        size = o.chunk_size
        if o.word_timestamps and size > self.aligner_piece():
            size = self.aligner_piece()
            o = dataclasses.replace(o, chunk_size=size)
        while size > 1 and self.window_positions(o) > self.max_context:
            size = float(math.ceil(size) - 1)
            o = dataclasses.replace(o, chunk_size=size)
        return o

    # ------------------------------------------------------------------ streams
    def window_positions(self, o: TranscribeOptions) -> int:
        """Most decoder positions one window of a stream with these (resolved) options can take:
        the prompt with ``memory_num`` full chunks of audio, a language header, and every chunk's
        token budget."""
        audio = o.memory_num * tokens_for_frames(o.chunk_samples // HOP)
        return self.prompt_rows(o) + audio + HEADER_TOKENS + o.memory_num * o.max_new_tokens

    def check_stream(self, o: TranscribeOptions) -> None:
        """ValueError when a stream with these (resolved) options cannot run: a window over the
        context, or, with word timestamps, chunks longer than one aligner pass (each committed
        chunk is aligned in one)."""
        need = self.window_positions(o)
        if need > self.max_context:
            raise ValueError(
                f"chunk_size={o.chunk_size} s x memory_num={o.memory_num} with max_new_tokens={o.max_new_tokens} "
                f"needs up to {need} decoder positions, over the context of {self.max_context}; "
                f"use shorter chunks, a smaller memory_num or max_new_tokens")
        if o.word_timestamps and o.chunk_size > self.aligner_piece():
            raise ValueError(f"chunk_size={o.chunk_size:g} s with word timestamps: a chunk is aligned in one pass, "
                             f"and this aligner takes at most {self.aligner_piece():g} s; use shorter chunks")

    def final_pass(self, n: int, o: TranscribeOptions) -> bool:
        """Whether a finished piece of live speech of n samples gets a one-pass final decode with
        the one-pass options ``o`` (``final_pass_options``): at least one 10 ms frame, at most
        FINAL_PASS_MAX_SECONDS, and what ``fits_one_pass`` takes."""
        return HOP <= n <= FINAL_PASS_MAX_SECONDS * SAMPLE_RATE and self.fits_one_pass(n, o)


def vad_available() -> bool:
    """Whether the Silero VAD model can be found (qwen3asr.vad.find_model)."""
    from .vad import find_model

    try:
        find_model()
    except FileNotFoundError:
        return False
    return True


def final_pass_options(o: TranscribeOptions) -> TranscribeOptions:
    """The options of the one-pass decode of a finished piece of a stream whose options are ``o``:
    the request's language, context, sampling and word timestamps, one pass, the one-pass token
    budget, no ITN (the stream applies it to the committed text)."""
    return dataclasses.replace(o, one_pass=True, chunk_size=None, vad=False, max_chunks=None, max_new_tokens=None,
                               rollback_tokens=None, itn=False, final_pass=False, fallback=o.fallback)


def seconds_limit(bundle_seconds: Optional[float], aligner_piece: Optional[float]) -> Optional[float]:
    """The one-pass limit in seconds from the bundle's limit and the aligner's piece (None where
    either does not apply); None: neither limits it."""
    limits = [x for x in (bundle_seconds, aligner_piece) if x is not None]
    return min(limits) if limits else None


def preload_seconds(seconds: Optional[float], o: TranscribeOptions,
                    bundle_seconds: Optional[float]) -> Optional[float]:
    """The audio length whose encoder graphs an engine loads at start (Qwen3ASREngine's
    ``preload_seconds``): ``seconds`` when a request of that length with options ``o`` would go in
    one pass as far as is known before the models load (forced, or no chunks asked for and within
    the bundle's limit and, with words, MAX_ALIGN_SECONDS, which an aligner's piece never
    exceeds), else None. The context is not known yet: a preload is a hint that at worst loads a
    graph the request then does not run. ``seconds`` is checked by BackendOptions."""
    from .aligner.model import MAX_ALIGN_SECONDS

    if seconds is None or o.one_pass:
        return seconds
    if o.wants_chunks():
        return None
    limit = seconds_limit(bundle_seconds, MAX_ALIGN_SECONDS if o.word_timestamps else None)
    if limit is not None and seconds > limit:
        logger.debug("no preload: %.1f s is over the one-pass limit of %g s", seconds, limit)
        return None
    return seconds


__all__ = ["CHUNKS", "FINAL_PASS_MAX_SECONDS", "HEADER_TOKENS", "ONE_PASS", "Plan", "Planner", "VAD_SEGMENTS",
           "final_pass_options", "preload_seconds", "seconds_limit",
           "vad_available"]
