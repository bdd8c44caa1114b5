"""Words for transcripts: the aligner an engine uses, loaded with the engine's settings, and the
words of a list of timed segments.

The engine (one-pass files) and the stream session (committed chunks, finished pieces; long
files through it) both give their segments words through ``align_segments``: each segment's
audio aligned with its raw text in its language, checked for a collapse and fitted to the speech
(qwen3asr.aligner.refine), segments in languages the aligner does not cover left without words
and logged once per language.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Callable, Iterable, Optional

import numpy as np

from ..work import NO_WORK, Work

logger = logging.getLogger(__name__)


def resolve_aligner_dir(given: Optional[str], model_dir: str) -> Optional[str]:
    """The aligner bundle an engine of ``model_dir`` uses: ``given``, else ``$QWEN3ASR_ALIGNER``,
    else the bundled demo aligner when ``model_dir`` is the bundled default model; None when
    there is none."""
    from ..bundle import BUNDLED_ALIGNER, bundled_model_dir
    from .model import DEFAULT_ALIGNER_ENV

    if given is not None:
        return os.fspath(given)
    env = os.environ.get(DEFAULT_ALIGNER_ENV)
    if env:
        return env
    default = bundled_model_dir()
    if default is not None and os.path.realpath(model_dir) == os.path.realpath(default):
        demo = os.path.join(os.path.dirname(default), BUNDLED_ALIGNER)
        if os.path.isdir(demo):
            return demo
    return None


def load_aligner(aligner_dir: Optional[str], backend: str, options):
    """The ForcedAligner of ``aligner_dir`` on an engine's ``backend`` with its BackendOptions
    ``options``: no encoder preload (that hint is the ASR encoder's), and its own decoder dtype
    where it has not the one the ASR decoder was forced to. AlignmentError when there is no
    aligner to load."""
    from ..bundle import Bundle
    from ..hub import resolve_model
    from .model import DEFAULT_ALIGNER_ENV, AlignmentError, ForcedAligner

    if aligner_dir is None:
        raise AlignmentError(
            f"word timestamps need a forced aligner: pass Qwen3ASREngine(aligner=DIR) (CLI --aligner DIR) or "
            f"set {DEFAULT_ALIGNER_ENV}; docs/aligner.md converts Qwen3-ForcedAligner-0.6B into one")
    t0 = time.perf_counter()
    aligner_dir = resolve_model(aligner_dir, "aligner", memory=options.memory, backend=backend)
    options = dataclasses.replace(options, preload_seconds=None)
    if options.decoder_dtype != "auto" and options.decoder_dtype not in Bundle.load(aligner_dir).decoder_dtypes():
        # decoder_dtype names the ASR decoder; an aligner without that dtype picks its own
        logger.info("the aligner has no %s scorer: it picks its own (auto)", options.decoder_dtype)
        options = dataclasses.replace(options, decoder_dtype="auto")
    aligner = ForcedAligner(aligner_dir, backend=backend, options=options)
    logger.info("loaded the aligner %s in %.0f ms", aligner_dir, (time.perf_counter() - t0) * 1000)
    return aligner


def align_transcript(engine, audio, text: str, language: Optional[str] = None, sample_rate: Optional[int] = None,
                     start_second: float = 0.0, word_spans: str = "speech") -> list:
    """``Qwen3ASREngine.align``: the Words of ``text`` in ``audio`` (any AudioInput, any length:
    qwen3asr.aligner.long) with the engine's aligner, their spans as ``word_spans`` says
    (TranscribeOptions.word_spans); ``language`` None is detected with the engine's ASR model
    first (its main language over the audio)."""
    from .. import checks
    from ..audio import MAX_STREAM_SECONDS, prepare_audio
    from ..options import WORD_SPANS
    from .model import AlignmentError

    problem = checks.number("start_second", start_second, 0, MAX_STREAM_SECONDS, kind="a number of seconds") or \
        checks.choice("word_spans", word_spans, WORD_SPANS)
    if problem:
        raise ValueError(problem)
    pcm = prepare_audio(audio, sample_rate)
    if language is None:
        language = engine.transcribe(pcm, language=None, word_timestamps=False).language  # the main one
        if language is None:
            raise AlignmentError("the ASR model heard no language in this audio; give language=")
    from .long import align_long

    return [w for seg in align_long(engine, pcm, text, language, offset=start_second, spans=word_spans)
            for w in seg.words]


def align_segments(aligner, segments: Iterable, clip: Callable[[object], tuple[np.ndarray, float]], *,
                   language: Optional[str] = None, default_language: Optional[str] = None,
                   warned: Optional[set] = None, work: Work = NO_WORK, spans: str = "speech",
                   engine=None) -> list:
    """``segments`` (qwen3asr.results.Segment) with their words, in order.

    clip: a segment's audio, (n,) float32 16 kHz, and the time in seconds of its first sample.
    language: the request's forced language (None: each segment's own, else ``default_language``).
    warned: languages already logged as not covered (updated; None: log each here once).
    work: scheduling hooks, one unit of model work per aligned segment.
    spans: TranscribeOptions.word_spans, "speech", "raw" or "checked" (qwen3asr.aligner.refine):
    every segment's words are checked for a collapse (flagged in ``Segment.words_flag``);
    "speech" aligns a collapsed segment again in pieces and fits the spans to the speech;
    "checked" also checks the words of the pieces at pauses with ``engine``'s ASR model
    (qwen3asr.aligner.checked; required then).
    A segment without text, or in a language the aligner does not cover, keeps no words."""
    from .checked import AsrReader
    from .refine import refined

    if spans == "checked" and engine is None:
        raise ValueError('word_spans "checked" needs the ASR engine (engine=)')
    from .shifted import for_spans

    reader = AsrReader(engine) if spans == "checked" else None
    timed = for_spans(aligner, spans)
    warned = set() if warned is None else warned
    out = []
    for seg in segments:
        lang = language or seg.language or default_language
        if not seg.text or not aligner.supports(lang):
            if seg.text and lang not in warned:
                warned.add(lang)
                logger.warning("no word timestamps for %s text: the aligner covers %s", lang or "undetected",
                               ", ".join(aligner.languages))
            out.append(seg)
            continue
        pcm, start = clip(seg)
        with work.unit():
            words, flag = refined(timed, pcm, start, timed.align(pcm, seg.text, lang, offset=start), lang, spans,
                                  reader, seg.text)
        out.append(dataclasses.replace(seg, words=words, words_flag=flag))
    return out


__all__ = ["align_segments", "align_transcript", "load_aligner", "resolve_aligner_dir"]
