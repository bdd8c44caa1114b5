"""Long recordings: the streaming mechanism run over a whole file.

The file is fed to a StreamSession (qwen3asr.streaming) in chunk-size pieces, so each second of audio is encoded
once and the decoder sees ``memory_num`` chunks at a time with the committed text of the
window as prefix. Differences from a live stream, because the whole file is known:

- the log-mel clamp uses the maximum of the whole selected audio (the offline value), not a
  running maximum, so every mel frame equals the offline front end's (VAD: per file, not
  per segment);
- ``vad`` segments the file first (Silero VAD): silence is never encoded or decoded, each
  speech segment starts a fresh window and its text is committed at its end.

Segments: one per chunk with text (VAD: chunks are cut inside speech segments, so short
utterances are one segment each), with times in seconds of the file.
"""

from __future__ import annotations

import collections
import logging
import math
import time
from typing import Callable, Optional

import numpy as np

from . import checks
from . import mel as melmod
from .audio import SAMPLE_RATE
from .decoding import FINISH_RANK
from .languages import language_code
from .results import Segment, Transcription, TranscriptionStats, Word
from .options import TranscribeOptions
from .streaming import StreamSession
from .work import NO_WORK, Work

logger = logging.getLogger(__name__)

CEILING_BLOCK = 60 * SAMPLE_RATE  # samples per block when scanning the clip maximum (60 s)
OVERLAP_FEED_CHUNKS = 4  # chunks of audio fed at once when the session overlaps encoder and decoder


def select_audio(pcm: np.ndarray, start_second: float = 0.0, duration: Optional[float] = None) -> np.ndarray:
    """The part [start_second, start_second + duration) of (n,) 16 kHz audio; errors name the length."""
    total = pcm.shape[0] / SAMPLE_RATE
    for p in (checks.number("start_second", start_second, 0, kind="a number of seconds"),
              checks.number("duration", duration, 0, kind="a number of seconds", low_open=True, optional=True)):
        if p:
            raise ValueError(p)
    if start_second >= total:
        raise ValueError(f"start_second={start_second} is past the end of the audio ({total:.2f} s)")
    a = int(round(start_second * SAMPLE_RATE))
    # a duration past the end takes the rest (compared in seconds: a huge one is never multiplied out)
    b = pcm.shape[0] if duration is None or duration >= total - start_second else \
        min(pcm.shape[0], a + int(round(duration * SAMPLE_RATE)))
    if b - a < melmod.HOP_LENGTH:
        raise ValueError(f"the selected audio is shorter than 10 ms ({(b - a) / SAMPLE_RATE * 1000:.1f} ms)")
    return pcm[a:b]


def clip_ceiling(pcm: np.ndarray, n_mels: int) -> float:
    """Maximum log10 mel power of the whole clip, as the offline front end's clamp uses it.

    Scanned in 60 s blocks with real neighbours at block edges, so memory stays small.
    """
    n = pcm.shape[0]
    top = -math.inf
    for b in range(0, n, CEILING_BLOCK):
        e = min(n, b + CEILING_BLOCK)
        frames = melmod.piece_log_mel_power(pcm, b, e, n_mels, right_edge=n if e == n else None)
        if frames.size:
            top = max(top, float(frames.max()))
    return top


def transcribe_long(engine, pcm: np.ndarray, options: TranscribeOptions = TranscribeOptions(), *,
                    offset: float = 0.0, on_text: Optional[Callable[[str], None]] = None,
                    progress: Optional[Callable[[float, float], None]] = None, work: Work = NO_WORK) -> Transcription:
    """Transcribe (n,) float32 16 kHz audio of any length in chunks; returns a Transcription
    with ``segments`` (times in seconds + ``offset``). ``options``: the request's settings (the
    long-file defaults filled in for None fields: 30 s chunks, rollback 5, 256 tokens per chunk;
    ``vad`` None is off here, the engine's plan() decides it); ``max_chunks`` stops early
    (truncated). ``work``: scheduling hooks, one unit per chunk (see qwen3asr.work)."""
    t0 = time.perf_counter()
    opts = options.for_file_chunks(vad=options.vad_options)
    max_chunks = opts.max_chunks
    ceiling = clip_ceiling(pcm, engine.n_mels)  # of all the selected audio, as the offline front end
    stopped = False
    if max_chunks is not None and opts.vad_options is None and pcm.shape[0] > max_chunks * opts.chunk_samples:
        pcm = pcm[:max_chunks * opts.chunk_samples]  # the audio the session's cap lets through
        stopped = True
    session = StreamSession(engine, opts, on_text=on_text, work=work, mel_ceiling=ceiling)
    total = pcm.shape[0] / SAMPLE_RATE
    # With overlap, pieces of several chunks: the session then has the next chunk ready to encode
    # while it decodes one (the result does not depend on the piece sizes).
    step = opts.chunk_samples * (OVERLAP_FEED_CHUNKS if session.overlap else 1)
    for a in range(0, pcm.shape[0], step):
        r = session.feed_audio(pcm[a:a + step])
        if progress is not None:
            progress(min(total, (a + step) / SAMPLE_RATE), total)
        if max_chunks is not None and len(r.chunks) >= max_chunks and a + step < pcm.shape[0]:
            stopped = True  # the session decodes nothing more: no need to feed the rest
            break
    r = session.finish()
    segments = tuple(Segment(s.start + offset, s.end + offset, s.text, s.language,
                             tuple(Word(w.word, round(w.start + offset, 3), round(w.end + offset, 3)) for w in s.words),
                             s.finish_reason)
                     for s in r.segments)
    lang = _main_language(segments) or r.language
    s = r.stats
    stats = TranscriptionStats(
        audio_seconds=total, encoder_ms=s.encoder_ms, encoder_calls=s.encoder_calls,
        prefill_tokens=s.prefill_tokens, prefill_ms=s.prefill_ms, decode_tokens=s.decode_tokens,
        decode_ms=s.decode_ms, total_ms=(time.perf_counter() - t0) * 1000, backend=engine.backend,
        fallback_tries=s.fallback_tries, loops=s.loops)
    worst = max((c.finish_reason for c in r.chunks), key=lambda f: FINISH_RANK.get(f, 0), default="eos")
    logger.info("%.1f s in %d chunks: %.1f prefill tokens/s, %.2f of the audio encoded", total, s.chunks,
                s.prefill_tokens_per_second, s.encoded_fraction)
    return Transcription(text=r.text, language=lang, language_code=language_code(lang) if lang else None,
                         token_ids=r.token_ids, raw_text=engine.tokenizer.decode(r.token_ids),
                         truncated=r.truncated or stopped, stats=stats, segments=segments,
                         finish_reason=worst if worst in FINISH_RANK else "eos")


def _main_language(segments) -> Optional[str]:
    """The language with the most segment time (None when no segment has one)."""
    time_by = collections.Counter()
    for s in segments:
        if s.language:
            time_by[s.language] += s.end - s.start
    return time_by.most_common(1)[0][0] if time_by else None
