"""ONNX Runtime backend (any CPU): encoder runner and KV-cache decoder.

This is the reference backend: the NPU backends are checked against it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading

import numpy as np

from ..decoding import DecodingOptions, Generation, RepetitionGuard
from ..encoder import AudioEncoder, EncoderVariant
from ..results import DecodeStats
from .prefix_cache import PrefixCache, PrefixCacheOptions, checked_prefix_len
from .pages import drop_mapped_pages

logger = logging.getLogger(__name__)


def _ort():
    try:
        import onnxruntime
    except ImportError as exc:  # pragma: no cover - onnxruntime is a hard dependency
        raise RuntimeError("onnxruntime is not installed: pip install onnxruntime") from exc
    return onnxruntime


def make_session(path: str, threads: int | None = None, spin_wait: bool = False, arena: bool = True,
                 prepacked: str | None = None, drop_pages: bool = False):
    """An ONNX Runtime CPU session with full graph optimisation, ``threads`` intra-op threads
    (default: ONNX Runtime's choice); idle worker threads spin before they sleep only with
    ``spin_wait`` (see Qwen3ASREngine); ``arena=False``: no CPU memory arena (each run's
    intermediate tensors are freed after it instead of kept for the next); ``prepacked``: a
    directory that keeps the session's prepacked weights for the next load (backends/prepacked.py);
    ``drop_pages``: the resident pages of the weight files it maps dropped once it is made (the
    lean profile, backends/pages.py)."""
    ort = _ort()
    if not os.path.isfile(path):
        raise FileNotFoundError(f"model file missing: {path}; re-run scripts/export_onnx.py for this bundle")

    def create(graph: str, entries: dict, optimized: str | None = None):
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if threads:
            so.intra_op_num_threads = int(threads)
            so.inter_op_num_threads = 1
        so.log_severity_level = 3
        # by default idle worker threads sleep instead of spinning: on a shared or busy CPU, spinning
        # threads fight the thread that has work (a 2-thread decode step got 2-3x slower under load);
        # on a quiet one, waking them costs a few ms per decode step (docs/benchmarks.md)
        so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin_wait else "0")
        so.enable_cpu_mem_arena = bool(arena)
        for key, value in entries.items():
            so.add_session_config_entry(key, value)
        if optimized:
            so.optimized_model_filepath = optimized
        try:
            return ort.InferenceSession(graph, sess_options=so, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise RuntimeError(f"ONNX Runtime cannot load {graph}: {exc}") from exc

    if prepacked:
        from .prepacked import cached_session

        session, mapped = cached_session(ort, path, prepacked, create)
    else:
        session, mapped = create(path, {}), os.path.dirname(path)
    if drop_pages:
        drop_mapped_pages(mapped)
    return session


class OnnxEncoderRunner:
    """Runs merged / split encoder graphs; sessions are created on first use and kept."""

    def __init__(self, frontend_path: str | None, threads: int | None = None, spin_wait: bool = False,
                 memory: str = "default", prepacked: str | None = None):
        self._frontend_path = frontend_path
        self._prepacked = prepacked
        self._threads = threads
        self._spin_wait = spin_wait
        self._memory = memory
        self._sessions: dict[str, object] = {}

    def _session(self, path: str):
        sess = self._sessions.get(path)
        if sess is None:
            logger.debug("loading encoder graph %s", path)
            # lean: no arena for the encoder, whose activations (attention of the whole window) the arena
            # would keep after the run: 70 MB less peak on the 0.6B, no slower (docs/benchmarks.md)
            lean = self._memory == "lean"
            sess = self._sessions[path] = make_session(path, self._threads, self._spin_wait, arena=not lean,
                                                       prepacked=self._prepacked, drop_pages=lean)
        return sess

    def load(self, variant: EncoderVariant) -> None:
        """Make the sessions ``variant`` runs with (split: the front end's too)."""
        if variant.form == "split" and self._frontend_path is not None:
            self._session(self._frontend_path)
        self._session(variant.path)

    def run_merged(self, variant: EncoderVariant, mel, conv_mask1, conv_mask2, attn_bias):
        return self._session(variant.path).run(
            ["embeds"], {"mel": mel, "conv_mask1": conv_mask1, "conv_mask2": conv_mask2, "attn_bias": attn_bias})[0]

    def run_frontend(self, mel_chunk, conv_mask1, conv_mask2):
        if self._frontend_path is None:
            raise RuntimeError("this bundle has no split-encoder front end")
        return self._session(self._frontend_path).run(
            ["hidden"], {"mel": mel_chunk, "conv_mask1": conv_mask1, "conv_mask2": conv_mask2})[0]

    def run_backend(self, variant: EncoderVariant, hidden, attn_bias):
        return self._session(variant.path).run(["embeds"], {"hidden": hidden, "attn_bias": attn_bias})[0]

    def close(self) -> None:
        """Drop the sessions (freed with their last reference; safe to call twice)."""
        self._sessions.clear()


def create_onnx_encoder(bundle, form: str = "merged", sizes=None, threads: int | None = None,
                        spin_wait: bool = False, memory: str = "default", prepacked: str | None = None):
    """An AudioEncoder on ONNX Runtime for ``bundle``'s ``form`` variants (optionally only ``sizes`` s);
    the CPU counterpart of qwen3asr.backends.rk.rknn.create_rknn_encoder. Each graph's session is
    made when it is first run."""
    runner = OnnxEncoderRunner(bundle.frontend_path(), threads, spin_wait, memory, prepacked)
    return AudioEncoder(runner, bundle.encoder_variants(form, sizes), bundle.manifest["encoder"]["window_tokens"],
                        int(bundle.audio_config["num_mel_bins"]), form)


@dataclasses.dataclass
class KVCache:
    """Fixed-capacity KV cache: per layer (1, kv_heads, capacity, head_dim) float32, rows
    [0, length) valid. ``OnnxDecoder.forward`` writes the new rows in place (past and present are
    one buffer), so after a forward only the returned cache is meaningful; copy (``clone``) to branch."""

    keys: list
    values: list
    length: int

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.keys) + sum(a.nbytes for a in self.values)

    def clone(self, capacity: int | None = None) -> "KVCache":
        """An independent copy (only the valid rows are copied) with ``capacity`` positions
        (default: the same; at least ``length``)."""
        n = self.length
        cap = self.capacity if capacity is None else max(int(capacity), n)

        def copy(a: np.ndarray) -> np.ndarray:
            b = np.empty(a.shape[:2] + (cap,) + a.shape[3:], a.dtype)
            b[:, :, :n] = a[:, :, :n]
            return b

        return KVCache([copy(k) for k in self.keys], [copy(v) for v in self.values], n)

    def __deepcopy__(self, memo) -> "KVCache":
        return self.clone()


CACHE_STEP = 256  # KV-cache capacity grows in multiples of this many positions
LEAN_CACHE_STEP = 128  # the same with memory="lean" (0.6B: 29 MB of cache per step instead of 58)
# Rows that must follow a reused prefix. ONNX Runtime computes a call of one row (M = 1: the
# matrix-vector kernels) with another summation order than a call of several: a prompt whose
# last row alone followed the prefix gave logits up to 5.5e-6 off (tiny and bundled models), while
# every split leaving 2 or more rows gave bitwise the same logits as one prefill (test_prefix_cache).
MIN_ROWS_AFTER_PREFIX = 2


class OnnxDecoder:
    """The exported Qwen3 decoder (fp32 or weight-only int8/int4) with a host-held KV cache.

    The cache is a fixed-capacity buffer per layer that the graph's GroupQueryAttention
    extends in place (IOBinding binds past_* and present_* to the same memory); it grows by
    reallocation, in steps of ``cache_step`` positions (CACHE_STEP; LEAN_CACHE_STEP with
    ``memory="lean"``), only when full.
    """

    def __init__(self, path: str, n_layers: int, kv_heads: int, head_dim: int, threads: int | None = None,
                 max_positions: int = 4096, spin_wait: bool = False, memory: str = "default",
                 prepacked: str | None = None):
        """``max_positions``: rows of the rotary tables stored in the graph (the bundle's max_context)."""
        self.session = make_session(path, threads, spin_wait, prepacked=prepacked, drop_pages=memory == "lean")
        self._lean = memory == "lean"
        self.n_layers, self.kv_heads, self.head_dim = n_layers, kv_heads, head_dim
        self.max_positions = int(max_positions)
        names = {i.name for i in self.session.get_inputs()}
        if "seqlens_k" not in names:
            raise RuntimeError(f"{path} is a decoder graph of an older export (no in-place KV cache); "
                               "re-run scripts/export_onnx.py for this bundle")
        self._ort = _ort()
        self._lock = threading.Lock()
        self._kept = None  # (buffers, IOBinding) of the last call (see _binding)
        logits = [o for o in self.session.get_outputs() if o.name == "logits"]
        self._vocab = int(logits[0].shape[-1])  # logits [1, K, vocab]

    @property
    def cache_step(self) -> int:
        """Positions the cache grows by: LEAN_CACHE_STEP with memory="lean", else CACHE_STEP."""
        return LEAN_CACHE_STEP if self._lean else CACHE_STEP

    def new_cache(self) -> KVCache:
        return KVCache([], [], 0)

    def capacity_for(self, positions: int) -> int:
        """The cache capacity allocated for ``positions`` rows: whole steps, at most max_positions."""
        return min(self.max_positions, -(-positions // self.cache_step) * self.cache_step)

    def _reserve(self, cache: KVCache, needed: int) -> KVCache:
        if needed > self.max_positions:
            raise RuntimeError(f"decoder context full: {needed} positions needed, the graph holds "
                               f"{self.max_positions}")
        if needed <= cache.capacity:
            return cache
        cap = self.capacity_for(needed)
        shape = (1, self.kv_heads, cap, self.head_dim)
        n = cache.length

        def grown(old: np.ndarray | None) -> np.ndarray:
            new = np.zeros(shape, np.float32)
            if old is not None and n:
                new[:, :, :n] = old[:, :, :n]
            return new

        keys = [grown(cache.keys[i] if cache.keys else None) for i in range(self.n_layers)]
        values = [grown(cache.values[i] if cache.values else None) for i in range(self.n_layers)]
        return KVCache(keys, values, n)

    def forward(self, embeds: np.ndarray, cache: KVCache, logit_rows: np.ndarray):
        """Append ``embeds`` (S, hidden) float32 to ``cache``; returns (logits (K, vocab) float32 of
        ``logit_rows``, the extended cache). ``cache`` is updated in place (see KVCache)."""
        s = embeds.shape[0]
        total = cache.length + s
        cache = self._reserve(cache, total)
        rows = np.asarray(logit_rows, dtype=np.int64).reshape(-1)
        ort = self._ort
        mine = self._lock.acquire(blocking=False)  # another thread in forward: a binding of its own
        try:
            io = self._binding(cache) if mine else self._bind_cache(self.session.io_binding(), cache)
            io.bind_cpu_input("inputs_embeds", np.ascontiguousarray(embeds[None], dtype=np.float32))
            io.bind_cpu_input("seqlens_k", np.array([total - 1], np.int32))
            io.bind_cpu_input("total_sequence_length", np.array(total, np.int32))
            io.bind_cpu_input("logit_index", rows)
            logits = np.empty((1, rows.shape[0], self._vocab), np.float32)
            io.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(logits))
            self.session.run_with_iobinding(io)
        finally:
            if mine:
                self._lock.release()
        return logits[0], KVCache(cache.keys, cache.values, total)

    def _bind_cache(self, io, cache: KVCache):
        """Bind the cache's buffers as past (input) and present (output) of every layer."""
        for i in range(self.n_layers):
            for kind, buf in (("key", cache.keys[i]), ("value", cache.values[i])):
                value = self._ort.OrtValue.ortvalue_from_numpy(buf)
                io.bind_ortvalue_input(f"past_{kind}_{i}", value)
                io.bind_ortvalue_output(f"present_{kind}_{i}", value)
        return io

    def _binding(self, cache: KVCache):
        """The binding of the last call when ``cache`` has the same buffers (a decode loop: only
        the four small inputs and the logits are bound again), else a new one for its buffers.
        The kept binding holds references to its buffers, so they cannot be freed and their
        addresses reused while it is kept."""
        bufs = cache.keys + cache.values
        kept = self._kept
        if kept is not None and len(kept[0]) == len(bufs) and all(a is b for a, b in zip(kept[0], bufs)):
            return kept[1]
        io = self._bind_cache(self.session.io_binding(), cache)
        self._kept = (bufs, io)
        return io

    def release_binding(self) -> None:
        """Drop the kept binding (and with it the references to the last cache's buffers)."""
        with self._lock:
            self._kept = None


class OnnxTextDecoder:
    """The ONNX backend's text decoder (the engine's TextDecoder seam): :class:`Generation`
    (token-level sampling, qwen3asr.decoding) on :class:`OnnxDecoder`, with the KV cache of
    prompt prefixes kept in a bounded LRU (:mod:`.prefix_cache`) and copied into each run that
    starts with the same rows.

    Args:
      kv: the loaded decoder graph.
      eos_ids: token ids that end a generation.
      embed: token id -> (hidden,) float32 embedding (the bundle's table).
      prefix_cache: how many prefixes to keep (``PrefixCacheOptions(max_entries=0)``: no reuse).
    """

    name = "onnx"

    def __init__(self, kv: OnnxDecoder, eos_ids, embed, prefix_cache: PrefixCacheOptions = PrefixCacheOptions()):
        self.kv = kv
        self.eos_ids = tuple(eos_ids)
        self.embed = embed
        self.max_context = kv.max_positions
        self.prefixes = PrefixCache(prefix_cache)

    def _prefix_source(self, rows: np.ndarray, total: int):
        """The Generation's prefix source for the prefix ``rows`` of a ``total``-row prompt: the kept
        (or just computed) KV of the rows, copied into a buffer sized as a fresh prefill's."""
        kv = self.kv

        def compute(r: np.ndarray) -> KVCache:
            _, cache = kv.forward(r, kv.new_cache(), np.zeros(0, np.int64))  # no logits needed
            return cache.clone(capacity=cache.length)  # kept compact

        def source():
            cache, hit = self.prefixes.get(rows, compute)
            cap = kv.capacity_for(total)
            return cache.clone(capacity=cap), hit

        return source

    def start(self, prompt_embeds: np.ndarray, options: DecodingOptions = DecodingOptions(),
              prefix_len: int | None = None, guard: RepetitionGuard | None = None, draft=()) -> Generation:
        """A pausable, clonable :class:`Generation` of ``(L, hidden) float32`` prompt embeddings;
        ``prefix_len`` leading rows are taken from (or added to) the prefix cache when reuse is on;
        ``guard`` stops a runaway repetition; ``draft``: ids verified in the prefill (Generation)."""
        if self.kv is None:
            raise RuntimeError("this decoder was closed")
        prompt = np.ascontiguousarray(prompt_embeds, dtype=np.float32)
        n = checked_prefix_len(prefix_len, len(prompt))
        if n == 0 or len(prompt) - n < MIN_ROWS_AFTER_PREFIX or not self.prefixes.options.enabled:
            return Generation(self.kv, prompt, self.eos_ids, self.embed, options, guard=guard, draft=draft)
        return Generation(self.kv, prompt, self.eos_ids, self.embed, options, prefix_len=n,
                          prefix=self._prefix_source(prompt[:n], len(prompt) + len(draft)), guard=guard, draft=draft)

    def generate(self, prompt_embeds: np.ndarray, options: DecodingOptions = DecodingOptions(),
                 on_token=None, prefix_len: int | None = None,
                 guard: RepetitionGuard | None = None, draft=()) -> tuple[list[int], DecodeStats]:
        """See qwen3asr.decoding.TextDecoder (the draft is verified in the prefill)."""
        gen = self.start(prompt_embeds, options, prefix_len, guard, draft)
        try:
            if draft:
                gen.next_logits  # the prefill, which verifies the draft: its confirmed ids are generated ids
                for i, tok in enumerate(gen.tokens if on_token is not None else ()):
                    if on_token(tok) is False:
                        del gen.tokens[i + 1:]
                        gen.finish_reason = "stopped"
                        break
            gen.run(on_token=on_token)
        finally:
            self.kv.release_binding()  # the run's KV cache is not kept alive by the binding
        t = gen.times
        return list(gen.tokens), DecodeStats(t.prefill_tokens, t.prefill_ms, t.decode_tokens, t.decode_ms,
                                             gen.finish_reason or "stopped", reused_tokens=t.reused_tokens,
                                             draft_tokens=t.draft_tokens, verified_tokens=t.verified_tokens)

    def text_logits(self, prompt_embeds: np.ndarray):
        """Texts scored after one prompt (qwen3asr.aligner.checked): a function of token ids ->
        (len(ids) + 1, vocab) float32, the logits after the ``(L, hidden) float32`` prompt and
        after each id (teacher forcing). The prompt is prefilled at the first call and its KV
        cache kept by the function; each text's rows are written after it and dropped again."""
        kv = self.kv
        if kv is None:
            raise RuntimeError("this decoder was closed")
        prompt = np.ascontiguousarray(prompt_embeds, dtype=np.float32)
        held: dict = {}

        def logits(ids) -> np.ndarray:
            try:
                if not held:
                    first, cache = kv.forward(prompt, kv.new_cache(), np.array([len(prompt) - 1]))
                    held.update(first=first, cache=cache)
                if not len(ids):
                    return held["first"]
                cache = held["cache"]
                n = cache.length
                rows = np.stack([self.embed(int(t)) for t in ids]).astype(np.float32)
                out, cache = kv.forward(rows, cache, np.arange(len(ids)))
                held["cache"] = KVCache(cache.keys, cache.values, n)  # the text's rows dropped
            finally:
                kv.release_binding()
            return np.concatenate([held["first"], out])

        return logits

    def close(self) -> None:
        if self.kv is not None:
            self.kv.release_binding()
        self.kv = None  # the ONNX Runtime session is freed with its last reference
        self.prefixes.clear()


class OnnxSlotScorer:
    """An aligner's scorer on the CPU (the SlotScorer seam, qwen3asr.scoring): one prefill of
    the whole input through the aligner's decoder graph, whose head gives time classes, with a
    fresh KV cache that is dropped afterwards; logits only at the asked rows."""

    name = "onnx"

    def __init__(self, kv: OnnxDecoder):
        self.kv = kv
        self.max_positions = kv.max_positions

    def score(self, embeds: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``embeds`` (L, hidden) float32, ``rows`` (K,) indices into them -> (K, classes) float32."""
        if self.kv is None:
            raise RuntimeError("this scorer was closed")
        try:
            logits, _ = self.kv.forward(np.ascontiguousarray(embeds, dtype=np.float32), self.kv.new_cache(),
                                        np.asarray(rows, dtype=np.int64))
        finally:
            self.kv.release_binding()  # the cache of this one call is not kept
        return logits

    def close(self) -> None:
        if self.kv is not None:
            self.kv.release_binding()
        self.kv = None


def create_onnx_scorer(bundle, dtype: str = "auto", threads: int | None = None, spin_wait: bool = False,
                       memory: str = "default", prepacked: str | None = None):
    """The ONNX slot scorer of an aligner ``bundle``: its decoder graph of ``dtype`` ("auto": int8
    if present, else fp32, in either memory profile: the time classes of an int4 scorer are not
    measured against the official aligner), whose logits are the aligner's time classes."""
    dtype = pick_dtype(bundle, dtype)
    t = bundle.text_config
    kv = OnnxDecoder(bundle.decoder_path(dtype), t["num_hidden_layers"], t["num_key_value_heads"], t["head_dim"],
                     threads, max_positions=bundle.max_context, spin_wait=spin_wait, memory=memory,
                     prepacked=prepacked)
    scorer = OnnxSlotScorer(kv)
    scorer.dtype = dtype
    return scorer


def pick_dtype(bundle, dtype: str, memory: str = "default") -> str:
    """``dtype``, or for "auto" the bundle's int8 decoder (default memory profile) or int4 (lean)
    if it has one, else the next wider one it has (int8, then fp32)."""
    dtypes = bundle.decoder_dtypes()
    if dtype == "auto":
        order = ("int4", "int8", "fp32") if memory == "lean" else ("int8", "fp32")
        dtype = next((d for d in order if d in dtypes), "fp32")
    if dtype not in ("fp32", "int8", "int4"):
        raise ValueError(f"decoder_dtype must be auto, fp32, int8 or int4, got {dtype!r}")
    return dtype


def create_onnx_decoder(bundle, dtype: str = "auto", threads: int | None = None, *, embed,
                        eos_ids, prefix_cache: PrefixCacheOptions | None = None,
                        spin_wait: bool = False, memory: str = "default",
                        prepacked: str | None = None) -> OnnxTextDecoder:
    """The ONNX text decoder of ``bundle``: ``dtype`` "auto" (int8 if present, else fp32; with
    ``memory="lean"`` int4 first), "fp32", "int8" or "int4"; ``embed`` the bundle's embedding row
    function; ``eos_ids`` the ids that end; ``prefix_cache`` the prompt-prefix reuse (default
    PrefixCacheOptions()); ``memory`` the profile (MEMORY_PROFILES, Qwen3ASREngine)."""
    dtype = pick_dtype(bundle, dtype, memory)
    t = bundle.text_config
    kv = OnnxDecoder(bundle.decoder_path(dtype), t["num_hidden_layers"], t["num_key_value_heads"], t["head_dim"],
                     threads, max_positions=bundle.max_context, spin_wait=spin_wait, memory=memory,
                     prepacked=prepacked)
    dec = OnnxTextDecoder(kv, eos_ids, embed, prefix_cache or PrefixCacheOptions())
    dec.dtype = dtype
    return dec
