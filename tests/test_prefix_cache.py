"""Prompt-prefix KV reuse (qwen3asr.backends.prefix_cache, OnnxTextDecoder): exact logits, the LRU's bounds and
keys, and the same transcripts with and without reuse in one pass, streams and long files."""

from __future__ import annotations

import os

import numpy as np
import pytest

from qwen3asr import PrefixCacheOptions, Qwen3ASREngine, TranscribeOptions, prepare_audio
from qwen3asr.backends import onnx as onnx_backend
from qwen3asr.bundle import Bundle
from qwen3asr.decoding import DecodingOptions, Generation
from qwen3asr.backends.prefix_cache import NO_PREFIX_CACHE, PrefixCache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EN2 = os.path.join(ROOT, "audio", "en_2.wav")
LONG = os.path.join(ROOT, "audio", "long_mixed.wav")
CONTEXT = "Kitchen light, Living room lamp, Garage door, Hallway thermostat, Bedroom fan"


def step_logits(gen: Generation, forced: list[int]) -> np.ndarray:
    """Next-token logits after the prefill and after each teacher-forced token: (1 + len(forced), vocab)."""
    out = [gen.next_logits.copy()]
    for t in forced:
        out.append(gen.feed(t).copy())
    return np.stack(out)


def mismatch(a: np.ndarray, b: np.ndarray) -> float:
    """0.0 when bitwise equal, else the largest absolute difference (inf for other shapes)."""
    if a.shape != b.shape:
        return float("inf")
    return 0.0 if np.array_equal(a, b) else float(np.abs(a - b).max())


# ------------------------------------------------------------------ the graph: split prefill == one prefill

@pytest.mark.parametrize("dtype", ["fp32", "int8", "int4"])
def test_a_prefill_split_in_two_gives_bitwise_the_same_logits(bundle_dir, dtype):
    """The measurement behind exact reuse: ONNX Runtime's CPU kernels compute each row the same
    whatever the number of rows in the call (GroupQueryAttention over the in-place cache, MatMul /
    MatMulNBits), so a prefix prefill then the rest equals one prefill, bit for bit, for every
    split point that leaves 2 or more rows, and so do the decode steps that follow. A single last
    row goes through the matrix-vector kernels (other summation order): up to 5.5e-6 off on this machine, which
    is why the decoder never reuses a prefix with fewer than MIN_ROWS_AFTER_PREFIX rows after it."""
    b = Bundle.load(bundle_dir)
    t = b.text_config
    dec = onnx_backend.OnnxDecoder(b.decoder_path(dtype), t["num_hidden_layers"], t["num_key_value_heads"],
                                   t["head_dim"], threads=2)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, t["hidden_size"])).astype(np.float32)
    steps = rng.standard_normal((4, t["hidden_size"])).astype(np.float32)

    def run(split):
        cache = dec.new_cache()
        if split:
            _, cache = dec.forward(x[:split], cache, np.zeros(0, np.int64))
        out, cache = dec.forward(x[split:], cache, np.array([len(x) - split - 1]))
        logits = [out[0]]
        for s in steps:
            out, cache = dec.forward(s[None], cache, np.array([0]))
            logits.append(out[0])
        return np.stack(logits)

    ref = run(0)
    assert onnx_backend.MIN_ROWS_AFTER_PREFIX == 2
    for split in (1, 7, 20, 37, 38):
        assert mismatch(run(split), ref) == 0.0, f"split at {split}"
    assert mismatch(run(39), ref) < 1e-4  # one row after the split: close, not always bitwise


# ------------------------------------------------------------------ the decoder with reuse

@pytest.fixture(scope="module")
def default_engine():
    """The bundled model (real tokenizer and text); threads=2 as the measurements."""
    e = Qwen3ASREngine(backend="onnx", threads=2)
    yield e
    e.close()


def prompt_rows(engine, n_audio: int, context: str, seed: int) -> tuple[np.ndarray, int]:
    """(an embedded prompt with random audio rows, its prefix length)."""
    p = engine.prompt(n_audio, context=context)
    audio = np.random.default_rng(seed).standard_normal((n_audio, engine.embeddings.hidden_size)).astype(np.float32)
    return engine.embed_prompt(p, audio * 0.05), p.audio_start


def decoders(engine):
    """(a decoder with reuse, one without) over the engine's decoder graph."""
    d = engine.decoder
    return (onnx_backend.OnnxTextDecoder(d.kv, d.eos_ids, d.embed, PrefixCacheOptions()),
            onnx_backend.OnnxTextDecoder(d.kv, d.eos_ids, d.embed, NO_PREFIX_CACHE))


def test_reuse_gives_bitwise_the_same_logits_at_every_step(default_engine):
    e = default_engine
    reuse, fresh = decoders(e)
    forced = e.tokenizer.encode("language English<asr_text>turn on the kitchen light")
    for seed in range(3):  # a miss, then two hits with other audio
        x, n = prompt_rows(e, 30 + seed, CONTEXT, seed)
        a = reuse.start(x, prefix_len=n)
        b = fresh.start(x, prefix_len=n)
        assert mismatch(step_logits(a, forced), step_logits(b, forced)) == 0.0
        assert a.times.reused_tokens == (n if seed else 0) and b.times.reused_tokens == 0
        assert a.times.prefill_tokens == b.times.prefill_tokens == len(x)
    assert (reuse.prefixes.stats.hits, reuse.prefixes.stats.misses, len(reuse.prefixes)) == (2, 1, 1)
    # the kept entry is not extended by the runs that copied it
    kept = next(iter(reuse.prefixes._entries.values()))[0]
    assert kept.length == n and kept.capacity == n


def test_deliberately_wrong_reuse_is_caught(default_engine):
    """The comparison above catches the bugs reuse could have: the prefix of another context of
    the same length (a wrong hit), and a cache one position off (a RoPE offset or a stale row)."""
    e = default_engine
    kv = e.decoder.kv
    forced = e.tokenizer.encode("language English<asr_text>hello")
    x, n = prompt_rows(e, 25, "kitchen", 0)
    other, n2 = prompt_rows(e, 25, "lamp", 0)
    assert n2 == n and not np.array_equal(x[:n], other[:n])  # same length, other words
    ref = step_logits(Generation(kv, x, (), e.embeddings.row, DecodingOptions()), forced)

    def with_cache(cache, length):
        return step_logits(Generation(kv, x, (), e.embeddings.row, DecodingOptions(), prefix_len=length,
                                      prefix=lambda: (cache, True)), forced)

    def prefill(rows):
        return kv.forward(rows, kv.new_cache(), np.zeros(0, np.int64))[1]

    assert mismatch(with_cache(prefill(x[:n]), n), ref) == 0.0  # the right prefix
    assert mismatch(with_cache(prefill(other[:n]), n), ref) > 1e-3  # another context
    short = prefill(x[:n - 1])
    shifted = onnx_backend.KVCache(short.keys, short.values, n)  # one row missing: positions off by one
    assert mismatch(with_cache(shifted, n), ref) > 1e-3
    # and the cache itself never confuses the two contexts: their keys differ
    reuse, _ = decoders(e)
    reuse.generate(x, DecodingOptions(max_new_tokens=2), prefix_len=n)
    _, st = reuse.generate(other, DecodingOptions(max_new_tokens=2), prefix_len=n)
    assert st.reused_tokens == 0 and reuse.prefixes.stats.misses == 2


def test_prefix_len_is_checked(default_engine):
    reuse, _ = decoders(default_engine)
    x, n = prompt_rows(default_engine, 10, "", 0)
    for bad in (-1, len(x), 2.5, True):
        with pytest.raises(ValueError, match=r"prefix_len must be an integer in \[0, "):
            reuse.start(x, prefix_len=bad)
    gen = reuse.start(x, prefix_len=0)  # 0 / None: no reuse
    gen.next_logits
    assert gen.times.reused_tokens == 0 and len(reuse.prefixes) == 0


# ------------------------------------------------------------------ the LRU

class Blob:
    def __init__(self, nbytes):
        self.nbytes = nbytes


def rows(seed, n=4, hidden=8):
    return np.random.default_rng(seed).standard_normal((n, hidden)).astype(np.float32)


def test_the_lru_keeps_the_most_recent_within_its_bounds():
    key_bytes = rows(0).nbytes
    c = PrefixCache(PrefixCacheOptions(max_entries=2, max_bytes=10_000))
    computed = []

    def compute(r):
        computed.append(r)
        return Blob(1000)

    for s in (0, 1, 0, 2, 1):  # 0 stays (used again), 1 is evicted by 2, then misses again
        c.get(rows(s), compute)
    assert len(computed) == 4 and (c.stats.hits, c.stats.misses, c.stats.evictions) == (1, 4, 2)
    assert len(c) == 2 and c.bytes == 2 * (1000 + key_bytes)
    c = PrefixCache(PrefixCacheOptions(max_entries=8, max_bytes=2 * (1000 + key_bytes)))
    for s in range(3):
        c.get(rows(s), compute)
    assert len(c) == 2 and c.stats.evictions == 1  # the byte budget bounds too
    blob, hit = c.get(rows(9), lambda r: Blob(10**6))
    assert not hit and blob.nbytes == 10**6 and c.stats.too_large == 1 and len(c) == 2


def test_a_hit_needs_the_exact_rows():
    c = PrefixCache()
    first, _ = c.get(rows(0), lambda r: Blob(10))
    assert c.get(rows(0).copy(), lambda r: Blob(11)) == (first, True)
    flipped = rows(0)
    flipped.view(np.uint32)[2, 3] ^= 1  # one bit of one float
    assert c.get(flipped, lambda r: Blob(12))[1] is False
    assert c.get(rows(0)[:3], lambda r: Blob(13))[1] is False  # one row shorter
    assert c.get(rows(0, n=5), lambda r: Blob(14))[1] is False  # one row longer (the same first 4)
    assert c.get(rows(1), lambda r: Blob(15))[1] is False  # other values
    assert c.get(rows(0), lambda r: Blob(16)) == (first, True)


def test_prefix_cache_options_are_validated():
    with pytest.raises(ValueError, match=r"max_entries must be an integer >= 0 \(got -1\); max_bytes must be"):
        PrefixCacheOptions(max_entries=-1, max_bytes=1.5)
    assert not PrefixCacheOptions(max_entries=0).enabled and PrefixCacheOptions().enabled


# ------------------------------------------------------------------ the engine: same text with and without reuse

@pytest.fixture(scope="module")
def no_reuse_engine():
    e = Qwen3ASREngine(backend="onnx", threads=2, prefix_cache=NO_PREFIX_CACHE)
    yield e
    e.close()


def test_one_pass_stream_and_long_file_are_the_same_with_and_without_reuse(default_engine, no_reuse_engine):
    on, off = default_engine, no_reuse_engine
    on.decoder.prefixes.clear()
    for kw in ({}, {"context": CONTEXT}):
        a, b = on.transcribe(EN2, **kw), off.transcribe(EN2, **kw)
        assert a.token_ids == b.token_ids and a.text
    again = on.transcribe(EN2, context=CONTEXT)
    assert again.token_ids == a.token_ids
    hits = on.decoder.prefixes.stats.hits
    assert hits == 1  # the second request with that context

    pcm = prepare_audio(LONG)[:16000 * 20]

    def stream(engine):
        s = engine.create_stream(context=CONTEXT)
        for i in range(0, pcm.shape[0], 8000):
            s.feed_audio(pcm[i:i + 8000])
        return s.finish()

    ra, rb = stream(on), stream(off)
    assert ra.token_ids == rb.token_ids and ra.text == rb.text and len(ra.chunks) >= 4
    assert on.decoder.prefixes.stats.hits - hits == len(ra.chunks)  # every chunk reused the prefix
    fa = on.transcribe(pcm, TranscribeOptions(chunk_size=6.0, vad=False))
    fb = off.transcribe(pcm, TranscribeOptions(chunk_size=6.0, vad=False))
    assert fa.token_ids == fb.token_ids and [s.text for s in fa.segments] == [s.text for s in fb.segments]
    assert off.decoder.prefixes.stats.hits == 0 and len(off.decoder.prefixes) == 0
