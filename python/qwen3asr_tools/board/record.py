"""Real runs of the engine, recorded as accountings (any backend whose encoder is an AudioEncoder).

``record_stream`` (a stream fed in real time, in ``FEED_SECONDS`` pieces: when each chunk's audio
was complete), ``record_file`` (a file as ``engine.transcribe`` decodes it) and ``record_one_pass``
run the engine and return an ``Accounting`` with what the run computed: the encoder graphs
(``graph_log``, at the encoder's runner), the decoder's prefill and decode tokens (the session's
own ChunkStats) and, with ``word_timestamps=True``, every alignment (``align_log``). Only counts
are kept, never CPU times. ``joined_speech``: the continuous-speech input of the report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from typing import List, Optional, Sequence, Tuple

from qwen3asr.audio import SAMPLE_RATE

from .accounting import Accounting, AlignWork, ChunkWork

FEED_SECONDS = 0.02  # piece size when a stream is fed to measure when each chunk became ready


class _GraphLog:
    """Wraps an EncoderRunner and records every graph call as (part, seconds)."""

    def __init__(self, runner):
        self._runner = runner
        self.calls: List[Tuple[str, float]] = []

    def run_merged(self, variant, *args):
        self.calls.append(("merged", float(variant.seconds)))
        return self._runner.run_merged(variant, *args)

    def run_frontend(self, *args):
        self.calls.append(("frontend", 1.0))
        return self._runner.run_frontend(*args)

    def run_backend(self, variant, *args):
        self.calls.append(("backend", float(variant.seconds)))
        return self._runner.run_backend(variant, *args)

    def __getattr__(self, name):  # close() and anything else the backend asks of its runner
        return getattr(self._runner, name)


@contextlib.contextmanager
def graph_log(engine):
    """Record the encoder graphs ``engine`` runs (any backend whose encoder is an AudioEncoder)."""
    enc = engine.encoder
    log = _GraphLog(enc.runner)
    enc.runner = log
    try:
        yield log
    finally:
        enc.runner = log._runner


class _Counted:
    """Wraps an object and calls ``record(args)`` before each call of its method ``name``."""

    def __init__(self, inner, name: str, record):
        self._inner, self._name, self._record = inner, name, record

    def __getattr__(self, attr):
        if attr == self._name:
            def call(*args, **kw):
                self._record(args)
                return getattr(self._inner, attr)(*args, **kw)
            return call
        return getattr(self._inner, attr)

    def __call__(self, *args, **kw):  # a callable object (the embedding table)
        self._record(args)
        return self._inner(*args, **kw)


class AlignLog:
    """What the forced aligner of an engine computes while it is recorded (``align_log``).

    Attributes: works (the AlignWork of every alignment that ran; ``ready`` is filled in by
    the record functions), rows (distinct embedding rows the aligner looked up), graphs (its
    encoder's _GraphLog), runs (ASR decoder runs so far)."""

    def __init__(self):
        self.works: List[AlignWork] = []
        self.rows: set = set()
        self.runs = 0
        self.graphs: Optional[_GraphLog] = None
        self._scored: List[Tuple[int, int]] = []


@contextlib.contextmanager
def align_log(engine):
    """Record every alignment ``engine``'s aligner makes (loads the aligner) and count the engine's
    decoder runs, so that each alignment knows before which run it came."""
    log = AlignLog()
    aligner = engine.aligner
    runner, scorer, table = aligner.encoder.runner, aligner.scorer, aligner.embeddings
    log.graphs = _GraphLog(runner)
    decode, align = engine.decode, aligner.align

    def counted_decode(*args, **kw):
        try:
            return decode(*args, **kw)
        finally:
            log.runs += 1

    def recorded_align(audio, text, language, *, sample_rate=None, offset=0.0, **kw):
        n_graphs, n_scored = len(log.graphs.calls), len(log._scored)
        out = align(audio, text, language, sample_rate=sample_rate, offset=offset, **kw)
        if len(log._scored) > n_scored:  # a text without words is not scored, nor encoded
            from qwen3asr.audio import prepare_audio

            positions, slots = log._scored[-1]
            seconds = prepare_audio(audio, sample_rate).shape[0] / SAMPLE_RATE
            log.works.append(AlignWork(start=float(offset), end=float(offset) + seconds, ready=float(offset) + seconds,
                                       after_runs=log.runs, graphs=tuple(log.graphs.calls[n_graphs:]),
                                       positions=positions, slots=slots))
        return out

    shadowed = [(obj, name, obj.__dict__.get(name)) for obj, name in ((engine, "decode"), (aligner, "align"))]
    aligner.encoder.runner = log.graphs
    aligner.scorer = _Counted(scorer, "score", lambda a: log._scored.append((len(a[0]), len(a[1]))))
    aligner.embeddings = _Counted(table, "__call__", lambda a: log.rows.update(int(i) for i in a[0]))
    engine.decode, aligner.align = counted_decode, recorded_align
    try:
        yield log
    finally:
        aligner.encoder.runner, aligner.scorer, aligner.embeddings = runner, scorer, table
        for obj, name, before in shadowed:  # back to the method, or to an outer log's wrapper
            if before is None:
                delattr(obj, name)
            else:
                setattr(obj, name, before)


def _alignments(log: Optional[AlignLog], chunks: Sequence[ChunkWork]) -> Tuple[AlignWork, ...]:
    """The recorded alignments, each ready when the chunk that ends its segment was (its own end
    if none does: an offline run's chunks are all ready at 0)."""
    if log is None:
        return ()
    out = []
    for a in log.works:
        ends = [c.ready for c in chunks if abs(c.end - a.end) < 1e-3]
        out.append(dataclasses.replace(a, ready=ends[0] if ends else a.ready))
    return tuple(out)


def chunk_works(chunks, calls, ready: Sequence[float]) -> Tuple[ChunkWork, ...]:
    """ChunkStats of a session + the recorded graph calls -> ChunkWork (checks they agree)."""
    if sum(c.encoder_calls for c in chunks) != len(calls):
        raise RuntimeError(f"internal: {len(calls)} encoder calls recorded, the session counted "
                           f"{sum(c.encoder_calls for c in chunks)}")
    out, i = [], 0
    for c, r in zip(chunks, ready):
        g = tuple(calls[i:i + c.encoder_calls])
        i += c.encoder_calls
        out.append(ChunkWork(start=c.start, end=c.end, ready=r, graphs=g, prefill_tokens=int(c.prefill_tokens),
                             decode_tokens=int(c.decode_tokens), prefix_tokens=int(c.prefix_tokens)))
    return tuple(out)


# The runs are recorded with the official word times: one aligner pass per segment. With "speech" a
# collapsed segment is aligned again in pieces (qwen3asr.aligner.refine); the random-weight aligner
# the runs use collapses on most segments, which a trained one does not, and would count those passes.
WORD_SPANS = "raw"


def record_stream(engine, pcm, label: str, feed_seconds: float = FEED_SECONDS, **stream_options):
    """Stream (n,) float32 16 kHz ``pcm`` in real-time order through ``engine.create_stream(**stream_options)``
    in pieces of ``feed_seconds``; returns (Accounting, StreamResult). A chunk's ``ready`` is the
    input time at the end of the piece whose feeding decoded it (finish(): the end of the audio)."""
    step = max(1, int(round(feed_seconds * SAMPLE_RATE)))
    ready: List[float] = []
    with _recording(engine, bool(stream_options.get("word_timestamps"))) as (log, words):
        session = engine.create_stream(**dict({"word_spans": WORD_SPANS}, **stream_options))
        for a in range(0, pcm.shape[0], step):
            r = session.feed_audio(pcm[a:a + step])
            t = min(pcm.shape[0], a + step) / SAMPLE_RATE
            ready.extend([t] * (len(r.chunks) - len(ready)))
        r = session.finish()
    total = pcm.shape[0] / SAMPLE_RATE
    ready.extend([total] * (len(r.chunks) - len(ready)))
    chunks = chunk_works(r.chunks, log.calls, ready)
    return Accounting(label=label, audio_seconds=total, chunks=chunks, live=True, system_tokens=system_tokens(engine),
                      alignments=_alignments(words, chunks)), r


@contextlib.contextmanager
def _recording(engine, words: bool):
    """(graph log of the ASR encoder, align log or None without ``words``)."""
    with graph_log(engine) as log:
        if not words:
            yield log, None
            return
        with align_log(engine) as alog:
            yield log, alog


def record_file(engine, pcm, label: str, chunk_size: float = 30.0, memory_num: int = 2, rollback_tokens: int = 5,
                max_new_tokens: int = 256, vad=True, word_timestamps: bool = False):
    """A file the way ``engine.transcribe(pcm, vad=..., chunk_size=...)`` decodes it (qwen3asr.longform:
    a StreamSession with the clip's mel ceiling, fed in chunk-size pieces); returns (Accounting, StreamResult).
    transcribe_long returns totals only, so the session is run here with the same options."""
    from qwen3asr.longform import clip_ceiling
    from qwen3asr.streaming import StreamOptions, StreamSession

    opts = StreamOptions(chunk_size=chunk_size, memory_num=memory_num, rollback_tokens=rollback_tokens,
                         max_new_tokens=max_new_tokens, vad=vad, word_timestamps=word_timestamps,
                         word_spans=WORD_SPANS)
    with _recording(engine, word_timestamps) as (log, words):
        session = StreamSession(engine, opts, mel_ceiling=clip_ceiling(pcm, engine.n_mels))
        for a in range(0, pcm.shape[0], opts.chunk_samples):
            session.feed_audio(pcm[a:a + opts.chunk_samples])
        r = session.finish()
    chunks = chunk_works(r.chunks, log.calls, [0.0] * len(r.chunks))
    return Accounting(label=label, audio_seconds=pcm.shape[0] / SAMPLE_RATE, chunks=chunks, live=False,
                      system_tokens=system_tokens(engine),
                      alignments=tuple(dataclasses.replace(a, ready=0.0) for a in _alignments(words, ()))), r


def record_one_pass(engine, pcm, label: str, max_new_tokens: int = 256, word_timestamps: bool = False):
    """The whole clip in one decoder pass (``engine.transcribe(pcm, one_pass=True)``), with its
    alignment after it when ``word_timestamps``; returns (Accounting, Transcription)."""
    with _recording(engine, word_timestamps) as (log, words):
        t = engine.transcribe(pcm, max_new_tokens=max_new_tokens, one_pass=True, word_timestamps=word_timestamps,
                              word_spans=WORD_SPANS)
    s = t.stats
    total = pcm.shape[0] / SAMPLE_RATE
    work = ChunkWork(start=0.0, end=total, ready=total, graphs=tuple(log.calls), prefill_tokens=int(s.prefill_tokens),
                     decode_tokens=int(s.decode_tokens))
    return Accounting(label=label, audio_seconds=total, chunks=(work,), live=False,
                      system_tokens=system_tokens(engine), alignments=_alignments(words, (work,))), t


def system_tokens(engine) -> int:
    """Prompt tokens of the empty system block (``<|im_start|>system\\n<|im_end|>\\n``)."""
    return len(engine.tokenizer.encode("<|im_start|>system\n<|im_end|>\n"))


def joined_speech(pcm, clip: str = "long_mixed.wav", transcripts: Optional[str] = None):
    """Continuous speech: the reference speech segments of ``clip`` (audio/transcripts.json) joined
    with no pauses, as scripts/eval_streaming.py --robustness makes it."""
    import numpy as np

    from .. import REPO_ROOT

    path = transcripts or os.path.join(REPO_ROOT, "audio", "transcripts.json")
    with open(path, encoding="utf-8") as f:
        clips = {c["file"]: c for c in json.load(f)["clips"]}
    if clip not in clips or "segments" not in clips[clip]:
        raise ValueError(f"{path} has no speech segments for {clip!r}")
    segs = clips[clip]["segments"]
    return np.concatenate([pcm[int(s["start"] * SAMPLE_RATE):int(s["end"] * SAMPLE_RATE)] for s in segs])
