"""Text decoding: the decoder seam, sampling options, and a pausable, clonable generation.

Two seams:

- :class:`TextDecoder`, what the engine calls: ``generate(prompt_embeds, options, on_token,
  prefix_len) -> (token ids, DecodeStats)`` and ``close()``. Implemented by the ONNX backend
  (``backends.onnx.OnnxTextDecoder``, token-level sampling here) and the rk backend
  (``backends.rk.backend.RKLLMTextDecoder``, the RKLLM runtime samples). A backend that can also pause,
  resume and clone a generation offers ``start(prompt_embeds, options, prefix_len) -> Generation``.
- :class:`KVDecoder`, what :class:`Generation` drives on the CPU: ``forward(embeds, cache,
  logit_rows) -> (logits, cache)``; everything here is backend-independent numpy.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import time
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from . import checks
from .results import DECODER_COSTS

logger = logging.getLogger(__name__)


# The largest decoder context any backend takes (prompt + generated positions): the RKLLM
# runtime 1.2+ accepts at most 16384 (qwen3asr_tools/export_rkllm.py MAX_CONTEXT_LIMIT); the ONNX
# export holds 4096 (onnx_graphs.DECODER_MAX_POSITIONS). No run can use more positions.
MAX_CONTEXT = 16384
MAX_NEW_TOKENS = MAX_CONTEXT  # a token budget beyond the context can never be spent
# Qwen3's vocabulary (the official config's vocab_size): a larger top_k keeps every token, as 0 does.
MAX_TOP_K = 151936
# Sampling settings reach the RKLLM runtime as C floats (RKLLMParam.temperature, repeat_penalty):
# a larger number is infinite there. Within it any temperature or penalty is a choice, not an error
# (a temperature of 1e30 samples uniformly).
FLOAT32_MAX = 3.4028234663852886e38
SEED_MAX = 2**64 - 1  # sampling seeds are unsigned 64-bit (numpy's SeedSequence takes any, RKLLM none)
SAMPLING_FIELDS = ("max_new_tokens", "temperature", "top_k", "top_p", "repetition_penalty", "seed")


def sampling_problems(**fields) -> list[str]:
    """The one check of sampling settings, shared by every options object that carries them
    (DecodingOptions, TranscribeOptions, the RKLLM runtime's): one message per bad field, naming
    the field, the value and what is accepted (qwen3asr.checks). Fields not given are not
    checked; ``seed`` and ``max_new_tokens`` may be None (the caller's default)."""
    problems = []
    for name, v in fields.items():
        if name == "temperature":
            p = checks.number(name, v, 0, FLOAT32_MAX)
        elif name == "top_k":
            p = checks.integer(name, v, 0, MAX_TOP_K)
        elif name == "top_p":
            p = checks.number(name, v, 0, 1, kind="", low_open=True)
        elif name == "repetition_penalty":
            p = checks.number(name, v, 0, FLOAT32_MAX, low_open=True)
        elif name == "seed":
            p = None if v is None or (checks.is_integer(v) and 0 <= v <= SEED_MAX) else \
                checks.problem(name, "an integer in 0..2**64-1 or None", v)
        elif name == "max_new_tokens":
            p = checks.integer(name, v, 1, MAX_NEW_TOKENS, optional=True)
        else:
            raise TypeError(f"sampling_problems() got an unknown field {name!r}; fields: {', '.join(SAMPLING_FIELDS)}")
        if p:
            problems.append(p)
    return problems


@dataclasses.dataclass(frozen=True)
class DecodingOptions:
    """How tokens are chosen. Defaults reproduce the official greedy decoding."""

    max_new_tokens: int = 256  # budget of generated tokens (language prefix included)
    temperature: float = 0.0  # 0 = greedy (argmax); > 0 samples from softmax(logits / T)
    top_k: int = 0  # keep the k most likely tokens when sampling (0 = all)
    top_p: float = 1.0  # nucleus: keep the smallest set with this much probability (1 = all)
    repetition_penalty: float = 1.0  # > 1 discourages tokens already generated (HF semantics)
    seed: int | None = None  # sampling seed (None = nondeterministic)

    def __post_init__(self):
        problems = sampling_problems(max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                                     top_k=self.top_k, top_p=self.top_p,
                                     repetition_penalty=self.repetition_penalty, seed=self.seed)
        if self.max_new_tokens is None:
            problems.insert(0, checks.problem("max_new_tokens", checks.requirement("an integer", 1, MAX_NEW_TOKENS),
                                              None))
        if problems:
            raise ValueError("invalid decoding options: " + "; ".join(problems))


@dataclasses.dataclass(frozen=True)
class RepetitionGuard:
    """When a generation is a runaway repetition (a loop), so that every backend stops it
    (0 turns a check off): the same token ``max_same_token`` times in a row, or a pattern of
    2..``max_pattern_len`` tokens repeated back to back ``min_pattern_repeats`` times.

    ``min_tokens``: repetitions before this many generated tokens are not a loop. The engine
    sets it from the audio (``loop_guard``): a real repeated phrase ("open the door" said six
    times) stays within what the audio can hold, a loop runs past it.
    """

    max_same_token: int = 20
    max_pattern_len: int = 10
    min_pattern_repeats: int = 6
    min_tokens: int = 0

    def __post_init__(self):
        for name in ("max_same_token", "max_pattern_len", "min_pattern_repeats", "min_tokens"):
            problem = checks.integer(f"RepetitionGuard.{name}", getattr(self, name), 0)
            if problem:
                raise ValueError(problem)
        if self.min_pattern_repeats == 1:
            raise ValueError("RepetitionGuard.min_pattern_repeats must be 0 (off) or >= 2")

    def triggered(self, tokens: list[int]) -> bool:
        """True when the end of ``tokens`` (the generated ids so far) is a runaway repetition."""
        n = len(tokens)
        if n < self.min_tokens:
            return False
        k = self.max_same_token
        if k and n >= k and tokens[-k:].count(tokens[-1]) == k:
            return True
        r = self.min_pattern_repeats
        if r:
            for p in range(2, self.max_pattern_len + 1):
                span = p * r
                if span > n:
                    break
                tail = tokens[-span:]
                if len(set(tail[:p])) > 1 and all(tail[i] == tail[i - p] for i in range(p, span)):
                    return True
        return False


# A transcript holds at most about this many tokens per second of audio (fast speech is 4-6:
# English words, Mandarin characters); a repetition beyond it is a loop (RepetitionGuard.min_tokens).
LOOP_TOKENS_PER_SECOND = 10.0
LOOP_MIN_TOKENS = 16  # and never a loop before this many tokens (a language header and a few words)


def loop_guard(audio_seconds: float) -> RepetitionGuard:
    """The loop guard of one decoder run over ``audio_seconds`` of audio."""
    return RepetitionGuard(min_tokens=max(LOOP_MIN_TOKENS, math.ceil(audio_seconds * LOOP_TOKENS_PER_SECOND)))


# Fallback decoding, as Whisper does it, for a run that looped or ran out of tokens: decode the
# same input again with these settings, in turn, until a try ends at end-of-sequence, and keep
# the best try (fallback_rank). Qwen3-ASR decodes greedily (the official setting), and its loops
# are the LLM's own repetition of a phrase, which a repetition penalty counters while staying
# greedy and deterministic (the reference design's W4A16 decoder runs with 1.15 for that
# reason); sampling comes last, with a fixed seed so that a file gives the same text every time.
FALLBACK_STEPS = ({"repetition_penalty": 1.1}, {"repetition_penalty": 1.2},
                  {"repetition_penalty": 1.1, "temperature": 0.5, "top_p": 0.95})
FALLBACK_SEED = 0  # the sampling step's seed when the request has none
FINISH_RANK = {"eos": 0, "stopped": 0, "length": 1, "repetition": 2}  # lower is better
COMPRESSION_LIMIT = 2.4  # Whisper's: a text whose zlib compression ratio is over it repeats itself


def fallback_options(options: DecodingOptions, step: int, budget: int) -> DecodingOptions:
    """The settings of fallback try ``step`` (0-based) of a run with ``options``, generating at
    most ``budget`` tokens."""
    change = dict(FALLBACK_STEPS[step])
    if change.get("repetition_penalty", 0) < options.repetition_penalty:
        change["repetition_penalty"] = options.repetition_penalty  # never weaker than the request's
    if "temperature" in change:
        change["seed"] = options.seed if options.seed is not None else FALLBACK_SEED
    return dataclasses.replace(options, max_new_tokens=budget, **change)


def compression_ratio(text: str) -> float:
    """Bytes of ``text`` over its zlib-compressed bytes (Whisper's loop measure: > 2.4 repeats)."""
    import zlib

    raw = text.encode("utf-8")
    return len(raw) / len(zlib.compress(raw)) if raw else 0.0


def fallback_rank(finish_reason: str, text: str) -> tuple:
    """Sort key of a try (lower is better): how it ended, then how repetitive its text is."""
    return FINISH_RANK.get(finish_reason, 3), compression_ratio(text)


@dataclasses.dataclass(frozen=True)
class DecodeOutcome:
    """One decoder run as every request makes it (``decode_with_fallback``)."""

    tokens: list  # generated ids of the kept try (end-of-sequence excluded)
    stats: Any  # DecodeStats of the kept try, with the prefill and decode costs of every try
    tries: int  # fallback tries made after the first run
    looped: bool  # the first run was stopped by the loop guard


def decode_with_fallback(generate: Callable, decode_text: Callable[[list], str], prompt_embeds: np.ndarray,
                         options: DecodingOptions, *, audio_seconds: float, prefix_len: int | None = None,
                         fallback: bool = False, on_token: Callable[[int], bool | None] | None = None,
                         draft: Sequence[int] = ()) -> DecodeOutcome:
    """One decoder run with the loop guard of ``audio_seconds`` of audio (``loop_guard``) and,
    with ``fallback``, the fallback tries.

    ``generate``: a TextDecoder's ``generate`` (same arguments, ``draft`` only when given); ``decode_text``: ids to text (the
    tokenizer's decode). A run that looped (the guard stopped it, or it ran out of tokens on text
    that repeats itself: compression ratio over COMPRESSION_LIMIT) is decoded again with the
    FALLBACK_STEPS settings until a try ends at end-of-sequence, and the best try
    (``fallback_rank``) is kept. A run cut by ``max_new_tokens`` on text that does not repeat is
    kept as it is (the budget is the caller's). ``on_token`` sees the first try's tokens only.
    ``draft``: ids the first try may verify in its prefill (TextDecoder.generate)."""
    guard = loop_guard(audio_seconds)
    extra = {"draft": tuple(draft)} if len(draft) else {}  # a generate without drafts keeps working
    tokens, ds = generate(prompt_embeds, options, on_token, prefix_len=prefix_len, guard=guard, **extra)
    text = decode_text(tokens)
    looped = ds.finish_reason == "repetition" or (
        ds.finish_reason == "length" and compression_ratio(text) > COMPRESSION_LIMIT)
    if looped:
        logger.warning("the decoder looped over %.1f s of audio (%s after %d tokens)%s", audio_seconds,
                       ds.finish_reason, len(tokens),
                       "; decoding it again with the fallback settings" if fallback else "")
    if not fallback or not looped:
        return DecodeOutcome(tokens, ds, 0, looped)
    best = (fallback_rank(ds.finish_reason, text), tokens, ds)
    spent = [ds]
    for step in range(len(FALLBACK_STEPS)):
        t, d = generate(prompt_embeds, fallback_options(options, step, options.max_new_tokens), prefix_len=prefix_len,
                        guard=guard)
        spent.append(d)
        rank = fallback_rank(d.finish_reason, decode_text(t))
        logger.info("fallback try %d (%s): %s after %d tokens", step + 1, FALLBACK_STEPS[step], d.finish_reason,
                    len(t))
        if rank < best[0]:
            best = (rank, t, d)
        if d.finish_reason in ("eos", "stopped"):
            break
    # the kept try's stats, with the time and positions of every try (what the request cost)
    cost = {k: sum(getattr(x, k) for x in spent) for k in DECODE_COST_FIELDS}
    return DecodeOutcome(best[1], dataclasses.replace(best[2], **cost), len(spent) - 1, looped)


# The DecodeStats fields that add up over decoder runs (fallback tries, a stream's chunks).
DECODE_COST_FIELDS = DECODER_COSTS + ("reused_tokens", "draft_tokens", "verified_tokens")


class TextDecoder(Protocol):
    """The engine's decoder seam (one per loaded engine; not safe for concurrent calls).

    Optional: ``text_logits(prompt_embeds)``, a function of token ids -> (len(ids) + 1, vocab)
    float32 logits after the prompt and after each id (texts scored by
    qwen3asr.aligner.checked; both backends have it, a decoder without it is not checked)."""

    name: str  # backend name ("onnx", "rk")
    max_context: int  # positions the decoder holds (prompt + generated tokens)

    def generate(self, prompt_embeds: np.ndarray, options: DecodingOptions,
                 on_token: Callable[[int], bool | None] | None = None,
                 prefix_len: int | None = None, guard: RepetitionGuard | None = None) -> tuple[list[int], Any]:
        """Generate from a whole embedded prompt ``(L, hidden) float32`` (prefilled in one go).
        ``guard``: stop a runaway repetition there (finish_reason "repetition"); None: no guard.

        ``on_token`` is called with every generated id (end-of-sequence ids are not generated);
        returning False stops there (finish_reason "stopped"). ``prefix_len``: the number of
        leading rows that are the prompt prefix shared by many runs (the rows before the first
        audio pad); a decoder may reuse their KV cache from an earlier run with byte-identical
        rows (the result must not change) or ignore it. ``draft`` (a keyword, given only when
        non-empty): ids expected to follow the prompt, which a decoder may verify in its prefill
        (greedy: the ids must be exactly what it would generate; DecodeStats.verified_tokens) or
        ignore. Returns (ids without end-of-sequence, :class:`~qwen3asr.results.DecodeStats`)."""

    def close(self) -> None:
        """Free the decoder's runtime (safe to call twice)."""


class KVDecoder(Protocol):
    """Backend seam of the CPU decoder."""

    def new_cache(self) -> Any:
        """An empty KV cache."""

    def forward(self, embeds: np.ndarray, cache: Any, logit_rows: np.ndarray) -> tuple[np.ndarray, Any]:
        """Append ``embeds`` (S, hidden) float32 to ``cache``; logits (len(logit_rows), vocab) float32
        of those rows (indices into the S new positions) and the extended cache. The backend may
        extend ``cache`` in place: keep using only the returned cache, and deep-copy to branch."""


def select_token(logits: np.ndarray, opts: DecodingOptions, history: list[int],
                 rng: np.random.Generator) -> int:
    """Pick the next token from ``logits`` (vocab,) float32."""
    x = logits
    if opts.repetition_penalty != 1.0 and history:
        x = logits.astype(np.float32, copy=True)  # penalised in place: never touch the caller's logits
        idx = np.unique(np.asarray(history, dtype=np.int64))
        vals = x[idx]
        x[idx] = np.where(vals > 0, vals / opts.repetition_penalty, vals * opts.repetition_penalty)
    if opts.temperature == 0.0:
        return int(np.argmax(x))
    x = x / opts.temperature
    if opts.top_k > 0 and opts.top_k < x.shape[0]:
        kth = np.partition(x, -opts.top_k)[-opts.top_k]
        x = np.where(x < kth, -np.inf, x)
    order = np.argsort(-x)
    p = np.exp(x[order] - x[order[0]])
    p /= p.sum()
    if opts.top_p < 1.0:
        keep = np.cumsum(p) - p < opts.top_p  # the token crossing the threshold stays
        p = np.where(keep, p, 0.0)
        p /= p.sum()
    return int(order[rng.choice(len(p), p=p)])


def verify_draft(logits: np.ndarray, draft: Sequence[int], options: DecodingOptions, history: list[int],
                 eos_ids: Sequence[int], guard: RepetitionGuard | None = None) -> int:
    """How many leading ids of ``draft`` greedy decoding would have generated itself: ``logits``
    (len(draft) + 1, vocab) are the predictions after the prompt and after each draft id, from one
    prefill; id j is kept while the choice at row j (``select_token`` with the history so far)
    equals it and it is not an end of sequence or the end of a loop (``guard``), so the
    generation goes on from row ``kept`` exactly as a step-by-step decode would."""
    kept, tokens = 0, list(history)
    for j, want in enumerate(draft):
        tok = select_token(logits[j], options, tokens, None)
        if tok != want or tok in eos_ids or (guard is not None and guard.triggered(tokens + [tok])):
            break
        tokens.append(tok)
        kept += 1
    return kept


@dataclasses.dataclass
class GenerationTimes:
    prefill_tokens: int = 0  # prompt positions (reused ones included)
    prefill_ms: float = 0.0
    reused_tokens: int = 0  # of those, positions whose KV came from a kept prefix (not computed)
    decode_tokens: int = 0
    decode_ms: float = 0.0
    draft_tokens: int = 0  # draft ids fed with the prompt (counted in prefill_tokens)
    verified_tokens: int = 0  # of those, ids kept as generated: each a decode step not run


class Generation:
    """One prompt's generation. Can stop and go on later (``run`` with a budget), and be cloned
    after prefill to try several continuations.

    Args:
      decoder: the KV-cache backend.
      prompt_embeds: (L, hidden) float32 embedded prompt (audio already spliced in).
      eos_ids: token ids that end generation.
      embed: token id -> (hidden,) float32 embedding (the bundle's embedding table).
      options: sampling settings.
      prefix_len / prefix: start from a cache of the first ``prefix_len`` prompt rows instead of
        an empty one: ``prefix()`` (called once, at prefill, inside its timing) returns ``(cache,
        reused)``, a cache this generation may extend (a copy) and whether it was reused rather
        than computed just now.
      guard: stops a runaway repetition (finish_reason "repetition"); None: no loop guard.
      draft: ids expected to follow the prompt (a streamed transcript). Greedy decoding
        (temperature 0) feeds them with the prompt in the one prefill and keeps the longest run
        of them that its own choice at each row confirms (``verify_draft``): the result is the
        same as without a draft, but each kept id costs no decode step. Ignored when sampling.
    """

    def __init__(self, decoder: KVDecoder, prompt_embeds: np.ndarray, eos_ids: tuple[int, ...],
                 embed: Callable[[int], np.ndarray], options: DecodingOptions, prefix_len: int = 0,
                 prefix: Callable[[], tuple[Any, bool]] | None = None, guard: RepetitionGuard | None = None,
                 draft: Sequence[int] = ()):
        self.decoder = decoder
        self.options = options
        self.eos_ids = tuple(eos_ids)
        self.embed = embed
        self.tokens: list[int] = []
        self.finish_reason: str | None = None  # "eos", "length" or "repetition" once finished
        self.guard = guard
        self.times = GenerationTimes()
        self._rng = np.random.default_rng(options.seed)
        self._prompt = np.ascontiguousarray(prompt_embeds, dtype=np.float32)
        self._cache = None
        self._next_logits: np.ndarray | None = None
        if (prefix is None) != (prefix_len == 0) or not 0 <= prefix_len < len(self._prompt):
            raise ValueError(f"a prefix needs prefix_len in [1, {len(self._prompt) - 1}] and a prefix source "
                             f"(got prefix_len={prefix_len!r}, prefix {'given' if prefix else 'None'})")
        self._prefix_len = int(prefix_len)
        self._prefix = prefix
        # a draft is checked against greedy choices only, and never past the budget's last token
        self._draft = [int(t) for t in draft][:max(0, options.max_new_tokens - 1)] \
            if options.temperature == 0.0 else []

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def next_logits(self) -> np.ndarray:
        """Logits (vocab,) for the next token (runs the prefill if needed)."""
        self._ensure_prefill()
        return self._next_logits

    def _ensure_prefill(self) -> None:
        if self._cache is not None:
            return
        t0 = time.perf_counter()
        n = self._prefix_len
        if self._prefix is not None:
            cache, reused = self._prefix()
            self._prefix = None  # the source may hold a shared cache: drop it once used
            if getattr(cache, "length", n) != n:
                raise RuntimeError(f"the prefix cache holds {cache.length} positions, not prefix_len={n}")
            self.times.reused_tokens = n if reused else 0
        else:
            cache = self.decoder.new_cache()
        rest = self._prompt[n:]
        draft = self._draft
        if draft:
            rest = np.concatenate([rest, np.stack([self.embed(t) for t in draft]).astype(np.float32)])
        rows = np.arange(len(rest) - len(draft) - 1, len(rest))  # the last prompt row's and each draft row's
        logits, self._cache = self.decoder.forward(rest, cache, rows)
        kept = verify_draft(logits, draft, self.options, self.tokens, self.eos_ids, self.guard)
        self.tokens.extend(draft[:kept])
        if kept < len(draft):
            self._cache.length -= len(draft) - kept  # the rejected rows' KV is dropped
        self._next_logits = logits[kept]
        self.times.prefill_tokens = len(self._prompt) + len(draft)
        self.times.draft_tokens, self.times.verified_tokens = len(draft), kept
        self.times.prefill_ms = (time.perf_counter() - t0) * 1000

    def feed(self, token: int) -> np.ndarray:
        """Append ``token`` (chosen by the caller, e.g. teacher forcing); returns the next logits."""
        self._ensure_prefill()
        t0 = time.perf_counter()
        self.tokens.append(int(token))
        logits, self._cache = self.decoder.forward(self.embed(int(token))[None, :], self._cache, np.array([0]))
        self._next_logits = logits[0]
        self.times.decode_tokens += 1
        self.times.decode_ms += (time.perf_counter() - t0) * 1000
        return self._next_logits

    def step(self) -> int | None:
        """Generate one token; None when already finished. End-of-sequence tokens are not kept."""
        if self.finished:
            return None
        self._ensure_prefill()
        if len(self.tokens) >= self.options.max_new_tokens:
            self.finish_reason = "length"
            return None
        tok = select_token(self._next_logits, self.options, self.tokens, self._rng)
        if tok in self.eos_ids:
            self.finish_reason = "eos"
            return None
        if self.guard is not None and self.guard.triggered(self.tokens + [tok]):
            self.tokens.append(tok)  # a loop: stopped here, no logits needed after it
            self.finish_reason = "repetition"
            return tok
        if len(self.tokens) + 1 >= self.options.max_new_tokens:
            # the budget ends with this token: no need to compute the logits after it
            self.tokens.append(tok)
            self.finish_reason = "length"
            return tok
        self.feed(tok)
        return tok

    def run(self, max_steps: int | None = None, on_token: Callable[[int], bool | None] | None = None) -> list[int]:
        """Generate until end of sequence, the budget, ``max_steps`` more tokens (pause), or until
        ``on_token`` returns False. Returns the tokens generated by this call."""
        out = []
        while not self.finished and (max_steps is None or len(out) < max_steps):
            tok = self.step()
            if tok is None:
                break
            out.append(tok)
            if on_token is not None and on_token(tok) is False:
                break
        return out

    def clone(self) -> "Generation":
        """An independent copy (shares nothing mutable); prefill is run first if needed."""
        self._ensure_prefill()
        other = copy.copy(self)
        other.tokens = list(self.tokens)
        other.times = dataclasses.replace(self.times)
        other._rng = copy.deepcopy(self._rng)
        other._cache = copy.deepcopy(self._cache)
        return other
