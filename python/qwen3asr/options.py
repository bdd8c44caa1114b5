"""How a request is decoded: one options object for files, long recordings and streams.

``TranscribeOptions`` holds everything a caller chooses per request (language, context
biasing, sampling, budgets, chunking, rollback, pauses, VAD, ITN); it is validated once, here.
``Qwen3ASREngine.transcribe`` and ``create_stream`` take it (their keyword arguments are
conveniences that build it), and ``dataclasses.replace`` makes variants.

A few fields have a default that depends on the mode, because a one-pass clip, a long file
and a live stream want different values (each measured, docs/streaming.md). ``None`` means
that default:

=================  ==========================  ==========================  ==================
field              one pass (audio that fits)  long file (chunked)          stream
=================  ==========================  ==========================  ==================
max_new_tokens     256                         256 per chunk                128 per chunk
chunk_size         (not chunked)               30 s                         4 s
rollback_tokens    (not chunked)               5                            2
vad                (not used)                  auto: Silero VAD if its     off
                                               model is available
=================  ==========================  ==========================  ==================

A file goes in one pass when it fits the decoder context and the model's declared one-pass
limit, unless ``chunk_size``, ``vad`` or ``max_chunks`` ask for chunking; longer audio goes
VAD-first when the VAD model is available (``vad=None``), else in chunks (docs/streaming.md).
``one_pass=True`` always decodes a file in one pass.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

from . import checks
from .decoding import MAX_CONTEXT, DecodingOptions, sampling_problems
from .languages import resolve_language
from .mel import HOP_LENGTH as HOP  # samples per 10 ms mel frame
from .vad import VADOptions

ONE_PASS_MAX_NEW_TOKENS = 256
FILE_CHUNK_SIZE = 30.0  # seconds per chunk for long files decoded without VAD segments
FILE_CHUNK_MAX_NEW_TOKENS = 256
FILE_ROLLBACK_TOKENS = 5
STREAM_CHUNK_SIZE = 4.0
STREAM_MAX_NEW_TOKENS = 128
STREAM_ROLLBACK_TOKENS = 2
WORD_SPANS = ("speech", "raw", "checked")  # TranscribeOptions.word_spans: fitted to the speech, the aligner's own, or
# fitted with the words at pauses checked by the ASR model

MIN_CHUNK_SECONDS = 0.2  # shortest chunk: 20 mel frames, 3 encoder tokens
# Longest chunk: the official model's longest one pass (docs/streaming.md). At 13 encoder tokens
# per second (qwen3asr.encoder.TOKENS_PER_CHUNK) that is 15600 audio positions, within the largest
# decoder context of any backend (decoding.MAX_CONTEXT, 16384); a decoder window never holds
# more audio than this, so memory_num x chunk_size is bounded by it too.
MAX_CHUNK_SECONDS = 1200.0
MAX_MEMORY_NUM = int(MAX_CHUNK_SECONDS / MIN_CHUNK_SECONDS)  # 6000 chunks of the shortest size in one window
MAX_ROLLBACK_TOKENS = MAX_CONTEXT  # a window's text never holds more tokens than the context
# pause_db has no upper bound: frame levels span 100 dB (streaming.pause.frame_db floors at
# -100 dBFS), so beyond 100 dB no frame is quiet enough and pauses are off, as with None.
# max_chunks has none either: a cap beyond the audio's chunks caps nothing.


def interval_problem(name: str, seconds) -> Optional[str]:
    """The check of a preview interval in seconds (partial_every, first_words; TranscribeOptions
    and the WebSocket start message): None, or a number of seconds a chunk may last."""
    return checks.number(name, seconds, MIN_CHUNK_SECONDS, MAX_CHUNK_SECONDS, kind="a number of seconds",
                         optional=True)


def chunk_problems(chunk_size, name: str = "chunk_size", optional: bool = True) -> list[str]:
    """The check of a chunk length in seconds (every surface that takes one: TranscribeOptions,
    the WebSocket start message, the Wyoming options): a number of seconds in
    [MIN_CHUNK_SECONDS, MAX_CHUNK_SECONDS], a whole number of 10 ms mel frames."""
    p = checks.number(name, chunk_size, MIN_CHUNK_SECONDS, MAX_CHUNK_SECONDS, kind="a number of seconds",
                      optional=optional)
    if p:
        return [p]
    if chunk_size is not None and abs(chunk_size * 100 - round(chunk_size * 100)) > 1e-6:
        return [f"{name} must be a whole number of 10 ms frames, e.g. 2.0 or 0.64 (got {checks.show(chunk_size)})"]
    return []


@dataclasses.dataclass(frozen=True)
class TranscribeOptions:
    """One request's decoding settings (validated on creation; see the module docstring)."""

    language: Optional[str] = None  # forced language (name or BCP-47 code, kept as its name); None detects it
    context: str = ""  # system text that biases recognition (names, terms); may be empty
    # -- sampling (default: greedy, as the official decoding)
    max_new_tokens: Optional[int] = None  # generated-token budget (per chunk when chunked); None: the mode's
    temperature: float = 0.0  # 0 = greedy; > 0 samples from softmax(logits / T)
    top_k: int = 0  # keep the k most likely tokens when sampling (0 = all)
    top_p: float = 1.0  # nucleus sampling threshold (1 = all)
    repetition_penalty: float = 1.0  # > 1 discourages tokens already generated (1 = off, as official)
    seed: Optional[int] = None  # sampling seed; chunk k of a request uses a seed derived from (seed, k)
    # -- chunking (streams always; files when too long for one pass or asked for)
    chunk_size: Optional[float] = None  # seconds per chunk, a whole number of 10 ms frames >= 0.2; None: the mode's
    memory_num: int = 2  # chunks whose audio the decoder sees at once (the newest included)
    unfixed_chunks: int = 0  # first chunks of a segment decoded without text prefix (< memory_num)
    rollback_tokens: Optional[int] = None  # tokens at the end of the window's text decoded again; None: the mode's
    # A chunk boundary whose 60 ms either side stay this many dB below the recent speech level
    # lies in a pause: the window ends there and the next chunk starts a fresh one; chunks of
    # 2 s or more end at their last pause (qwen3asr.streaming.pause). None: fixed chunks, a sliding window.
    pause_db: Optional[float] = 25.0
    vad: Union[None, bool, VADOptions] = None  # Silero VAD: True/VADOptions on, False off, None the mode's
    max_chunks: Optional[int] = None  # decode at most this many chunks (the rest is dropped; truncated)
    # Files: always one pass (the official algorithm), even beyond the model's declared one-pass
    # limit; audio over the decoder context is then an AudioError instead of being chunked.
    one_pass: bool = False
    # Encode chunk n+1 while the decoder works on chunk n, when both are ready (long files, a
    # stream that fell behind): the NPU encoder and the RKLLM decoder then run at once. None:
    # on with the rk backend, off on the CPU (where both would share the same cores).
    overlap: Optional[bool] = None
    # Fallback decoding (qwen3asr.decoding.FALLBACK_STEPS): a decoder run that loops (stopped
    # by the loop guard) or runs out of max_new_tokens is decoded again with a repetition
    # penalty, then sampling, and the best try is kept (stats count the extra tries). None: on
    # for files, off for streams (a stream's text must come quickly) and when on_text streams
    # the text out as it is generated (printed text cannot be taken back).
    fallback: Optional[bool] = None
    # Final passes (streams): each finished piece of speech (the chunks between two pauses, VAD
    # speech ends or the stream's ends) is decoded again in one pass when it fits one, and that
    # text replaces the piece's streamed text (the streamed text stays a preview). None: off.
    final_pass: Optional[bool] = None
    # Partial decodes (streams): once this many seconds of new audio are in the open chunk, the
    # window is decoded with it as it is so far: a preview in the unstable tail, replaced by the
    # chunk's own decode, so first words show before a chunk is complete (each costs a decoder
    # run). None: off.
    partial_every: Optional[float] = None
    # First words (streams): previews as above every this many seconds, but only until the open
    # segment shows text (its first chunk decoded, or a preview with words): the first words of
    # each segment come early for one or two decoder runs a segment, not one per interval all
    # along. None: off. partial_every, when set, previews all along anyway.
    first_words: Optional[float] = None
    # -- output
    # Inverse text normalisation of finished text (spoken numbers as digits, qwen3asr.itn). Off
    # by default everywhere (API, CLI, servers): the text stays the model's own, as the official
    # toolkit returns it, and a file and a live stream of the same audio read the same.
    itn: bool = False
    # Word timestamps (the forced aligner, qwen3asr.aligner): every segment with text gets its
    # words with start and end times, aligned on the segment's raw text (before ITN) as the
    # official chain does. Files longer than the aligner's pass are decoded in segments.
    word_timestamps: bool = False
    # What word times say (qwen3asr.aligner.refine): "speech" aligns a segment with pauses again
    # piece by piece, fits each span to its speech (an end pulled back out of the pause after the
    # word, a start moved out of the one before it, a zero-length word given one 80 ms bin) and
    # aligns a collapsed segment again in smaller pieces; "raw" keeps the official aligner's
    # times; "checked" is "speech" with the words each piece at a pause gets checked by the ASR
    # model reading the piece, and in languages written with spaces each boundary read from the
    # audio after it (qwen3asr.aligner.checked: an encoder pass, a greedy decode and a few decoder
    # runs per piece and boundary), then each piece aligned again alone as the mean of four passes
    # over shifted audio (qwen3asr.aligner.shifted); its cost and figures in docs/aligner.md. Every
    # span but "raw" reads its times between the aligner's bins from its scores. All flag a collapse
    # (Segment.words_flag).
    word_spans: str = "speech"
    # The compact prompt of the reference design (docs/reference_design.md): no system turn, the
    # answer starting at <asr_text> (no "language X" header, so no language detection). Off by default: it departs
    # from the official template. Saves the system turn and header tokens per decoder run.
    compact_prompt: bool = False

    def __post_init__(self):
        problems = []
        if not isinstance(self.context, str):
            problems.append(f"context must be str (got {type(self.context).__name__})")
        problems += filter(None, (
            checks.integer("memory_num", self.memory_num, 1, MAX_MEMORY_NUM),
            checks.integer("unfixed_chunks", self.unfixed_chunks, 0, MAX_MEMORY_NUM - 1),
            checks.integer("rollback_tokens", self.rollback_tokens, 0, MAX_ROLLBACK_TOKENS, optional=True),
            checks.integer("max_chunks", self.max_chunks, 1, optional=True),
            checks.number("pause_db", self.pause_db, 0, kind="a number of dB", low_open=True, optional=True),
            interval_problem("partial_every", self.partial_every),
            interval_problem("first_words", self.first_words)))
        problems += sampling_problems(max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                                      top_k=self.top_k, top_p=self.top_p,
                                      repetition_penalty=self.repetition_penalty, seed=self.seed)
        problems += chunk_problems(self.chunk_size)
        if not problems and self.chunk_size is not None and self.memory_num * self.chunk_size > MAX_CHUNK_SECONDS:
            problems.append(f"memory_num x chunk_size must be <= {MAX_CHUNK_SECONDS:g} s, the most audio a decoder "
                            f"window can hold (got {self.memory_num} x {self.chunk_size:g} s)")
        if not problems and self.unfixed_chunks >= self.memory_num:
            problems.append(f"unfixed_chunks must be < memory_num ({self.memory_num}), got {self.unfixed_chunks}")
        if self.vad is True:
            object.__setattr__(self, "vad", VADOptions())
        elif self.vad is not None and self.vad is not False and not isinstance(self.vad, VADOptions):
            problems.append(f"vad must be None, True, False or a VADOptions (got {type(self.vad).__name__}); "
                            "pass a loaded SileroVAD model to create_stream(vad=...) instead")
        problems += filter(None, [checks.flag(name, getattr(self, name), optional=True)
                                  for name in ("overlap", "fallback", "final_pass")])
        problems += filter(None, [checks.flag(name, getattr(self, name))
                                  for name in ("itn", "compact_prompt", "one_pass", "word_timestamps")])
        if self.word_spans not in WORD_SPANS:
            problems.append(f"word_spans must be one of {', '.join(WORD_SPANS)} (got {checks.show(self.word_spans)})")
        if self.one_pass is True and (self.chunk_size is not None or self.vad not in (None, False)
                                      or self.max_chunks is not None):
            problems.append("one_pass excludes chunk_size, vad and max_chunks (they ask for chunked decoding)")
        if self.compact_prompt and self.context:
            problems.append("compact_prompt has no system turn to carry context; drop context or compact_prompt")
        if problems:
            raise ValueError("invalid transcription options: " + "; ".join(problems))
        object.__setattr__(self, "language", resolve_language(self.language))

    # ---------------------------------------------------------------- derived
    @property
    def vad_options(self) -> Optional[VADOptions]:
        """The VAD settings when VAD is on, else None (False and None both give None)."""
        return self.vad if isinstance(self.vad, VADOptions) else None

    @property
    def chunk_samples(self) -> int:
        """Samples per chunk (chunk_size must be set: see for_stream / for_file_chunks)."""
        if self.chunk_size is None:
            raise ValueError("chunk_size is not set; resolve the options for a mode first")
        return int(round(self.chunk_size * 100)) * HOP

    def decoding(self, max_new_tokens: Optional[int] = None, seed: Optional[int] = None) -> DecodingOptions:
        """The sampling settings for one decoder run (``max_new_tokens``/``seed`` override)."""
        return DecodingOptions(max_new_tokens=max_new_tokens or self.max_new_tokens or ONE_PASS_MAX_NEW_TOKENS,
                               temperature=float(self.temperature), top_k=self.top_k, top_p=float(self.top_p),
                               repetition_penalty=float(self.repetition_penalty),
                               seed=self.seed if seed is None else seed)

    def chunk_seed(self, k: int) -> Optional[int]:
        """The sampling seed of decoder run ``k`` of a chunked request (None without a seed):
        runs differ from each other and the whole request is reproducible."""
        if self.seed is None:
            return None
        import numpy as np

        return int(np.random.SeedSequence([self.seed, k]).generate_state(1)[0])

    def for_stream(self) -> "TranscribeOptions":
        """The options with the stream defaults filled in (vad None -> off, fallback None -> off)."""
        return dataclasses.replace(
            self, fallback=bool(self.fallback),
            chunk_size=self._chunk_size_or(STREAM_CHUNK_SIZE),
            max_new_tokens=self.max_new_tokens or STREAM_MAX_NEW_TOKENS,
            rollback_tokens=STREAM_ROLLBACK_TOKENS if self.rollback_tokens is None else self.rollback_tokens,
            vad=self.vad_options)

    def for_file_chunks(self, vad: Optional[VADOptions] = None) -> "TranscribeOptions":
        """The options with the long-file defaults filled in; ``vad`` as decided by the file policy
        (fallback None -> on)."""
        return dataclasses.replace(
            self, fallback=self.fallback is not False,
            chunk_size=self._chunk_size_or(FILE_CHUNK_SIZE),
            max_new_tokens=self.max_new_tokens or FILE_CHUNK_MAX_NEW_TOKENS,
            rollback_tokens=FILE_ROLLBACK_TOKENS if self.rollback_tokens is None else self.rollback_tokens,
            vad=vad)

    def _chunk_size_or(self, default: float) -> float:
        """chunk_size, else the mode's ``default`` shortened (in whole 10 ms frames) until
        memory_num chunks fit MAX_CHUNK_SECONDS."""
        if self.chunk_size is not None:
            return self.chunk_size
        return min(default, int(MAX_CHUNK_SECONDS * 100 / self.memory_num) / 100)

    def wants_chunks(self) -> bool:
        """Whether the caller asked for chunked decoding (chunk_size, VAD on, or max_chunks)."""
        return self.chunk_size is not None or self.vad_options is not None or self.max_chunks is not None


_FIELDS = tuple(f.name for f in dataclasses.fields(TranscribeOptions))
ALIASES = {"repeat_penalty": "repetition_penalty"}  # the reference design's spelling


def build_options(base: Optional[TranscribeOptions], overrides: dict, where: str) -> TranscribeOptions:
    """``base`` (a TranscribeOptions, a DecodingOptions, or None for the defaults) with keyword
    ``overrides``; unknown names are a TypeError listing the accepted ones."""
    if isinstance(base, DecodingOptions):  # sampling settings alone (the Generation API's)
        base = TranscribeOptions(**dataclasses.asdict(base))
    if base is not None and not isinstance(base, TranscribeOptions):
        raise TypeError(f"{where}: options must be a TranscribeOptions (or DecodingOptions), got "
                        f"{type(base).__name__}")
    kw = {}
    for k, v in overrides.items():
        name = ALIASES.get(k, k)
        if name not in _FIELDS:
            raise TypeError(f"{where}() got an unexpected keyword argument {k!r}; options are: "
                            + ", ".join(_FIELDS))
        kw[name] = v
    base = base or TranscribeOptions()
    return dataclasses.replace(base, **kw) if kw else base


__all__ = ["ALIASES", "TranscribeOptions", "WORD_SPANS", "build_options"]
