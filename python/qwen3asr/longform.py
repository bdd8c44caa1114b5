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
import contextlib
import logging
import math
import os
import time
from typing import Callable, Iterator, Optional

import numpy as np

from . import checks
from . import mel as melmod
from .audio import SAMPLE_RATE, ArrayAudio, AudioFile, checked_rate, prepare_audio
from .decoding import FINISH_RANK
from .languages import language_code
from .mel import LEFT_CONTEXT, LOOKAHEAD
from .results import Transcription, TranscriptionStats, decoder_costs
from .options import TranscribeOptions
from .streaming import StreamSession
from .work import NO_WORK, Work

logger = logging.getLogger(__name__)

CEILING_BLOCK = melmod.BLOCK_FRAMES * melmod.HOP_LENGTH  # samples per block when scanning the clip maximum (10 s)
OVERLAP_FEED_CHUNKS = 4  # chunks of audio fed at once when the session overlaps encoder and decoder


def selection(n_samples: int, start_second: float = 0.0, duration: Optional[float] = None) -> tuple[int, int]:
    """The samples [a, b) of [start_second, start_second + duration) in n_samples of 16 kHz audio;
    ValueError naming the length."""
    total = n_samples / SAMPLE_RATE
    for p in (checks.number("start_second", start_second, 0, kind="a number of seconds"),
              checks.number("duration", duration, 0, kind="a number of seconds", low_open=True, optional=True)):
        if p:
            raise ValueError(p)
    if start_second >= total:
        raise ValueError(f"start_second={start_second} is past the end of the audio ({total:.2f} s)")
    a = int(round(start_second * SAMPLE_RATE))
    # a duration past the end takes the rest (compared in seconds: a huge one is never multiplied out)
    b = n_samples if duration is None or duration >= total - start_second else \
        min(n_samples, a + int(round(duration * SAMPLE_RATE)))
    if b - a < melmod.HOP_LENGTH:
        raise ValueError(f"the selected audio is shorter than 10 ms ({(b - a) / SAMPLE_RATE * 1000:.1f} ms)")
    return a, b


@contextlib.contextmanager
def open_source(audio, sample_rate: Optional[int] = None) -> Iterator:
    """Any audio input as something read by sample ranges: an AudioFile given is used as it is
    (its caller closes it); a path or binary file object is opened as an AudioFile (read block by
    block, never held whole) and closed after; anything else is prepared as an array
    (prepare_audio, at ``sample_rate``) in an ArrayAudio."""
    if isinstance(audio, AudioFile):
        yield audio
    elif isinstance(audio, np.ndarray) or not isinstance(audio, (str, os.PathLike)) and not hasattr(audio, "read"):
        yield ArrayAudio(prepare_audio(audio, sample_rate))
    else:
        if sample_rate is not None:
            checked_rate(sample_rate)  # checked even when ignored, as prepare_audio does
        with contextlib.closing(AudioFile(audio)) as source:
            yield source


def _reader(audio):
    """An AudioFile or ArrayAudio for audio given as either or as a (n,) float32 array."""
    return ArrayAudio(audio) if isinstance(audio, np.ndarray) else audio


def pieces(audio, start: int, stop: int, size: int) -> Iterator[np.ndarray]:
    """The samples [start, stop) of ``audio`` (an (n,) array or an AudioFile) in pieces of ``size``
    (the last one shorter); holds at most one piece and one read block."""
    held, n = [], 0
    for block in _reader(audio).blocks(start, stop):
        while block.shape[0]:
            take = block[:size - n]
            held.append(take)
            n += take.shape[0]
            block = block[take.shape[0]:]
            if n == size:
                yield held[0] if len(held) == 1 else np.concatenate(held)
                held, n = [], 0
    if n:
        yield held[0] if len(held) == 1 else np.concatenate(held)


def clip_ceiling(audio, n_mels: int, start: int = 0, stop: Optional[int] = None) -> float:
    """Maximum log10 mel power of the clip [start, stop) of ``audio`` (an (n,) 16 kHz array or an
    AudioFile), as the offline front end's clamp uses it.

    Scanned in CEILING_BLOCK pieces with real neighbours at their edges, so memory stays small."""
    stop = _reader(audio).n_samples if stop is None else stop
    top = -math.inf
    buf, buf_start, done = np.zeros(0, np.float32), start, start  # frames computed up to sample `done`
    for piece in pieces(audio, start, stop, CEILING_BLOCK):
        buf = np.concatenate([buf, piece])
        end = buf_start + buf.shape[0]
        last = end >= stop
        hi = stop if last else done + (end - LOOKAHEAD - done) // melmod.HOP_LENGTH * melmod.HOP_LENGTH
        if hi > done:
            frames = melmod.piece_log_mel_power(buf, done - buf_start, hi - buf_start, n_mels,
                                                left_edge=start - buf_start,
                                                right_edge=stop - buf_start if last else None)
            if frames.size:
                top = max(top, float(frames.max()))
            done = hi
        keep = max(buf_start, done - LEFT_CONTEXT)  # the next piece's left context
        buf, buf_start = buf[keep - buf_start:], keep
    return top


def transcribe_long(engine, audio, options: TranscribeOptions = TranscribeOptions(), *,
                    offset: float = 0.0, start: int = 0, stop: Optional[int] = None,
                    on_text: Optional[Callable[[str], None]] = None,
                    progress: Optional[Callable[[float, float], None]] = None, work: Work = NO_WORK) -> Transcription:
    """Transcribe 16 kHz audio of any length in chunks: ``audio`` is an (n,) float32 array or an
    AudioFile (read block by block, never whole), of which the samples [start, stop) are
    transcribed (stop None: to the end). Returns a Transcription with ``segments`` (times in
    seconds of the selection + ``offset``). ``options``: the request's settings (the long-file
    defaults filled in for None fields: 30 s chunks, rollback 5, 256 tokens per chunk; ``vad``
    None is off here, the engine's plan() decides it); ``max_chunks`` stops early (truncated).
    ``work``: scheduling hooks, one unit per chunk (see qwen3asr.work). Memory: the session's
    (chunk_size x memory_num of audio and its embeddings) and a read block, whatever the length;
    only the transcript grows with it."""
    t0 = time.perf_counter()
    opts = options.for_file_chunks(vad=options.vad_options)
    max_chunks = opts.max_chunks
    stop = _reader(audio).n_samples if stop is None else stop
    ceiling = clip_ceiling(audio, engine.n_mels, start, stop)  # of all the selected audio, as the offline front end
    stopped = False
    if max_chunks is not None and opts.vad_options is None and stop - start > max_chunks * opts.chunk_samples:
        stop = start + max_chunks * opts.chunk_samples  # the audio the session's cap lets through
        stopped = True
    session = StreamSession(engine, opts, on_text=on_text, work=work, mel_ceiling=ceiling, bounded=False)
    total = (stop - start) / SAMPLE_RATE
    # With overlap, pieces of several chunks: the session then has the next chunk ready to encode
    # while it decodes one (the result does not depend on the piece sizes).
    step = opts.chunk_samples * (OVERLAP_FEED_CHUNKS if session.overlap else 1)
    done = start
    for piece in pieces(audio, start, stop, step):
        r = session.feed_audio(piece)
        done += piece.shape[0]
        if progress is not None:
            progress((done - start) / SAMPLE_RATE, total)
        if max_chunks is not None and r.stats.chunks >= max_chunks and done < stop:
            stopped = True  # the session decodes nothing more: no need to feed the rest
            break
    r = session.finish()
    segments = tuple(s.shifted(offset) for s in r.segments)
    lang = _main_language(segments) or r.language
    s = r.stats
    stats = TranscriptionStats(
        audio_seconds=total, encoder_ms=s.encoder_ms, encoder_calls=s.encoder_calls, **decoder_costs(s),
        total_ms=(time.perf_counter() - t0) * 1000, backend=engine.backend,
        fallback_tries=s.fallback_tries, loops=s.loops)
    worst = r.finish_reason
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
