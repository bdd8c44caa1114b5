"""StreamSession: live audio in, committed text and an unstable tail out.

The session only wires the stages: audio in pieces of any length (:mod:`.buffer`) -> VAD speech
segments (qwen3asr.vad) -> chunks of ``chunk_size`` seconds, ending early at a pause
(:mod:`.pause`) -> log-mel and ONE encoder pass per chunk (:mod:`.front`; the official streaming
algorithm re-encodes all audio at every chunk) -> one decoder run on the window of the last
``memory_num`` chunks with the older chunks' text minus ``rollback_tokens`` as prefix
(:mod:`.window`, :mod:`.decode`) -> committed text (:mod:`.committed`: never changes again).

A chunk that leaves the window is committed; the chunks still in it are the unstable tail. The
end of a speech segment or ``finish()`` commits everything; a chunk boundary in a pause commits
the older chunks and starts a fresh window, and ends a piece of speech, which final passes
(:mod:`.final`) decode again in one pass. Rules and measurements: docs/streaming.md.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Callable, List, Optional

import numpy as np

from ..audio import SAMPLE_RATE, PcmChecker
from ..mel import HOP_LENGTH as HOP
from ..mel import LEFT_CONTEXT, LOOKAHEAD
from ..options import TranscribeOptions
from ..vad import WINDOW_SAMPLES, SileroVAD, SpeechEnd, SpeechStart, VADStream
from ..work import NO_WORK, Work
from .buffer import AudioBuffer
from .committed import CommittedText
from .decode import decode_window
from .final import FinalPasses
from .front import ChunkFront
from .partial import Partials
from .pause import PauseDetector, frame_db
from .results import StreamResult, StreamStats
from .tally import StreamTally
from .window import Chunk, DecoderWindow

logger = logging.getLogger(__name__)

PREROLL_SECONDS = 10.0  # audio kept while waiting for a VAD speech start (reported late)


class StreamSession:
    """Per-stream state over a loaded engine; see the module docstring.

    Make it with ``engine.create_stream(...)``. ``feed_audio(pcm)`` takes (n,) float32 16 kHz
    mono of any length and returns the StreamResult so far; ``finish()`` flushes and returns
    the final one; ``reset()`` starts over (the VAD model stays loaded).

    Memory stays flat however long the stream runs (``footprint()``): the audio kept is the
    open chunk with its look-ahead (plus, with final passes, the open piece of speech up to
    plan.FINAL_PASS_MAX_SECONDS; with VAD, PREROLL_SECONDS while no speech is open), the window
    holds ``memory_num`` chunks' embeddings, and the result keeps a bounded history: the latest
    tally.CHUNK_HISTORY ChunkStats and, with ``bounded`` (the default), the latest segments, text
    and ids (qwen3asr.streaming.committed.HISTORY_*). Long files pass ``bounded=False``: their
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
        self.options = o = options.for_stream()
        self._overlap = o.overlap if o.overlap is not None else engine.backend == "rk"
        engine.planner.check_stream(o)  # the window fits the context; with words, a chunk one aligner pass
        self._vad = None
        vad = o.vad_options
        if vad is not None:
            self._vad = VADStream(vad, vad_model if vad_model is not None else SileroVAD())
            if math.isfinite(vad.max_speech_s):
                logger.warning("VADOptions.max_speech_s splits segments at pauses found after the fact; in a stream "
                               "a split can come after its chunk was cut (chunk_size already bounds the work)")
        self._prefix_len = engine.prefix_len(o)  # prompt rows before the audio: the same in every window
        # word timestamps: each committed segment is aligned on its audio (the aligner is loaded by now)
        self._aligner = engine.aligner if o.word_timestamps else None
        self._unaligned: set = set()  # languages warned about (no words for them)
        self._finals = FinalPasses(engine, o, work)  # each finished piece decoded again in one pass
        self._window = DecoderWindow(engine.tokenizer, o.memory_num, o.rollback_tokens, o.unfixed_chunks)
        self._text = CommittedText(engine.tokenizer, on_text, bounded=bounded)
        self._pauses = PauseDetector(o.pause_db, o.chunk_size)
        self._front = ChunkFront(engine, self._pauses, mel_ceiling)  # log-mel and encoder of each chunk
        self._partials = Partials(engine, o, self._front, work, self._prefix_len)  # previews of the open chunk
        self._audio = AudioBuffer()
        self._tally = StreamTally()
        self.reset()

    @property
    def overlap(self) -> bool:
        """Whether a chunk is encoded while the one before is decoded (TranscribeOptions.overlap)."""
        return self._overlap

    # ------------------------------------------------------------------ public
    def reset(self) -> None:
        """Forget all audio and text; positions restart at 0."""
        self._audio.clear(0)
        self._seg_start: Optional[int] = None if self._vad is not None else 0  # the open speech segment's start
        self._next: Optional[int] = self._seg_start  # start of the next chunk to cut
        self._finals.open(self._seg_start)
        self._in_unit = False  # inside a unit of model work (_run): a final pass needs no unit of its own
        self._window.clear()
        self._window.new_segment()
        self._text.reset()
        self._pauses.reset()
        self._tally.reset()
        self._front.reset()
        self._partials.reset()
        self._language: Optional[str] = self.options.language
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
        self._audio.append(pcm)
        if self._vad is not None:
            self._vad_events(self._vad.process, pcm)
        self._cut(final_end=None)
        self._finals.advance(self._audio)  # the open piece's final pass: what can be done before its end
        if self._seg_start is not None and not self._tally.full(self.options.max_chunks):  # a preview, maybe
            self._tally.partials += self._partials.maybe(self._window, self._audio, self._next,
                                                         self._audio.pos - LOOKAHEAD, self._seg_start, self._tally.decoded)
        self._trim()
        self._text.trim()
        return self.result()

    def finish(self) -> StreamResult:
        """Flush: decode the last partial chunk, commit everything; returns the final result."""
        if self._finished:
            return self.result()
        if self._vad is not None:
            self._vad_events(self._vad.flush)
        if self._seg_start is not None:
            self._close_segment(self._audio.pos)
        self._finished = True
        self._audio.clear(self._audio.pos)
        self._text.trim()
        return self.result()

    def final_at(self, end: int) -> Optional[tuple[str, Optional[str]]]:
        """(text, language) finish() would give were the audio to end at sample ``end``: FinalPasses.preview."""
        return None if self._finished or self._seg_start is None else self._finals.preview(end, self)

    def result(self) -> StreamResult:
        t, tally = self._text, self._tally
        return StreamResult(committed=t.text, tail=t.tail_text(self._window.tail_ids() if self._partials.ids is None else self._partials.ids), language=self._language,
                            segments=tuple(t.segments), stats=self.stats(), chunks=tuple(tally.chunks),
                            finished=self._finished, truncated=tally.truncated, token_ids=tuple(t.ids),
                            final_segments=len(t.segments) if not self._finals.on else t.final_segments,
                            dropped_segments=t.dropped_segments, dropped_chars=t.dropped_chars,
                            finish_reason=tally.worst or "eos")

    def stats(self) -> StreamStats:
        return self._tally.stats(self._audio.pos)

    def footprint(self) -> int:
        """Bytes this stream holds (its audio, mel and embeddings, its text, segments, ids and
        chunk stats; not the engine's shared model): flat however long the stream runs, within
        the bounds in the class docstring. An estimate from the sizes of what is held."""
        size = (self._audio.nbytes + self._text.footprint() + self._tally.footprint() + self._window.footprint()
                + self._finals.footprint())
        return size + (self._vad.footprint() if self._vad is not None else 0)

    # ------------------------------------------------------------------ input
    def _trim(self) -> None:
        """Drop the audio no chunk, alignment or final pass can still need."""
        pos = self._audio.pos
        if self._seg_start is not None and not self._tally.full(self.options.max_chunks):
            keep = max(self._seg_start, self._next - LEFT_CONTEXT)
        else:
            keep = pos - int(PREROLL_SECONDS * SAMPLE_RATE)
        if self._aligner is not None and len(self._window):  # its chunks are aligned when committed
            keep = min(keep, self._window.chunks[0].start)
        self._audio.keep_from(self._finals.keep_from(pos, keep))

    def _vad_events(self, step, *args) -> None:
        """Run the VAD ``step`` (process or flush): a speech start opens a segment, an end closes it."""
        t0 = time.perf_counter()
        events = step(*args)
        self._tally.vad_ms += (time.perf_counter() - t0) * 1000
        for ev in events:
            if isinstance(ev, SpeechStart):
                start = max(ev.sample, self._audio.start)
                if start != ev.sample:
                    logger.debug("speech start %d is older than the kept audio; starting at %d", ev.sample, start)
                self._seg_start = self._next = start
                self._finals.open(start)
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
            limit = self._audio.pos
        else:
            limit = self._vad.samples_seen // WINDOW_SAMPLES * WINDOW_SAMPLES - self._vad.end_delay
        ready = []
        while self._next + size + LOOKAHEAD <= limit and self._tally.room(self.options.max_chunks):
            db = frame_db(self._audio(self._next, self._next + size))
            end = self._next + self._pauses.cut(db) * HOP
            ready.append(self._prepare(self._next, end, db=db[:(end - self._next) // HOP]))
            self._next = end
        self._run(ready)

    def _close_segment(self, end: int) -> None:
        """The open segment ends at sample ``end``. When its last piece gets a final pass, the
        partial chunk before ``end`` is not decoded and the window's unstable chunks are not
        committed (``on_text`` never sends a guess the final text revises): the one-pass text
        replaces them, so the time after a stop is one pass, not a chunk and a pass."""
        final = self._finals.audio(end, self._audio)
        self._partials.drop(end)
        n = (end - self._next) // HOP * HOP
        if n > 0 and final is None and self._tally.room(self.options.max_chunks):
            self._run([self._prepare(self._next, self._next + n, right_edge=end)])
        self._next = end
        draft = None
        if final is None:
            self._commit(self._window.clear())
        else:  # its unstable text is not committed: the final pass replaces it, and verifies it
            draft = self._finals.draft(self._language, self._text.piece_ids + self._window.tail_ids())
            self._window.clear()
        self._finish_piece(end, final, draft)
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
        if not self._finals.on:
            self._align(first)

    def _align(self, first: int) -> None:
        """Words for the segments from index ``first`` on (with word timestamps on)."""
        if self._aligner is None:
            return
        from ..aligner.segments import align_segments

        segs = self._text.segments

        def clip(seg):
            return self._audio(int(round(seg.start * SAMPLE_RATE)), int(round(seg.end * SAMPLE_RATE))), seg.start

        aligned = align_segments(self._aligner, segs[first:], clip, language=self.options.language,
                                 warned=self._unaligned, spans=self.options.word_spans, engine=self.engine)
        segs[first:] = aligned

    def _finish_piece(self, end: int, pcm: Optional[np.ndarray] = None, draft: Optional[list] = None) -> None:
        """The piece of speech since the last pause (or speech start) ends at sample ``end``.
        ``pcm``: its audio for a final pass (FinalPasses.audio, taken before its last partial chunk
        would have been decoded), None to decide here (the piece's chunks all decoded: a piece
        without streamed text gets none). With a final pass, the piece's one-pass text replaces
        its streamed text, which ``draft`` (FinalPasses.draft) offers it to verify; else its
        per-chunk segments stay as they are."""
        if pcm is None and self._text.piece_segments():
            pcm = self._finals.audio(end, self._audio)
            draft = None if pcm is None else self._finals.draft(self._language, self._text.piece_ids)
        if not self._finals.on or pcm is None:
            if self._finals.on:
                self._align(self._text.final_segments)  # the streamed text stays final: align it chunk by chunk
            self._text.mark_piece()
        else:
            text, seg, language = self._finals.decode(pcm, end, self._in_unit, draft or ())
            self._tally.final_passes += 1
            self._text.finish_piece(text, seg)
            if language:
                self._language = language
        self._finals.open(end)

    def _prepare(self, c0: int, c1: int, db: Optional[np.ndarray] = None, right_edge: Optional[int] = None) -> Chunk:
        """The chunk [c0, c1) of the open segment made ready to encode (ChunkFront.prepare)."""
        self._tally.cut += 1
        return self._front.prepare(self._audio, c0, c1, self._seg_start, right_edge, db)

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
                        self._front.encode(chunk)
                    ahead = None
                    if overlap and i + 1 < len(chunks):
                        ahead = self.engine.background(self._front.encode, chunks[i + 1])
                    try:
                        self._decode(chunk)
                    finally:
                        if ahead is not None:
                            ahead.result()
                finally:
                    self._in_unit = False

    def _decode(self, chunk: Chunk) -> None:
        """Put the encoded chunk in the window and decode the window."""
        window = self._window
        self._partials.drop(chunk.end)
        self._tally.encoded += chunk.end - chunk.start
        self._commit(window.append(chunk))
        if len(window) >= 2:
            before = window.chunks[-2]
            if self._pauses.between(before.tail_db, chunk.head_db, chunk.speech_db):
                self._commit(window.end_at_newest())
                self._finish_piece(chunk.start)
        st = decode_window(self.engine, window, chunk, self.options, prefix_len=self._prefix_len,
                           run=self._tally.decoded, work=self._work)
        if chunk.language:
            self._language = chunk.language
        self._tally.add(st)
        logger.debug("chunk %.2f-%.2f s: window %d, prefix %d, generated %d", st.start, st.end, len(window),
                     st.prefix_tokens, len(chunk.tokens))


__all__ = ["PREROLL_SECONDS", "StreamSession"]
