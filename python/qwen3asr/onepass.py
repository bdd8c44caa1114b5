"""One pass: a clip that fits the decoder decoded whole, as the official algorithm does.

``transcribe_one_pass`` is what ``Qwen3ASREngine.transcribe`` runs when the plan
(qwen3asr.plan) says one pass: prepare (log-mel, encoder, prompt), one decoder run with the loop
guard and the fallback tries (qwen3asr.decoding), then the result: its one segment, its words
(qwen3asr.aligner.segments) on the raw text, and ITN last, as the official chain does. Long
audio goes through qwen3asr.longform instead.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Optional

import numpy as np

from .audio import SAMPLE_RATE
from .decoding import FINISH_RANK, DecodeOutcome
from .languages import language_code
from .options import TranscribeOptions
from .prompt import parse_asr_output
from .results import Segment, Transcription, TranscriptionStats, decoder_costs
from .text import TextStreamer
from .work import Work


def transcribe_one_pass(engine, pcm: np.ndarray, o: TranscribeOptions, *, offset: float = 0.0,
                        on_text: Optional[Callable[[str], None]] = None, work: Work, draft=(),
                        front=None) -> Transcription:
    """The Transcription of (n,) float32 16 kHz ``pcm`` in one decoder pass, its segment timed
    from ``offset`` seconds; words with ``o.word_timestamps`` (the engine's aligner), ITN with
    ``o.itn``. One unit of model work for the decode, one per aligned segment. ``draft``: the ids
    the decode is expected to give (a streamed transcript), verified in its prefill (the result
    is the decode's own either way; qwen3asr.decoding.verify_draft). ``front``: its log-mel and
    conv stems partly computed ahead (Qwen3ASREngine.prepare)."""
    with work.unit():
        result = decode_one_pass(engine, pcm, o, on_text, work, draft, front)
    raw = result.text
    end = offset + pcm.shape[0] / SAMPLE_RATE
    segments = (Segment(offset, end, raw, result.language, finish_reason=result.finish_reason),) if raw else ()
    result = dataclasses.replace(result, segments=segments)
    if o.word_timestamps:  # on the raw text, before ITN, as the official chain
        from .aligner.segments import align_segments

        def clip(seg):
            a = max(0, int(round((seg.start - offset) * SAMPLE_RATE)))
            b = min(pcm.shape[0], int(round((seg.end - offset) * SAMPLE_RATE)))
            return pcm[a:b], offset + a / SAMPLE_RATE

        result = dataclasses.replace(result, segments=tuple(align_segments(
            engine.aligner, result.segments, clip, language=o.language, default_language=result.language,
            work=work, spans=o.word_spans, engine=engine)))
    if o.itn and raw:
        from .itn import inverse_normalize

        text = inverse_normalize(raw, result.language)
        result = dataclasses.replace(result, text=text, segments=tuple(
            dataclasses.replace(seg, text=text) for seg in result.segments))
    return result


def decode_one_pass(engine, pcm: np.ndarray, o: TranscribeOptions, on_text, work: Work, draft=(),
                    front=None) -> Transcription:
    """The decoder's Transcription of ``pcm`` (no segments yet): ``on_text`` gets its text as it is
    generated (such text cannot be redone, so fallback tries are off unless ``o.fallback``)."""
    req = engine.prepare(pcm, o, front=front)
    in_text = o.language is not None or o.compact_prompt  # the answer starts inside the transcript
    streamer = TextStreamer(engine.tokenizer, on_text, in_text) if on_text else None

    def on_token(tok: int) -> bool:
        if streamer is not None:
            streamer.push(tok)
        return not work.cancelled

    fallback = o.fallback if o.fallback is not None else on_text is None  # printed text cannot be redone
    out = engine.decode(req.embeds, o.decoding(), audio_seconds=req.audio_seconds,
                        prefix_len=req.prompt.audio_start, fallback=fallback, on_token=on_token, draft=draft)
    work.check()
    if streamer:
        streamer.finish()
    return transcription(engine, out, o, req)


def transcription(engine, out: DecodeOutcome, options: TranscribeOptions, req) -> Transcription:
    """The Transcription of one decoder run ``out`` for the prepared request ``req``
    (Qwen3ASREngine.prepare)."""
    tokens, ds = out.tokens, out.stats
    raw = engine.tokenizer.decode(tokens, skip_special_tokens=True)
    lang, text = parse_asr_output(raw, options.language, text_only=options.compact_prompt)
    stats = TranscriptionStats(
        audio_seconds=req.audio_seconds, encoder_ms=req.encoder_ms, encoder_calls=req.encoder_calls,
        **decoder_costs(ds), total_ms=(time.perf_counter() - req.t0) * 1000, backend=engine.backend,
        runtime_perf=ds.runtime_perf, fallback_tries=out.tries, loops=int(out.looped),
        draft_tokens=ds.draft_tokens, verified_tokens=ds.verified_tokens)
    return Transcription(text=text, language=lang, language_code=language_code(lang) if lang else None,
                         token_ids=tuple(int(t) for t in tokens), raw_text=raw,
                         truncated=ds.finish_reason == "length", stats=stats,
                         finish_reason=ds.finish_reason if ds.finish_reason in FINISH_RANK else "eos")


__all__ = ["decode_one_pass", "transcribe_one_pass", "transcription"]
