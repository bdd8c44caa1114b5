"""Result dataclasses returned by the engine."""

from __future__ import annotations

import dataclasses
import types
from typing import Optional


DECODER_COSTS = ("prefill_tokens", "prefill_ms", "decode_tokens", "decode_ms")  # what every report of a run copies


def decoder_costs(stats) -> dict:
    """The decoder cost fields (DECODER_COSTS) of a DecodeStats, StreamStats or ChunkStats, by name:
    the one copy of them into another report."""
    return {k: getattr(stats, k) for k in DECODER_COSTS}


@dataclasses.dataclass(frozen=True)
class TranscriptionStats:
    audio_seconds: float  # duration of the input audio (s)
    encoder_ms: float  # mel + encoder wall time (ms)
    encoder_calls: int  # encoder graph executions
    prefill_tokens: int  # prompt tokens (audio included) fed to the decoder
    prefill_ms: float  # decoder prefill wall time (ms)
    decode_tokens: int  # tokens generated after the prefill
    decode_ms: float  # decoder time spent generating them (ms)
    total_ms: float  # end-to-end wall time of transcribe() (ms)
    backend: str  # backend that ran ("onnx", "rk")
    runtime_perf: Optional[dict] = None  # the runtime's own figures where it reports them (RKLLM)
    fallback_tries: int = 0  # decoder runs made again with fallback settings (qwen3asr.decoding)
    loops: int = 0  # decoder runs the loop guard stopped (their fallback, if any, counted above)
    draft_tokens: int = 0  # draft ids fed after the prompt (in prefill_tokens)
    verified_tokens: int = 0  # generated ids a draft gave and the prefill confirmed (no decode step each)

    @property
    def real_time_factor(self) -> float:
        """Processing time / audio duration (< 1 is faster than real time)."""
        return self.total_ms / 1000.0 / self.audio_seconds if self.audio_seconds > 0 else float("nan")

    @property
    def decode_tokens_per_second(self) -> float:
        return self.decode_tokens / (self.decode_ms / 1000.0) if self.decode_ms > 0 else float("nan")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["real_time_factor"] = self.real_time_factor
        d["decode_tokens_per_second"] = self.decode_tokens_per_second
        return d


@dataclasses.dataclass(frozen=True)
class Word:
    """One word unit of a transcript and when it was said (forced alignment, qwen3asr.aligner).

    ``word`` is the aligner's unit, not the transcript's spelling: a whitespace word with
    everything but letters, digits and the apostrophe dropped, or one CJK character.
    """

    word: str
    start: float  # seconds from the start of the input audio (its ``start_second`` included)
    # seconds; end >= start: the aligner's 80 ms bins, repaired to be monotonic, then (with
    # TranscribeOptions.word_spans "speech") fitted to the speech (qwen3asr.aligner.refine)
    end: float

    def to_dict(self) -> dict:
        return {"word": self.word, "start": self.start, "end": self.end}

    def shifted(self, seconds: float) -> "Word":
        """This word ``seconds`` later (times rounded to the millisecond, as the aligner gives them)."""
        return dataclasses.replace(self, start=round(self.start + seconds, 3), end=round(self.end + seconds, 3))


@dataclasses.dataclass(frozen=True)
class Segment:
    """A piece of a transcript with its place in the audio."""

    start: float  # seconds from the start of the input audio
    end: float  # seconds, exclusive
    text: str  # transcript of this piece (stripped)
    language: Optional[str] = None  # language name the model wrote for it, None if unknown
    words: tuple[Word, ...] = ()  # its words with times, when word timestamps were asked for
    # how its decoder run ended: "eos", "length" (max_new_tokens), "repetition" (a loop the
    # guard stopped, and no fallback try did better), "stopped"; None where not known
    finish_reason: Optional[str] = None
    # "collapsed: <reason>" when its words did not align ("same start", "zero start", "end
    # pile-up"; qwen3asr.aligner.refine): their times are unreliable. None: aligned, or no words
    words_flag: Optional[str] = None

    def shifted(self, seconds: float) -> "Segment":
        """This segment and its words ``seconds`` later (a piece's times made times of the whole input)."""
        return dataclasses.replace(self, start=self.start + seconds, end=self.end + seconds,
                                   words=tuple(w.shifted(seconds) for w in self.words))

    def to_dict(self) -> dict:
        d = {"start": self.start, "end": self.end, "text": self.text, "language": self.language}
        if self.finish_reason is not None:
            d["finish_reason"] = self.finish_reason
        if self.words:
            d["words"] = [w.to_dict() for w in self.words]
        if self.words_flag is not None:
            d["words_flag"] = self.words_flag
        return d


@dataclasses.dataclass(frozen=True)
class DecodeStats:
    """What one decoder run on prompt embeddings cost (see the TextDecoder seam, qwen3asr.decoding)."""

    prefill_tokens: int  # prompt positions fed in one prefill
    prefill_ms: float  # wall time of the prefill (ms)
    decode_tokens: int  # tokens fed back after the prefill (forward passes of one token)
    decode_ms: float  # wall time of those passes (ms)
    # "eos" (end-of-sequence), "length" (max_new_tokens reached), "stopped" (on_token returned
    # False: a cancelled request) or "repetition" (the loop guard stopped a runaway repetition)
    finish_reason: str
    runtime_perf: Optional[dict] = None  # the runtime's own figures where it reports them (RKLLM)
    reused_tokens: int = 0  # of the prefill_tokens, prompt-prefix positions whose KV was reused (not computed)
    draft_tokens: int = 0  # of the prefill_tokens, draft ids fed after the prompt (TextDecoder.generate's draft)
    verified_tokens: int = 0  # of those, ids the prefill confirmed: generated without a decode step


@dataclasses.dataclass(frozen=True)
class Transcription:
    text: str  # the transcript (language prefix removed)
    language: Optional[str]  # detected or forced language name ("English"), None if no speech / unknown
    language_code: Optional[str]  # BCP-47 code ("en"), None with language None
    token_ids: tuple[int, ...]  # generated token ids (end-of-sequence excluded)
    raw_text: str  # decoded output before parsing ("language English<asr_text>...")
    truncated: bool  # the token budget ran out before end-of-sequence
    stats: TranscriptionStats
    segments: tuple[Segment, ...] = ()  # timed pieces in order (one for a single-pass clip with text)
    # the worst way a decoder run ended: "eos" < "length" < "repetition" (a loop that no
    # fallback try cured); segments tell which
    finish_reason: str = "eos"

    @property
    def words(self) -> tuple[Word, ...]:
        """Every segment's words in order (empty unless word timestamps were asked for)."""
        return tuple(w for seg in self.segments for w in seg.words)

    @property
    def words_flag(self) -> Optional[str]:
        """The first segment's ``words_flag`` that is set (a collapsed alignment), else None."""
        return next((seg.words_flag for seg in self.segments if seg.words_flag is not None), None)

    def to_dict(self) -> dict:
        d = {"text": self.text, "language": self.language, "language_code": self.language_code,
             "truncated": self.truncated, "finish_reason": self.finish_reason, "token_ids": list(self.token_ids),
             "raw_text": self.raw_text,
             "stats": self.stats.to_dict(), "segments": [seg.to_dict() for seg in self.segments]}
        if self.words:
            d["words"] = [w.to_dict() for w in self.words]
        return d

    def __getitem__(self, key: str):
        """Read-only mapping access like the dict results of the reference design
        (docs/reference_design.md): ``result["text"]``, ``result["stats"]["rtf"]`` (stats also under
        their field names), ``result["segments"]``."""
        return _mapping(self)[key]

    def keys(self):
        return _mapping(self).keys()


def _frozen(value):
    if isinstance(value, dict):
        return types.MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


def _mapping(result: Transcription):
    d = result.to_dict()
    d["stats"]["rtf"] = d["stats"]["real_time_factor"]
    return _frozen(d)


@dataclasses.dataclass(frozen=True)
class EncodeStats:
    """What one encoder call cost."""

    calls: int  # encoder graph executions
    graph_seconds: float  # capacity of the fixed-size graphs run (s, padding included)
    ms: float  # wall time (ms)


@dataclasses.dataclass(frozen=True)
class Request:
    """One clip made ready for the decoder (Qwen3ASREngine.prepare)."""

    prompt: object  # qwen3asr.prompt.Prompt: token ids of the prompt, audio pads included
    embeds: object  # np.ndarray (len(prompt), hidden) float32: embedded prompt with the audio spliced in
    audio_seconds: float  # duration of the clip
    encoder_ms: float  # mel + encoder wall time
    encoder_calls: int  # encoder graph executions
    t0: float  # time.perf_counter() when preparation started (for total_ms)
