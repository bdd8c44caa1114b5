"""StreamSession: live audio in, committed text and an unstable tail out.

Audio arrives in pieces of any length. It is cut into chunks of ``chunk_size`` seconds
(counted from the start of the stream, or of each speech segment with VAD); a chunk of 2 s or
more ends early at its last pause (:mod:`.pause`). Each chunk:

1. log-mel frames exactly as the offline front end computes them for the same audio
   (``mel.piece_log_mel_power``: a chunk waits for 2.5 ms of look-ahead), except the
   clip-global clamp: a stream cannot know its future maximum, so the ceiling is the running
   maximum of everything seen so far (or a fixed ``mel_ceiling``, which long files pass);
2. encoded ONCE; its embeddings are cached in the window (the official streaming algorithm
   re-encodes all audio at every chunk);
3. one decoder run on the window (:mod:`.window`): the prompt with the embeddings of the last
   ``memory_num`` chunks and, in the assistant turn, the language header and the older chunks'
   text minus the last ``rollback_tokens``;
4. the generated tokens are attributed to the newest chunk.

A chunk that leaves the window is committed (:mod:`.committed`: never changes again); the
chunks still in the window are the unstable tail. The end of a speech segment (VAD) or
``finish()`` commits everything and empties the window; a chunk boundary in a pause commits the
older chunks and the new chunk starts a fresh window. Rules and measurements: docs/streaming.md.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import sys
import time
from typing import Callable, List, Optional

import numpy as np

from .. import mel as melmod
from ..audio import SAMPLE_RATE, PcmChecker
from ..decoding import FINISH_RANK
from ..mel import HOP_LENGTH as HOP
from ..mel import LEFT_CONTEXT, LOOKAHEAD
from ..options import TranscribeOptions
from ..results import Segment
from ..vad import WINDOW_SAMPLES, SileroVAD, SpeechEnd, SpeechStart, VADStream
from ..work import NO_WORK, Work
from .committed import CommittedText
from .pause import PauseDetector, frame_db
from .results import SUMMED, ChunkStats, StreamResult, StreamStats
from .window import Chunk, DecoderWindow, positions_needed

logger = logging.getLogger(__name__)

PREROLL_SECONDS = 10.0  # audio kept while waiting for a VAD speech start (reported late)
# A piece of speech (the chunks between two pauses) longer than this keeps its streamed text
# instead of a final pass, so a stream never keeps more audio than this for it; caption
# segments and voice commands are far shorter.
FINAL_PASS_MAX_SECONDS = 60.0
CHUNK_HISTORY = 1000  # ChunkStats a result keeps: the latest (StreamStats counts all)


class StreamSession:
    """Per-stream state over a loaded engine; see the module docstring.

    Make it with ``engine.create_stream(...)``. ``feed_audio(pcm)`` takes (n,) float32 16 kHz
    mono of any length and returns the StreamResult so far; ``finish()`` flushes and returns
    the final one; ``reset()`` starts over (the VAD model stays loaded).

    Memory stays flat however long the stream runs (``footprint()``): the audio kept is the
    open chunk with its look-ahead (plus, with final passes, the open piece of speech up to
    FINAL_PASS_MAX_SECONDS; with VAD, PREROLL_SECONDS while no speech is open), the window
    holds ``memory_num`` chunks' embeddings, and the result keeps a bounded history: the latest
    CHUNK_HISTORY ChunkStats and, with ``bounded`` (the default), the latest segments, text and
    ids (qwen3asr.streaming.committed.HISTORY_*). Long files pass ``bounded=False``: their
    result is the whole transcript.
    """

    def __init__(self, engine, options: TranscribeOptions = TranscribeOptions(),
                 on_text: Optional[Callable[[str], None]] = None, vad_model=None, work: Work = NO_WORK,
                 mel_ceiling: Optional[float] = None, bounded: bool = True):
        """``options``: the request's settings (stream defaults filled in for None fields);
        ``vad_model``: a loaded SileroVAD (default: a new one when VAD is on); ``work``:
        scheduling hooks, one unit per chunk; ``mel_ceiling``: log10 mel ceiling of the clamp
        (None: the running maximum; long files pass the whole file's); ``bounded``: keep a
        bounded history of segments, text and ids (False: all of them)."""
        self.engine = engine
        self._work = work
        self._mel_ceiling = mel_ceiling
        self.options = o = options.for_stream()
        self._overlap = o.overlap if o.overlap is not None else engine.backend == "rk"
        need = positions_needed(engine, o)
        if need > engine.max_context:
            raise ValueError(
                f"chunk_size={o.chunk_size} s x memory_num={o.memory_num} with max_new_tokens={o.max_new_tokens} "
                f"needs up to {need} decoder positions, over the context of {engine.max_context}; "
                f"use shorter chunks, a smaller memory_num or max_new_tokens")
        self._vad = None
        vad = o.vad_options
        if vad is not None:
            self._vad = VADStream(vad, vad_model if vad_model is not None else SileroVAD())
            # Samples by which a speech end can trail the audio the VAD has seen (see _cut).
            self._end_delay = int(SAMPLE_RATE * (vad.min_silence_ms + 2 * vad.speech_pad_ms) / 1000
                                  + 3 * WINDOW_SAMPLES)
            if math.isfinite(vad.max_speech_s):
                logger.warning("VADOptions.max_speech_s splits segments at pauses found after the fact; in a stream "
                               "a split can come after its chunk was cut (chunk_size already bounds the work)")
        self._prefix_len = engine.prefix_len(o)  # prompt rows before the audio: the same in every window
        # word timestamps: each committed segment is aligned on its audio (the aligner loads now,
        # so a missing one is an error here rather than at the first commit)
        self._aligner = engine.aligner if o.word_timestamps else None
        if self._aligner is not None and o.chunk_size > self._aligner.piece_seconds:
            raise ValueError(f"chunk_size={o.chunk_size:g} s with word timestamps: a chunk is aligned in one pass, "
                             f"and this aligner takes at most {self._aligner.piece_seconds:g} s; use shorter chunks")
        # final passes: each finished piece is decoded again in one pass (qwen3asr.streaming.committed)
        self._final = bool(o.final_pass)
        self._one_pass = dataclasses.replace(o, one_pass=True, chunk_size=None, vad=False, max_chunks=None,
                                             max_new_tokens=None, rollback_tokens=None, itn=False, final_pass=False,
                                             fallback=o.fallback)
        self._unaligned: set = set()  # languages warned about (no words for them)
        self._window = DecoderWindow(engine.tokenizer, o.memory_num, o.rollback_tokens, o.unfixed_chunks)
        self._text = CommittedText(engine.tokenizer, on_text, bounded=bounded)
        self._pauses = PauseDetector(o.pause_db, o.chunk_size)
        self.reset()

    @property
    def overlap(self) -> bool:
        """Whether a chunk is encoded while the one before is decoded (TranscribeOptions.overlap)."""
        return self._overlap

    # ------------------------------------------------------------------ public
    def reset(self) -> None:
        """Forget all audio and text; positions restart at 0."""
        self._pos = 0  # samples received
        self._buf = np.zeros(0, np.float32)  # kept audio, starting at absolute sample _buf_start
        self._buf_start = 0
        self._seg_start: Optional[int] = None if self._vad is not None else 0
        self._next: Optional[int] = self._seg_start  # start of the next chunk to cut
        self._piece_start: Optional[int] = self._seg_start  # where the open piece of speech began
        self._piece_ok = True  # the open piece is short enough for its final pass (its audio is kept)
        self._in_unit = False  # inside a unit of model work (_run): a final pass needs no unit of its own
        self._final_passes = 0
        self._window.clear()
        self._window.new_segment()
        self._text.reset()
        self._pauses.reset()
        self._chunks = collections.deque(maxlen=CHUNK_HISTORY)  # the latest ChunkStats
        self._n_chunks = 0  # chunks decoded
        self._worst: Optional[str] = None  # the worst finish reason of any chunk (FINISH_RANK), the first of equals
        self._n_cut = 0  # chunks cut so far (decoded or about to be)
        self._totals = dict.fromkeys(SUMMED, 0)  # running sums of the ChunkStats fields
        self._encoded = 0  # samples encoded
        self._vad_ms = 0.0
        self._ceiling = -math.inf if self._mel_ceiling is None else float(self._mel_ceiling)
        self._language: Optional[str] = self.options.language
        self._truncated = False
        self._finished = False
        self._check = PcmChecker("feed_audio")  # one clipping warning per stream
        if self._vad is not None:
            self._vad.reset()

    def feed_audio(self, pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> StreamResult:
        """Add (n,) float32 mono 16 kHz samples in [-1, 1] (any n); returns the result so far."""
        if self._finished:
            raise RuntimeError("feed_audio() after finish(); call reset() to start a new stream")
        self.engine.check_open()
        pcm = self._check(pcm, sample_rate)  # AudioError (a ValueError) naming what to do
        if pcm.size == 0:
            return self.result()
        self._buf = np.concatenate([self._buf, pcm])
        self._pos += pcm.shape[0]
        if self._vad is not None:
            t0 = time.perf_counter()
            events = self._vad.process(pcm)
            self._vad_ms += (time.perf_counter() - t0) * 1000
            self._handle(events)
        self._cut(final_end=None)
        self._trim()
        self._text.trim()
        return self.result()

    def finish(self) -> StreamResult:
        """Flush: decode the last partial chunk, commit everything; returns the final result."""
        if self._finished:
            return self.result()
        if self._vad is not None:
            t0 = time.perf_counter()
            events = self._vad.flush()
            self._vad_ms += (time.perf_counter() - t0) * 1000
            self._handle(events)
        if self._seg_start is not None:
            self._close_segment(self._pos)
        self._finished = True
        self._buf = np.zeros(0, np.float32)
        self._buf_start = self._pos
        self._text.trim()
        return self.result()

    def result(self) -> StreamResult:
        t = self._text
        return StreamResult(committed=t.text, tail=t.tail_text(self._window.tail_ids()), language=self._language,
                            segments=tuple(t.segments), stats=self.stats(), chunks=tuple(self._chunks),
                            finished=self._finished, truncated=self._truncated, token_ids=tuple(t.ids),
                            final_segments=len(t.segments) if not self._final else t.final_segments,
                            dropped_segments=t.dropped_segments, dropped_chars=t.dropped_chars,
                            finish_reason=self._worst or "eos")

    def stats(self) -> StreamStats:
        return StreamStats(audio_seconds=self._pos / SAMPLE_RATE, encoded_seconds=self._encoded / SAMPLE_RATE,
                           vad_ms=self._vad_ms, chunks=self._n_chunks, final_passes=self._final_passes,
                           **self._totals)

    def footprint(self) -> int:
        """Bytes this stream holds (its audio, mel and embeddings, its text, segments, ids and
        chunk stats; not the engine's shared model): flat however long the stream runs, within
        the bounds in the class docstring. An estimate from the sizes of what is held."""
        size = self._buf.nbytes + self._text.footprint()
        for c in self._window.chunks:
            size += sum(x.nbytes for x in (c.embeds, c.mel) if x is not None) + sys.getsizeof(c.tokens) \
                + 8 * len(c.tokens)
        size += sys.getsizeof(self._chunks) + sum(sys.getsizeof(c) for c in self._chunks)
        if self._vad is not None:
            size += self._vad.footprint()
        return size

    # ------------------------------------------------------------------ input
    def _audio(self, a: int, b: int) -> np.ndarray:
        if a < self._buf_start:
            raise RuntimeError(f"internal: audio at sample {a} already dropped (kept from {self._buf_start})")
        return self._buf[a - self._buf_start:b - self._buf_start]

    def _trim(self) -> None:
        if self._seg_start is not None and not self._full():
            keep = max(self._seg_start, self._next - LEFT_CONTEXT)
        else:
            keep = self._pos - int(PREROLL_SECONDS * SAMPLE_RATE)
        if self._aligner is not None and len(self._window):  # its chunks are aligned when committed
            keep = min(keep, self._window.chunks[0].start)
        if self._final and self._piece_start is not None:
            if self._pos - self._piece_start > FINAL_PASS_MAX_SECONDS * SAMPLE_RATE:
                self._piece_ok = False  # too long to keep for its final pass: its streamed text stays
            elif self._piece_ok:
                keep = min(keep, self._piece_start)
        keep = max(keep, self._buf_start)
        if keep > self._buf_start:
            self._buf = self._buf[keep - self._buf_start:].copy()
            self._buf_start = keep

    def _handle(self, events) -> None:
        """VAD events: a speech start opens a segment, a speech end closes it."""
        for ev in events:
            if isinstance(ev, SpeechStart):
                start = max(ev.sample, self._buf_start)
                if start != ev.sample:
                    logger.debug("speech start %d is older than the kept audio; starting at %d", ev.sample, start)
                self._seg_start = self._next = self._piece_start = start
                self._window.new_segment()
            elif isinstance(ev, SpeechEnd) and self._seg_start is not None:
                self._cut(final_end=ev.sample)
                self._close_segment(ev.sample)

    # ------------------------------------------------------------------ chunks
    def _cut(self, final_end: Optional[int]) -> None:
        """Encode and decode every full chunk of the open segment that the audio allows.

        A chunk is cut once its look-ahead has arrived; with VAD, only once no speech end can
        still be reported before the chunk's end (so chunking never depends on piece sizes).
        """
        if self._seg_start is None:
            return
        size = self.options.chunk_samples
        if final_end is not None:
            limit = final_end
        elif self._vad is None:
            limit = self._pos
        else:
            limit = self._vad.samples_seen // WINDOW_SAMPLES * WINDOW_SAMPLES - self._end_delay
        ready = []
        while self._next + size + LOOKAHEAD <= limit and self._room():
            db = frame_db(self._audio(self._next, self._next + size))
            end = self._next + self._pauses.cut(db) * HOP
            ready.append(self._prepare(self._next, end, last=False, db=db[:(end - self._next) // HOP]))
            self._next = end
        self._run(ready)

    def _close_segment(self, end: int) -> None:
        """The open segment ends at sample ``end``. When its last piece gets a final pass, the
        partial chunk before ``end`` is not decoded and the window's unstable chunks are not
        committed (``on_text`` never sends a guess the final text revises): the one-pass text
        replaces them, so the time after a stop is one pass, not a chunk and a pass."""
        final = self._final_audio(end)
        n = (end - self._next) // HOP * HOP
        if n > 0 and final is None and self._room():
            self._run([self._prepare(self._next, self._next + n, last=True, right_edge=end)])
        self._next = end
        if final is None:
            self._commit(self._window.clear())
        else:
            self._window.clear()  # its unstable text is not committed: the final pass replaces it
        self._finish_piece(end, final)
        self._text.close_segment(self.options.itn, self._language)
        self._window.new_segment()
        self._seg_start = None if self._vad is not None else end

    def _commit(self, chunks) -> None:
        """Commit chunks that left the window; with word timestamps (and no final pass, which
        aligns the whole piece instead), align each new segment (a committed chunk with text) on
        its own audio, which _trim keeps until then."""
        first = len(self._text.segments)
        for c in chunks:
            self._text.commit(c)
        if not self._final:
            self._align(first)

    def _align(self, first: int) -> None:
        """Words for the segments from index ``first`` on (with word timestamps on)."""
        if self._aligner is None:
            return
        for i in range(first, len(self._text.segments)):
            seg = self._text.segments[i]
            lang = self.options.language or seg.language
            if not self._aligner.supports(lang):
                if lang not in self._unaligned:
                    self._unaligned.add(lang)
                    logger.warning("no word timestamps for %s text: the aligner covers %s", lang or "undetected",
                                   ", ".join(self._aligner.languages))
                continue
            a, b = int(round(seg.start * SAMPLE_RATE)), int(round(seg.end * SAMPLE_RATE))
            words = self._aligner.align(self._audio(a, b), seg.text, lang, offset=seg.start)
            self._text.segments[i] = dataclasses.replace(seg, words=words)

    def _final_audio(self, end: int) -> Optional[np.ndarray]:
        """The open piece's audio up to sample ``end`` when it gets a final pass (final passes on,
        the piece short enough to have been kept, within the bundle's one-pass limit and, with
        word timestamps, the aligner's, fitting one pass); else None."""
        a = self._piece_start
        if not (self._final and self._piece_ok and a is not None
                and HOP <= end - a <= FINAL_PASS_MAX_SECONDS * SAMPLE_RATE):
            return None
        pcm = self._audio(a, end)
        limit = self.engine.bundle.one_pass_seconds  # the model's own one-pass limit, when it declares one
        if limit is not None and pcm.shape[0] > limit * SAMPLE_RATE:
            return None
        if self._aligner is not None and pcm.shape[0] > self._aligner.piece_seconds * SAMPLE_RATE:
            return None  # its words come from one aligner pass: too long for it, the chunks are aligned instead
        return pcm if self.engine.fits_one_pass(pcm, self._one_pass) else None

    def _finish_piece(self, end: int, pcm: Optional[np.ndarray] = None) -> None:
        """The piece of speech since the last pause (or speech start) ends at sample ``end``.
        ``pcm``: its audio for a final pass (_final_audio, taken before its last partial chunk
        would have been decoded), None to decide here (the piece's chunks all decoded: a piece
        without streamed text gets none). With a final pass, the piece's one-pass text replaces
        its streamed text; else its per-chunk segments stay as they are."""
        if pcm is None and self._text.piece_segments():
            pcm = self._final_audio(end)
        a, self._piece_start, self._piece_ok = self._piece_start, end, True
        if not self._final:
            self._text.mark_piece()
            return
        first = self._text.final_segments
        o = self._one_pass
        if pcm is None:
            self._align(first)  # the streamed text stays final: align it chunk by chunk
            self._text.mark_piece()
            return
        if self._in_unit:
            r = self.engine.transcribe(pcm, o)
        else:
            with self._work.unit():
                r = self.engine.transcribe(pcm, o)
        self._work.check()
        self._final_passes += 1
        t0 = a / SAMPLE_RATE
        words = tuple(dataclasses.replace(w, start=round(w.start + t0, 3), end=round(w.end + t0, 3)) for w in r.words)
        seg = (Segment(t0, end / SAMPLE_RATE, r.text, r.language, words, r.finish_reason) if r.text else None)
        self._text.finish_piece(r.text, seg)
        if r.language:
            self._language = r.language

    def _full(self) -> bool:
        """True once max_chunks chunks are cut: no more audio is decoded."""
        return self.options.max_chunks is not None and self._n_cut >= self.options.max_chunks

    def _room(self) -> bool:
        """Whether a chunk that is ready may be decoded; if not, its audio is dropped (truncated)."""
        if self._full():
            self._truncated = True
            return False
        return True

    def _prepare(self, c0: int, c1: int, last: bool, db: Optional[np.ndarray] = None,
                 right_edge: Optional[int] = None) -> Chunk:
        """A chunk [c0, c1) made ready to encode from the audio alone: its log-mel (clamped at the
        session ceiling; ``last``: the segment ends at ``right_edge``) and its levels (``db``: its
        10 ms frame levels when already computed). Chunks are prepared in order, before any of
        them is decoded."""
        self._n_cut += 1
        t0 = time.perf_counter()
        chunk = Chunk(c0, c1)
        b0 = self._buf_start
        power = melmod.piece_log_mel_power(self._buf, c0 - b0, c1 - b0, self.engine.n_mels,
                                           left_edge=self._seg_start - b0,
                                           right_edge=right_edge - b0 if last else None)
        if self._mel_ceiling is None:
            self._ceiling = max(self._ceiling, float(power.max()))
        chunk.mel = melmod.normalize_log_mel(power, self._ceiling)
        chunk.mel_ms = (time.perf_counter() - t0) * 1000
        chunk.head_db, chunk.tail_db, chunk.speech_db = self._pauses.measure(
            frame_db(self._audio(c0, c1)) if db is None else db)
        return chunk

    def _encode(self, chunk: Chunk) -> None:
        t0 = time.perf_counter()
        chunk.embeds, chunk.enc = self.engine.encode_timed(chunk.mel)
        chunk.mel = None
        chunk.enc_ms = chunk.mel_ms + (time.perf_counter() - t0) * 1000  # mel + encoder

    def _run(self, chunks: List[Chunk]) -> None:
        """Encode and decode ``chunks`` in order, one unit of model work each. With overlap
        (``TranscribeOptions.overlap``) the next chunk is encoded while this one is decoded:
        the encoder (RKNN on the NPU) and the decoder (RKLLM) then work at once."""
        overlap = self._overlap and len(chunks) > 1
        for i, chunk in enumerate(chunks):
            with self._work.unit():
                self._in_unit = True
                try:
                    if chunk.embeds is None:
                        self._encode(chunk)
                    ahead = None
                    if overlap and i + 1 < len(chunks):
                        ahead = self.engine.background(self._encode, chunks[i + 1])
                    try:
                        self._decode(chunk)
                    finally:
                        if ahead is not None:
                            ahead.result()
                finally:
                    self._in_unit = False

    def _decode(self, chunk: Chunk) -> None:
        """Put the encoded chunk in the window and decode the window."""
        eng, o, window = self.engine, self.options, self._window
        self._encoded += chunk.end - chunk.start
        self._commit(window.append(chunk))
        if len(window) >= 2:
            before = window.chunks[-2]
            if self._pauses.between(before.tail_db, chunk.head_db, chunk.speech_db):
                self._commit(window.end_at_newest())
                self._finish_piece(chunk.start)
        prefix = window.prefix()
        window.roll_back(prefix)
        in_text = o.language is not None or o.compact_prompt  # no language header to keep or split off
        header = window.header_for(prefix, in_text)
        extra = header + prefix.ids
        x = eng.decoder_input(np.concatenate([c.embeds for c in window], axis=0), o, extra)
        seconds = sum(c.end - c.start for c in window) / SAMPLE_RATE  # the audio this run reads
        out = eng.decode(x, o.decoding(seed=o.chunk_seed(self._n_chunks)), audio_seconds=seconds,
                         prefix_len=self._prefix_len, fallback=o.fallback,
                         on_token=lambda _: not self._work.cancelled)
        self._work.check()
        tokens, ds = out.tokens, out.stats
        if ds.finish_reason == "length":
            self._truncated = True
        window.attribute(chunk, tokens, prefix, header, in_text, o.language)
        chunk.finish_reason = ds.finish_reason
        if chunk.language:
            self._language = chunk.language
        enc = chunk.enc
        st = ChunkStats(
            start=chunk.start / SAMPLE_RATE, end=chunk.end / SAMPLE_RATE, encoder_calls=enc.calls,
            encoder_seconds=enc.graph_seconds, encoder_ms=chunk.enc_ms, window_chunks=len(window),
            prefix_tokens=len(extra), prefill_tokens=ds.prefill_tokens, prefill_ms=ds.prefill_ms,
            decode_tokens=ds.decode_tokens, decode_ms=ds.decode_ms, generated=len(chunk.tokens),
            finish_reason=ds.finish_reason, fallback_tries=out.tries, loops=int(out.looped))
        self._chunks.append(st)
        self._n_chunks += 1
        if self._worst is None or FINISH_RANK.get(st.finish_reason, 0) > FINISH_RANK.get(self._worst, 0):
            self._worst = st.finish_reason
        for k in SUMMED:
            self._totals[k] += getattr(st, k)
        logger.debug("chunk %.2f-%.2f s: window %d, prefix %d, generated %d", st.start, st.end, len(window),
                     len(extra), len(chunk.tokens))


__all__ = ["PREROLL_SECONDS", "StreamSession"]
