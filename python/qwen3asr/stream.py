"""Streaming recognition: chunks encoded once, a sliding decoder window, token rollback, VAD.

Audio arrives in pieces of any length. It is cut into chunks of ``chunk_size`` seconds
(counted from the start of the stream, or of each speech segment with VAD); a chunk of 2 s or
more ends early at its last pause (``_pause_cut``). Each chunk:

1. log-mel frames exactly as the offline front end computes them for the same audio
   (each frame sees its real neighbours: a chunk waits for 2.5 ms of look-ahead), except the
   clip-global clamp: a stream cannot know its future maximum, so the ceiling is the running
   maximum of everything seen so far (or a fixed ``mel_ceiling``, which long files pass);
2. encoded ONCE; its embeddings are cached in the window;
3. one decoder run on: the prompt with the embeddings of the last ``memory_num`` chunks, and,
   in the assistant turn, the language header and the tokens already attributed to the
   older chunks of the window minus the last ``rollback_tokens`` (so a word cut by the
   boundary is decoded again with both halves of its audio);
4. the generated tokens are attributed to the newest chunk.

When a chunk leaves the window its tokens are *committed* (never change again); the tokens
of the chunks still in the window are the *unstable tail*. The end of a speech segment (VAD)
or ``finish()`` commits everything and empties the window; a chunk boundary in a pause (quiet
audio either side, ``TranscribeOptions.pause_db``) commits the older chunks and the new chunk
starts a fresh window. The official streaming
algorithm re-encodes all audio at every chunk; here every audio sample is encoded once.

The language header: with a forced language it is part of the prompt. Otherwise the model
writes ``language X<asr_text>`` whenever the window's text prefix is empty (start of a
stream or speech segment, or after a silent chunk) and that header is kept in front of the
prefix while the window holds text.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import time
from typing import Callable, List, Optional, Tuple

import numpy as np

from . import mel as melmod
from .encoder import tokens_for_frames
from .options import TranscribeOptions
from .prompt import fix_repetitions, parse_language_header
from .results import Segment
from .text import join_text, spaced
from .work import NO_WORK, Work
from .vad import WINDOW_SAMPLES, SileroVAD, SpeechEnd, SpeechStart, VADOptions, VADStream

logger = logging.getLogger(__name__)

SAMPLE_RATE = melmod.SAMPLE_RATE  # 16000 Hz
HOP = melmod.HOP_LENGTH  # 160 samples per mel frame (10 ms)
LEFT_CONTEXT = 2 * HOP  # 320 samples of real audio before a chunk: its first frame needs n_fft/2 = 200
LOOKAHEAD = melmod.N_FFT // 2 - HOP  # 40 samples after a chunk needed by its last frame (2.5 ms)
PREROLL_SECONDS = 10.0  # audio kept while waiting for a VAD speech start (reported late)
HEADER_TOKENS = 8  # most tokens of a detected ``language X<asr_text>`` header kept before the prefix
EDGE_FRAMES = 6  # 10 ms frames each side of a chunk boundary that decide whether it lies in a pause
LEVEL_SECONDS = 60.0  # pauses are judged against the loud end of this much recent encoded audio
LEVEL_QUANTILE = 0.99  # that loud end: this quantile of its 10 ms frame levels (a click soon stops counting)
PAUSE_CUT_MIN_CHUNK = 2.0  # chunk sizes (s) from which a chunk may end early at a pause


# The settings of a session are the request's TranscribeOptions (stream defaults filled in by
# ``TranscribeOptions.for_stream``); the old name stays for callers that built them directly.
StreamOptions = TranscribeOptions


@dataclasses.dataclass(frozen=True)
class ChunkStats:
    """Cost of one chunk (one encoder pass, one decoder run)."""

    start: float  # seconds from the start of the stream
    end: float  # seconds
    encoder_calls: int  # encoder graph executions
    encoder_seconds: float  # capacity of the graphs run (s, padding included)
    encoder_ms: float  # mel + encoder wall time
    window_chunks: int  # chunks the decoder saw
    prefix_tokens: int  # header + text prefix tokens in the assistant turn
    prefill_tokens: int  # decoder prefill positions
    prefill_ms: float
    decode_tokens: int  # forward passes of one generated token
    decode_ms: float
    generated: int  # tokens generated


_SUMMED = ("encoder_seconds", "encoder_calls", "encoder_ms", "prefill_tokens", "prefill_ms", "decode_tokens",
           "decode_ms")  # ChunkStats fields that StreamStats totals


@dataclasses.dataclass(frozen=True)
class StreamStats:
    """Totals of a session; per-audio-second figures as properties."""

    audio_seconds: float  # audio received
    encoded_seconds: float  # audio inside encoded chunks (each sample at most once)
    encoder_seconds: float  # capacity of the encoder graphs run (padding included)
    encoder_calls: int
    encoder_ms: float
    prefill_tokens: int
    prefill_ms: float
    decode_tokens: int
    decode_ms: float
    vad_ms: float  # time in the VAD model
    chunks: int

    @property
    def encoded_fraction(self) -> float:
        return self.encoded_seconds / self.audio_seconds if self.audio_seconds else float("nan")

    @property
    def prefill_tokens_per_second(self) -> float:
        return self.prefill_tokens / self.audio_seconds if self.audio_seconds else float("nan")

    @property
    def decode_tokens_per_second(self) -> float:
        """Generated-token forward passes per audio second."""
        return self.decode_tokens / self.audio_seconds if self.audio_seconds else float("nan")

    @property
    def compute_ms_per_second(self) -> float:
        """Encoder + decoder + VAD wall time per audio second (ms)."""
        total = self.encoder_ms + self.prefill_ms + self.decode_ms + self.vad_ms
        return total / self.audio_seconds if self.audio_seconds else float("nan")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        for k in ("encoded_fraction", "prefill_tokens_per_second", "decode_tokens_per_second",
                  "compute_ms_per_second"):
            d[k] = getattr(self, k)
        return d


@dataclasses.dataclass(frozen=True)
class StreamResult:
    """The transcript so far."""

    committed: str  # text that will not change any more
    tail: str  # text of the chunks still in the decoder window (may still change)
    language: Optional[str]  # language of the latest text (forced or detected), None if unknown
    segments: tuple  # Segment per committed chunk with text (times in stream seconds)
    stats: StreamStats
    chunks: tuple  # ChunkStats per chunk decoded so far
    finished: bool  # finish() was called; the tail is then empty
    truncated: bool = False  # some chunk ran out of max_new_tokens
    token_ids: tuple = ()  # committed text token ids, all segments (language headers excluded)

    @property
    def text(self) -> str:
        return join_text(self.committed, self.tail) if self.tail else self.committed


def _frame_db(x: np.ndarray) -> np.ndarray:
    """Level (dB full scale) of each whole 10 ms frame of x."""
    frames = x[:x.shape[0] // HOP * HOP].reshape(-1, HOP).astype(np.float64)
    return 10.0 * np.log10(np.mean(frames * frames, axis=1) + 1e-10)


@dataclasses.dataclass
class _Chunk:
    start: int  # absolute samples
    end: int
    embeds: Optional[np.ndarray]  # (tokens, hidden) float32 once encoded
    tokens: List[int]  # generated text tokens attributed to this chunk
    language: Optional[str]
    fresh: bool = False  # decoded with no text prefix: its tokens begin an answer (no leading space)
    # Leading tokens decoded again for older chunks (the rollback handed to this chunk): their
    # audio lies, at least partly, in the chunk before, so once that chunk has left the window
    # they are never rolled back again (nothing left in the window could re-decode them).
    carried: int = 0
    head_db: float = 0.0  # loudest 10 ms frame of the chunk's first EDGE_FRAMES (dB full scale)
    tail_db: float = 0.0  # loudest of its last EDGE_FRAMES
    speech_db: float = -math.inf  # the recent speech level once this chunk's audio was counted
    mel: Optional[np.ndarray] = None  # (n_mels, frames) until encoded
    mel_ms: float = 0.0  # time its mel took
    enc: object = None  # EncodeStats of its encoder call
    enc_ms: float = 0.0  # mel + encoder wall time


def positions_needed(engine, options: TranscribeOptions) -> int:
    """Most decoder positions one window of a session with these (resolved) options can take:
    the prompt with ``memory_num`` full chunks of audio, a language header, and every chunk's
    token budget."""
    o = options
    window = engine.request_prompt(o.memory_num * tokens_for_frames(o.chunk_samples // HOP), o)
    return len(window) + HEADER_TOKENS + o.memory_num * o.max_new_tokens


class StreamSession:
    """Per-stream state over a loaded engine; see the module docstring.

    Make it with ``engine.create_stream(...)``. ``feed_audio(pcm)`` takes (n,) float32 16 kHz
    mono of any length and returns the StreamResult so far; ``finish()`` flushes and returns
    the final one; ``reset()`` starts over (the VAD model stays loaded).
    """

    def __init__(self, engine, options: TranscribeOptions = TranscribeOptions(),
                 on_text: Optional[Callable[[str], None]] = None, vad_model=None, work: Work = NO_WORK,
                 mel_ceiling: Optional[float] = None):
        """``options``: the request's settings (stream defaults filled in for None fields);
        ``vad_model``: a loaded SileroVAD (default: a new one when VAD is on); ``work``:
        scheduling hooks, one unit per chunk; ``mel_ceiling``: log10 mel ceiling of the clamp
        (None: the running maximum; long files pass the whole file's)."""
        self.engine = engine
        self._work = work
        self._on_text = on_text
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
        self._asr_text = engine.tokenizer.asr_text
        self._prefix_len = engine.prefix_len(o)  # prompt rows before the audio: the same in every window
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
        self._window: collections.deque = collections.deque()
        self._new_segment()
        self._run_text = ""  # committed text of the open segment (raw)
        self._text = self.engine.tokenizer.incremental_decoder()  # committed ids -> text
        self._held: List[int] = []  # committed ids whose last character is still incomplete
        self._held_text = ""  # text those ids already gave
        self._done_text = ""  # text of closed segments
        self._committed = ""  # join_text(_done_text, _run_text), kept up to date
        self._all_ids: List[int] = []
        self._segments: List[Segment] = []
        self._chunks: List[ChunkStats] = []
        self._n_cut = 0  # chunks cut so far (decoded or about to be)
        self._totals = dict.fromkeys(_SUMMED, 0)  # running sums of the ChunkStats fields
        self._encoded = 0  # samples encoded
        self._vad_ms = 0.0
        self._levels_db: collections.deque = collections.deque()  # 10 ms frame levels of recent chunks (dB)
        self._speech_db = -math.inf  # LEVEL_QUANTILE of those levels
        self._ceiling = -math.inf if self._mel_ceiling is None else float(self._mel_ceiling)
        self._language: Optional[str] = self.options.language
        self._truncated = False
        self._finished = False
        self._warned_clip = False
        if self._vad is not None:
            self._vad.reset()

    def feed_audio(self, pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> StreamResult:
        """Add (n,) float32 mono 16 kHz samples in [-1, 1] (any n); returns the result so far."""
        if self._finished:
            raise RuntimeError("feed_audio() after finish(); call reset() to start a new stream")
        self.engine.check_open()
        pcm = self._check(pcm, sample_rate)
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
        return self.result()

    def result(self) -> StreamResult:
        tail_ids = [t for c in self._window for t in c.tokens]
        tail = ""
        if tail_ids:  # the held ids complete the character the committed text ends inside
            tail = self.engine.tokenizer.decode(self._held + tail_ids)[len(self._held_text):]
        return StreamResult(committed=self._committed, tail=tail.strip(), language=self._language,
                            segments=tuple(self._segments), stats=self.stats(), chunks=tuple(self._chunks),
                            finished=self._finished, truncated=self._truncated, token_ids=tuple(self._all_ids))

    def stats(self) -> StreamStats:
        return StreamStats(audio_seconds=self._pos / SAMPLE_RATE, encoded_seconds=self._encoded / SAMPLE_RATE,
                           vad_ms=self._vad_ms, chunks=len(self._chunks), **self._totals)

    # ------------------------------------------------------------------ input
    def _check(self, pcm, sample_rate) -> np.ndarray:
        if sample_rate != SAMPLE_RATE:
            raise ValueError(f"StreamSession needs {SAMPLE_RATE} Hz audio, got {sample_rate} Hz; resample first "
                             f"(qwen3asr.audio.resample or soxr.resample(pcm, {sample_rate}, {SAMPLE_RATE}))")
        if not isinstance(pcm, np.ndarray):
            raise ValueError(f"feed_audio needs a numpy float32 array, got {type(pcm).__name__}")
        if pcm.dtype != np.float32:
            raise ValueError(f"feed_audio needs float32 samples in [-1, 1], got dtype {pcm.dtype}; convert int16 "
                             f"with pcm.astype(np.float32) / 32768")
        if pcm.ndim == 2 and pcm.shape[1] == 1:
            pcm = pcm[:, 0]
        if pcm.ndim != 1:
            raise ValueError(f"feed_audio needs mono audio of shape (samples,), got shape {pcm.shape}; "
                             f"mix channels first, e.g. pcm.mean(axis=1)")
        if not np.all(np.isfinite(pcm)):
            raise ValueError("feed_audio got NaN or infinite samples")
        if pcm.size and float(np.max(np.abs(pcm))) > 1.0:
            if not self._warned_clip:
                logger.warning("stream audio exceeds [-1, 1]; clipping (scale the input to avoid distortion)")
                self._warned_clip = True
            pcm = np.clip(pcm, -1.0, 1.0)
        return pcm

    def _audio(self, a: int, b: int) -> np.ndarray:
        if a < self._buf_start:
            raise RuntimeError(f"internal: audio at sample {a} already dropped (kept from {self._buf_start})")
        return self._buf[a - self._buf_start:b - self._buf_start]

    def _trim(self) -> None:
        if self._seg_start is not None and not self._full():
            keep = max(self._seg_start, self._next - LEFT_CONTEXT)
        else:
            keep = self._pos - int(PREROLL_SECONDS * SAMPLE_RATE)
        keep = max(keep, self._buf_start)
        if keep > self._buf_start:
            self._buf = self._buf[keep - self._buf_start:].copy()
            self._buf_start = keep

    # ------------------------------------------------------------------ VAD events
    def _handle(self, events) -> None:
        for ev in events:
            if isinstance(ev, SpeechStart):
                start = max(ev.sample, self._buf_start)
                if start != ev.sample:
                    logger.debug("speech start %d is older than the kept audio; starting at %d", ev.sample, start)
                self._seg_start = self._next = start
                self._new_segment()
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
            db = _frame_db(self._audio(self._next, self._next + size))
            end = self._next + self._pause_cut(db) * HOP
            ready.append(self._prepare(self._next, end, right=end + LOOKAHEAD, db=db[:(end - self._next) // HOP]))
            self._next = end
        self._run(ready)

    def _pause_cut(self, db: np.ndarray) -> int:
        """Frames the chunk keeps: it ends at the last pause after its first quarter (60 ms
        of quiet both sides of the cut, as ``_pause_before`` judges a boundary), or is whole.

        The next chunk then starts in the pause, a fresh window with no word cut. Five long
        clips, trained model, without VAD, rollback 2 (0): 4 s chunks 5.0 (7.0) -> 1.8 (1.8) %
        MER, as good as with Silero VAD; 2 s 5.1 (4.8) -> 2.4 (3.3) %; prefill at the defaults
        1.77x -> 1.35x the offline minimum; the encoder runs 9 % more graph seconds (shorter
        chunks padded to the next graph). Not below PAUSE_CUT_MIN_CHUNK: at 1.5 s chunks it
        gave 5.4 (4.7) % against 4.7 (4.4) % (a fresh window of 1.5 s or less holds too little
        audio for this model), and requiring 0.5-1 s per chunk did not help."""
        n = db.shape[0]
        pause = self.options.pause_db
        if pause is None or self.options.chunk_size < PAUSE_CUT_MIN_CHUNK:
            return n
        level = float(np.quantile(np.concatenate(list(self._levels_db) + [db]), LEVEL_QUANTILE))
        quiet = db < level - pause
        for k in range(n - EDGE_FRAMES, max(EDGE_FRAMES, n // 4) - 1, -1):
            if quiet[k - EDGE_FRAMES:k + EDGE_FRAMES].all():
                return k
        return n

    def _close_segment(self, end: int) -> None:
        n = (end - self._next) // HOP * HOP
        if n > 0 and self._room():
            self._run([self._prepare(self._next, self._next + n, right=end)])
        self._next = end
        for c in list(self._window):
            self._commit(c)
        self._window.clear()
        # Committed text never changes (on_text has sent it): the official repetition collapse
        # ran on each piece when it was committed (_commit).
        text = (self._run_text + self._text.flush()).strip()
        self._held, self._held_text = [], ""
        if self.options.itn and text:
            from .itn import inverse_normalize

            text = inverse_normalize(text, self._language)
        self._done_text = self._committed = join_text(self._done_text, text)
        self._run_text = ""
        self._new_segment()
        self._seg_start = None if self._vad is not None else end

    def _new_segment(self) -> None:
        """Forget the window's language header: the next decoder run starts a segment."""
        self._header: List[int] = []  # detected language header kept in front of the prefix
        self._header_lang: Optional[str] = None
        self._steps = 0  # decoder runs in the open segment

    def _full(self) -> bool:
        """True once max_chunks chunks are cut: no more audio is decoded."""
        return self.options.max_chunks is not None and self._n_cut >= self.options.max_chunks

    def _room(self) -> bool:
        """Whether a chunk that is ready may be decoded; if not, its audio is dropped (truncated)."""
        if self._full():
            self._truncated = True
            return False
        return True

    def _mel(self, c0: int, c1: int, right: int) -> np.ndarray:
        """Log-mel (n_mels, (c1-c0)/160) of [c0, c1) as the offline front end computes it for the
        segment (reflect padding only at the segment's own edges), clamped at the session ceiling."""
        a = c0 if c0 - LEFT_CONTEXT < self._seg_start else c0 - LEFT_CONTEXT
        power = melmod.log_mel_power(self._audio(a, right), self.engine.n_mels)
        off = (c0 - a) // HOP
        power = power[:, off:off + (c1 - c0) // HOP]
        if self._mel_ceiling is None:
            self._ceiling = max(self._ceiling, float(power.max()))
        return melmod.normalize_log_mel(power, self._ceiling)

    def _prepare(self, c0: int, c1: int, right: int, db: Optional[np.ndarray] = None) -> "_Chunk":
        """A chunk [c0, c1) made ready to encode from the audio alone (mel frames need audio up
        to ``right``): its log-mel and its levels (``db``: its 10 ms frame levels when already
        computed). Chunks are prepared in order, before any of them is decoded."""
        self._n_cut += 1
        t0 = time.perf_counter()
        chunk = _Chunk(c0, c1, None, [], None)
        chunk.mel = self._mel(c0, c1, right)
        chunk.mel_ms = (time.perf_counter() - t0) * 1000
        self._levels(chunk, _frame_db(self._audio(c0, c1)) if db is None else db)
        return chunk

    def _encode(self, chunk: "_Chunk") -> None:
        t0 = time.perf_counter()
        chunk.embeds, chunk.enc = self.engine.encode_timed(chunk.mel)
        chunk.mel = None
        chunk.enc_ms = chunk.mel_ms + (time.perf_counter() - t0) * 1000  # mel + encoder

    def _run(self, chunks: List["_Chunk"]) -> None:
        """Encode and decode ``chunks`` in order, one unit of model work each. With overlap
        (``TranscribeOptions.overlap``) the next chunk is encoded while this one is decoded:
        the encoder (RKNN on the NPU) and the decoder (RKLLM) then work at once."""
        overlap = self._overlap and len(chunks) > 1
        for i, chunk in enumerate(chunks):
            with self._work.unit():
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

    def _decode(self, chunk: "_Chunk") -> None:
        """Put the encoded chunk in the window and decode the window."""
        eng, o = self.engine, self.options
        c0, c1 = chunk.start, chunk.end
        self._encoded += c1 - c0
        enc, enc_ms = chunk.enc, chunk.enc_ms
        self._window.append(chunk)
        while len(self._window) > self.options.memory_num:
            self._commit(self._window.popleft())
        if self._pause_before():
            while len(self._window) > 1:
                self._commit(self._window.popleft())
            self._new_segment()
        prefix, carried = self._prefix()
        forced = o.language
        in_text = forced is not None or o.compact_prompt  # no language header to keep or split off
        header = [] if in_text or not prefix else list(self._header)
        audio = np.concatenate([c.embeds for c in self._window], axis=0)
        extra = header + prefix
        x = eng.decoder_input(audio, o, extra)
        decoding = o.decoding(seed=o.chunk_seed(len(self._chunks)))
        tokens, ds = eng.generate(x, decoding, on_token=lambda _: not self._work.cancelled,
                                  prefix_len=self._prefix_len)
        self._work.check()
        if ds.finish_reason == "length":
            self._truncated = True
        if not in_text and not header:
            tokens = self._split_header(tokens)
        if not prefix:
            tokens = self._drop_repeated_start(tokens)
        chunk.tokens = list(tokens)
        chunk.fresh = not prefix
        chunk.carried = min(carried, len(tokens))
        chunk.language = forced or self._header_lang
        if chunk.language:
            self._language = chunk.language
        self._steps += 1
        st = ChunkStats(
            start=c0 / SAMPLE_RATE, end=c1 / SAMPLE_RATE, encoder_calls=enc.calls,
            encoder_seconds=enc.graph_seconds, encoder_ms=enc_ms, window_chunks=len(self._window),
            prefix_tokens=len(extra), prefill_tokens=ds.prefill_tokens, prefill_ms=ds.prefill_ms,
            decode_tokens=ds.decode_tokens, decode_ms=ds.decode_ms, generated=len(tokens))
        self._chunks.append(st)
        for k in _SUMMED:
            self._totals[k] += getattr(st, k)
        logger.debug("chunk %.2f-%.2f s: window %d, prefix %d, generated %d", c0 / SAMPLE_RATE, c1 / SAMPLE_RATE,
                     len(self._window), len(extra), len(tokens))

    def _levels(self, chunk: _Chunk, db: np.ndarray) -> None:
        """Loudness of the chunk's edges (for ``_pause_before``) and the recent speech level."""
        if db.shape[0] == 0:  # a final piece under 10 ms: edges stay 0 dB (loud, no pause)
            chunk.speech_db = self._speech_db
            return
        chunk.head_db, chunk.tail_db = float(db[:EDGE_FRAMES].max()), float(db[-EDGE_FRAMES:].max())
        self._levels_db.append(db)
        kept = sum(d.shape[0] for d in self._levels_db)
        while kept - self._levels_db[0].shape[0] >= LEVEL_SECONDS * 100:
            kept -= self._levels_db.popleft().shape[0]
        self._speech_db = float(np.quantile(np.concatenate(self._levels_db), LEVEL_QUANTILE))
        chunk.speech_db = self._speech_db

    def _pause_before(self) -> bool:
        """Whether the boundary before the newest chunk of the window lies in a pause
        (``TranscribeOptions.pause_db``): quiet audio on both sides.

        Five long clips, trained model, without VAD, rollback 2 / 0: 9.1 / 6.1 -> 4.7 / 4.4 % MER
        at 1.5 s chunks, 7.8 / 6.5 -> 5.1 / 4.8 % at 2 s, 5.5 / 7.5 -> 5.0 / 7.0 % at 4 s; prefill
        2.38x -> 1.77x the offline minimum at the defaults; with VAD unchanged. Only rolling
        nothing back at such a boundary (the window still sliding) gave 7.3 / 6.8 / 5.0 % for
        rollback 2: re-decoding whole words after a pause dropped or repeated some. The level
        is a quantile, not the peak: with the peak, one full-scale 30 ms click at 0.5 s raised
        the threshold for the whole stream (before ``_pause_cut`` existed; peak at 30 dB: 7.3 /
        5.4 / 5.4 % at 1.5 / 2 / 4 s; quantile at 25 dB: 7.3 / 5.1 / 5.1 %; the click itself
        also costs some, as without the rule). Without a click both give the numbers above."""
        pause = self.options.pause_db
        if pause is None or len(self._window) < 2:
            return False
        before, after = self._window[-2], self._window[-1]
        return max(before.tail_db, after.head_db) < after.speech_db - pause

    def _prefix(self) -> Tuple[List[int], int]:
        """(prefix, rolled back): the text tokens of the window's older chunks minus the last
        ``rollback_tokens``, and how many were removed from their chunks (they will be decoded
        again, attributed to the newest chunk).

        The oldest chunk's carried tokens (see ``_Chunk.carried``) are neither rolled back nor
        part of the prefix: their audio has left the window. Rolled back, they were lost (1.5 s
        chunks: " ten forty" carried into a chunk, rolled back with the next one and never
        decoded again; 5 long clips without VAD, rollback 2: 41.1 -> 21.9 % at 1.5 s chunks);
        kept in the prefix, the model took them for the start of the window's audio and skipped
        what followed (21.9 -> 20.6 % at 1.5 s, 17.5 -> 13.1 % at 2 s, 14.4 -> 11.5 % at 4 s
        when left out). The cut never ends inside a character (as the official code) and leaves
        at least one of the older chunks' own tokens: emptied prefixes meant fresh decodes that
        dropped or repeated words (committed model, five long clips, rollback 2 without VAD:
        15.2 -> 9.1 % at 1.5 s chunks, 10.2 -> 7.8 % at 2 s, 6.3 -> 5.5 % at 4 s; with VAD
        7.3 -> 5.3 % at 1.5 s, the same at 2 and 4 s)."""
        older = list(self._window)[:-1]
        if self._steps < self.options.unfixed_chunks:
            for c in older:
                c.tokens, c.carried = [], 0
            return [], 0
        ids = [t for c in older for t in c.tokens]
        dec = self.engine.tokenizer.incremental_decoder()
        whole = [True]  # whole[k]: ids[:k] ends on a character boundary
        for t in ids:
            dec.push(t)
            whole.append(not dec.pending)
        most = len(ids) - (older[0].carried if older else 0)  # the tokens not carried (carried <= tokens)
        while most > 0 and not whole[len(ids) - most]:
            most -= 1  # nor does the prefix start inside a character
        # At least one token of the older chunks' own text stays: a rollback never empties the
        # prefix, which would have the window decoded afresh from its start.
        cut = min(self.options.rollback_tokens, max(0, most - 1))
        while cut < most and not whole[len(ids) - cut]:
            cut += 1  # never end the prefix inside a character (as the official code)
        remove = cut
        for c in reversed(older):
            k = min(remove, len(c.tokens))
            if k:
                del c.tokens[len(c.tokens) - k:]
                c.carried = min(c.carried, len(c.tokens))
            remove -= k
        return ids[len(ids) - most:len(ids) - cut], cut

    def _drop_repeated_start(self, tokens: List[int]) -> List[int]:
        """A window decoded afresh because its oldest chunk holds only carried tokens (left out of
        the prefix) often begins by reading those words again, whose audio straddles the window
        start. Drop the longest start of ``tokens`` that reads as the end of those carried
        tokens (as text, stripped: a fresh answer has no leading space). Five long clips, session-5
        model, rollback 2 without VAD: 16.6 -> 15.2 % MER at 1.5 s chunks, 13.9 -> 10.2 % at 2 s,
        6.7 -> 6.3 % at 4 s; rollback 5: 23.5 / 20.3 / 9.0 -> 17.5 / 17.1 / 8.0 %; with VAD
        8.0 -> 7.3 % at 1.5 s, unchanged at 2 and 4 s. A word really said twice across such a
        boundary would be dropped once."""
        older = list(self._window)[:-1]
        if not older or not older[0].carried or not tokens:
            return tokens
        tok = self.engine.tokenizer
        carried = older[0].tokens[:older[0].carried]
        ends = {tok.decode(carried[j:]).strip() for j in range(len(carried))} - {""}
        for k in range(min(len(tokens), len(carried) + 2), 0, -1):
            if tok.decode(tokens[:k]).strip() in ends:
                return tokens[k:]
        return tokens

    def _split_header(self, tokens: List[int]) -> List[int]:
        """Keep ``language X<asr_text>`` as the window's header; return the text tokens."""
        if self._asr_text not in tokens:
            self._header, self._header_lang = [], None
            return tokens
        i = tokens.index(self._asr_text)
        lang = parse_language_header(self.engine.tokenizer.decode(tokens[:i]).strip())
        self._header = tokens[:i + 1] if lang else []
        self._header_lang = lang
        return tokens[i + 1:]

    def _commit(self, chunk: _Chunk) -> None:
        piece = fix_repetitions("".join(self._push(t) for t in chunk.tokens))
        self._all_ids.extend(chunk.tokens)
        if not self._run_text:
            piece = piece.lstrip()
        elif chunk.fresh and piece and spaced(piece[0]) and spaced(self._run_text[-1]):
            # An answer begun afresh (empty window prefix) has no leading space: without one
            # here "... rice cooker" + "close the ..." would read "cookerclose".
            piece = " " + piece
        self._run_text += piece
        text = piece.strip()
        if text:
            self._segments.append(Segment(chunk.start / SAMPLE_RATE, chunk.end / SAMPLE_RATE, text, chunk.language))
        before, self._committed = self._committed, join_text(self._done_text, self._run_text)
        if self._on_text is not None and len(self._committed) > len(before) and self._committed.startswith(before):
            self._on_text(self._committed[len(before):])

    def _push(self, token: int) -> str:
        """Commit one id to the text decoder; returns the newly completed text."""
        out = self._text.push(token)
        if self._text.pending:
            self._held.append(token)
            self._held_text += out
        else:
            self._held, self._held_text = [], ""
        return out
