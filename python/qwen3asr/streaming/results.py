"""What a stream reports: the transcript so far and what each chunk cost."""

from __future__ import annotations

import dataclasses
from typing import Optional

from ..text import join_text


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
    finish_reason: str = "eos"  # of the kept decoder run: eos, length, repetition (a loop), stopped
    fallback_tries: int = 0  # decoder runs made again with the fallback settings (costs included above)
    loops: int = 0  # 1 when the first run looped (the loop guard stopped it)


SUMMED = ("encoder_seconds", "encoder_calls", "encoder_ms", "prefill_tokens", "prefill_ms", "decode_tokens",
          "decode_ms", "fallback_tries", "loops")  # ChunkStats fields that StreamStats totals


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
    fallback_tries: int = 0  # decoder runs made again with the fallback settings
    loops: int = 0  # decoder runs the loop guard stopped
    final_passes: int = 0  # finished pieces decoded again in one pass (TranscribeOptions.final_pass)
    partials: int = 0  # previews of the open chunk (TranscribeOptions.partial_every), not in the sums above

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

    # text that will not change any more; a live stream keeps the latest HISTORY_CHARS (65536)
    # characters: dropped_chars were dropped before it (on_text sent them)
    committed: str
    tail: str  # text of the chunks still in the decoder window (may still change)
    language: Optional[str]  # language of the latest text (forced or detected), None if unknown
    # Segment per committed chunk with text (times in stream seconds); a live stream keeps the
    # latest (HISTORY_SEGMENTS, 1000): dropped_segments were dropped before segments[0]
    segments: tuple
    stats: StreamStats
    chunks: tuple  # ChunkStats of the latest chunks decoded (at most CHUNK_HISTORY, 1000; stats.chunks counts all)
    finished: bool  # finish() was called; the tail is then empty
    truncated: bool = False  # some chunk ran out of max_new_tokens
    # committed text token ids, all segments (language headers excluded; a live stream: the latest HISTORY_TOKENS)
    token_ids: tuple = ()
    # segments[:final_segments] are final; with final passes, the open piece's per-chunk segments
    # after them are replaced by one segment when the piece ends
    final_segments: int = 0
    dropped_segments: int = 0  # older segments no longer kept (segments[i] is the stream's dropped_segments + i)
    dropped_chars: int = 0  # older committed characters no longer kept
    finish_reason: str = "eos"  # the worst of every chunk's decoder run (qwen3asr.decoding.FINISH_RANK)

    @property
    def text(self) -> str:
        return join_text(self.committed, self.tail) if self.tail else self.committed

    @property
    def words(self) -> tuple:
        """Every committed segment's words (with word timestamps on; the tail has none yet)."""
        return tuple(w for seg in self.segments for w in seg.words)


__all__ = ["ChunkStats", "StreamResult", "StreamStats", "SUMMED"]
