"""Export of a checkpoint whose widths are not multiples of the quantisation block (issue 13).

ONNX Runtime's MatMulNBits stores each weight row as ceil(K / block) blocks; the exporter pads
the last block with zero weights. The ``tiny-odd`` preset (scripts/make_random_checkpoint.py) has
no width that is a multiple of 32 (text hidden 112, heads*head_dim 80, intermediate 200; audio
72/152), so every int8/int4 matmul of its decoder, the lm_head included, has a padded block.
Its bundle, exported with the default options, is checked against the official model with the
same random weights, at the tolerances tests/test_numerics.py uses for tiny-a/tiny-b.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os

import numpy as np
import pytest

from qwen3asr_tools import onnx_graphs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG_CLIP = os.path.join(ROOT, "audio", "long_mixed.wav")
PRESET = ("tiny-odd", "bfloat16")


def _unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    """MatMulNBits codes (N, nb, block) from the packed (N, nb, block*bits/8) bytes (low nibble first)."""
    if bits == 8:
        return packed.astype(np.int32)
    codes = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), np.int32)
    codes[..., 0::2] = packed & 0x0F
    codes[..., 1::2] = packed >> 4
    return codes


# ----------------------------------------------------------------------------- quantiser
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("block", [16, 32, 128])
@pytest.mark.parametrize("k", [112, 200, 80, 33])
def test_quantize_pads_the_last_block_with_zero_weights(bits, block, k):
    w = np.random.default_rng(k + block + bits).standard_normal((24, k)).astype(np.float32)
    packed, scales = onnx_graphs.quantize_blockwise(w, bits, block)
    nb = -(-k // block)
    assert packed.shape == (24, nb, block * bits // 8) and packed.dtype == np.uint8
    assert scales.shape == (24 * nb,) and scales.dtype == np.float32
    codes = _unpack(packed, bits)
    zero_point = 2 ** (bits - 1)
    tail = codes.reshape(24, nb * block)[:, k:]
    assert tail.shape == (24, nb * block - k) and (tail == zero_point).all()  # padding is the value 0
    # every block's scale is its own absmax / qmax: the padding does not shrink the last block's range
    qmax = 2 ** (bits - 1) - 1
    padded = np.zeros((24, nb * block), np.float32)
    padded[:, :k] = w
    np.testing.assert_allclose(scales, np.abs(padded.reshape(24, nb, block)).max(-1).reshape(-1) / qmax, rtol=1e-6)
    deq = ((codes - zero_point) * scales.reshape(24, nb, 1)).reshape(24, nb * block)[:, :k]
    assert np.abs(deq - w).max() <= 0.5 * scales.max() * (1 + 1e-6)


def _dequantised(packed, scales, bits, n, k, block):
    nb = packed.shape[1]
    return ((_unpack(packed, bits) - 2 ** (bits - 1)) * scales.reshape(n, nb, 1)).reshape(n, nb * block)[:, :k]


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("block", [32, 64, 128])
@pytest.mark.parametrize("k", [1024, 112])
def test_scale_search_is_never_worse_than_absmax_per_block(bits, block, k):
    """search=True picks, per block, the scale with the least squared error among fractions of the
    absmax scale (1.0 included): no block gets worse, the padding still quantises to the zero
    point, and on Gaussian weights (what the 0.6B checkpoint's random weights are) the total error
    falls clearly (measured: about 10-20 % at 4 bits)."""
    n = 48
    w = np.random.default_rng(k + block).standard_normal((n, k)).astype(np.float32)
    nb = -(-k // block)
    errs = {}
    for search in (False, True):
        packed, scales = onnx_graphs.quantize_blockwise(w, bits, block, search=search)
        deq = _dequantised(packed, scales, bits, n, k, block)
        pad = np.zeros((n, nb * block), np.float32)
        pad[:, :k] = deq - w
        errs[search] = (pad.reshape(n, nb, block) ** 2).sum(-1)
        tail = _unpack(packed, bits).reshape(n, nb * block)[:, k:]
        assert (tail == 2 ** (bits - 1)).all()
    assert (errs[True] <= errs[False] * (1 + 1e-5) + 1e-12).all()
    gain = 1 - errs[True].sum() / errs[False].sum()
    if bits == 4:
        assert gain >= 0.05, gain


@pytest.mark.parametrize("block", [0, 8, 24, 48, 100])
def test_block_sizes_matmulnbits_rejects(block):
    with pytest.raises(ValueError, match=rf"quantisation block {block} is not accepted by MatMulNBits; "
                                         r"use a power of 2 >= 16"):
        onnx_graphs.quantize_blockwise(np.ones((4, 64), np.float32), 8, block)


@pytest.mark.parametrize("bits,block,search", [(8, 32, False), (8, 128, False), (4, 32, False), (4, 16, False),
                                               (4, 64, True)])
@pytest.mark.parametrize("k", [112, 200])
def test_matmulnbits_runs_padded_blocks(bits, block, search, k):
    """The decoder's own MatMulNBits node (onnx_graphs._Weights) in ONNX Runtime equals x @ W_deq.T,
    W_deq the dequantised weights: exactly (fp32 accumulation, accuracy_level 0) and within the int8
    activation rounding at the decoder's accuracy_level 4."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto

    rng = np.random.default_rng(k * bits)
    n = 72
    w = rng.standard_normal((n, k)).astype(np.float32)
    x = rng.standard_normal((1, 5, k)).astype(np.float32)
    g = onnx_graphs.GraphBuilder("one_linear")
    y = onnx_graphs._Weights(g, bits, block, search).linear(g.input("x", TensorProto.FLOAT, [1, 5, k]), w, "w")
    g.output(y, "y", TensorProto.FLOAT, [1, 5, n])
    model = g.build(extra_domains=("com.microsoft",))
    node = next(nd for nd in model.graph.node if nd.op_type == "MatMulNBits")
    attrs = {a.name: a.i for a in node.attribute}
    assert (attrs["K"], attrs["N"], attrs["accuracy_level"]) == (k, n, 4)

    packed, scales = onnx_graphs.quantize_blockwise(w, bits, block, search=search)
    deq = _dequantised(packed, scales, bits, n, k, block)
    ref = x.astype(np.float64) @ deq.T.astype(np.float64)

    def run(level):
        for a in node.attribute:
            if a.name == "accuracy_level":
                a.i = level
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, {"x": x})[0]

    exact = run(0)
    assert np.abs(exact - ref).max() <= 1e-5 * np.abs(ref).max()
    fast = run(4)
    rel = np.abs(fast - ref).max() / np.abs(ref).max()
    assert rel <= 0.02, rel


# ----------------------------------------------------------------------------- bundle
needs_official = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("qwen_asr") is None,
    reason="the random checkpoint and the reference need torch and qwen-asr (the dev extra: pip install -e '.[dev]')")


@pytest.fixture(scope="module")
def odd():
    """(checkpoint, bundle) of tiny-odd exported with the default options (decoders fp32, int8, int4)."""
    import bundles

    return bundles.bundle(*PRESET)


@needs_official
def test_preset_has_no_width_divisible_by_32(odd):
    ck, bd = odd
    with open(os.path.join(bd, "model.json"), encoding="utf-8") as f:
        man = json.load(f)
    t, a = man["config"]["text"], man["config"]["audio"]
    widths = {"hidden": t["hidden_size"], "heads*head_dim": t["num_attention_heads"] * t["head_dim"],
              "intermediate": t["intermediate_size"], "audio d_model": a["d_model"], "audio ffn": a["encoder_ffn_dim"]}
    assert all(v % 32 for v in widths.values()), widths
    # the manifest tells the block really used: int8 32 (128 only where every width is a multiple),
    # int4 64 with searched scales
    quant = {v["dtype"]: v.get("quantization") for v in man["decoder"]["variants"]}
    assert quant["fp32"] is None
    assert (quant["int8"]["bits"], quant["int8"]["block_size"], quant["int8"]["scales"]) == (8, 32, "absmax")
    assert (quant["int4"]["bits"], quant["int4"]["block_size"], quant["int4"]["scales"]) == \
        (4, 64, "least-squares search")


@needs_official
@pytest.mark.parametrize("dtype,bits,want_block", [("int8", 8, 32), ("int4", 4, 64)])
def test_quantised_decoder_has_padded_blocks(odd, dtype, bits, want_block):
    import onnx

    _, bd = odd
    model = onnx.load(os.path.join(bd, "decoder", f"decoder_{dtype}.onnx"))
    inits = {t.name: t for t in model.graph.initializer}
    ks = set()
    for node in model.graph.node:
        if node.op_type != "MatMulNBits":
            continue
        attrs = {a.name: a.i for a in node.attribute}
        k, n, block = attrs["K"], attrs["N"], attrs["block_size"]
        assert attrs["bits"] == bits and block == want_block
        assert list(inits[node.input[1]].dims) == [n, -(-k // block), block * bits // 8]
        assert list(inits[node.input[2]].dims) == [n * -(-k // block)]
        ks.add(k)
    assert ks == {112, 80, 200}  # qkv/gate_up/lm_head, o_proj, down_proj: all padded


@needs_official
def test_cli_default_export(odd, tmp_path):
    """``export_onnx.py --checkpoint --out`` with nothing else succeeds (it failed with
    "K=112 is not a multiple of the quantisation block 32"), and its int8 decoder is the one tested."""
    from qwen3asr_tools import export_onnx

    ck, bd = odd
    out = tmp_path / "bundle"
    assert export_onnx.main(["--checkpoint", ck, "--out", str(out)]) == 0
    with open(out / "model.json", encoding="utf-8") as f:
        man = json.load(f)
    assert [v["dtype"] for v in man["decoder"]["variants"]] == ["fp32", "int8"]

    def digest(path):
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    assert digest(out / "decoder" / "decoder_int8.onnx") == digest(os.path.join(bd, "decoder", "decoder_int8.onnx"))


@needs_official
def test_cli_rejects_a_block_matmulnbits_cannot_take(odd, tmp_path, capsys):
    from qwen3asr_tools import export_onnx

    ck, _ = odd
    assert export_onnx.main(["--checkpoint", ck, "--out", str(tmp_path / "b"), "--quant-block", "48"]) == 2
    err = capsys.readouterr().err
    assert "error: quantisation block 48 is not accepted by MatMulNBits; use a power of 2 >= 16" in err
    assert not (tmp_path / "b" / "encoder").exists()  # refused before any graph was written


# ----------------------------------------------------------------------------- against the official model
@pytest.fixture(scope="module")
def speech():
    from qwen3asr.audio import prepare_audio

    return prepare_audio(LONG_CLIP)


def clip(speech, seconds, offset=2.0):
    start = int(offset * 16000)
    return speech[start:start + int(round(seconds * 16000))]


def _compare(odd, audio, **kw):
    from qwen3asr_tools import compare_logits

    ck, bd = odd
    return compare_logits.compare(ck, bd, audio, ignore_eos=True, **kw)


@needs_official
@pytest.mark.slow  # the official torch model
@pytest.mark.parametrize("teacher", ["greedy", "sample"])
def test_fp32_logits_match_official(odd, speech, teacher):
    s = _compare(odd, clip(speech, 9.5), max_new_tokens=32, decoder_dtype="fp32", teacher_mode=teacher,
                 seed=3)["summary"]
    assert s["steps"] >= 30
    assert s["min_cosine"] >= 0.99999, s
    assert s["argmax_agreement"] == 1.0, s


@needs_official
@pytest.mark.slow
def test_int8_logits_match_official(odd, speech, record_property):
    """The tolerances of tests/test_numerics.py::test_int8_logits_teacher_forced."""
    s = _compare(odd, clip(speech, 4.0), max_new_tokens=40, decoder_dtype="int8")["summary"]
    record_property("int8_min_cosine", s["min_cosine"])
    assert s["steps"] >= 30
    assert s["argmax_agreement"] >= 0.98, s
    assert s["min_cosine"] >= 0.999, s


@needs_official
@pytest.mark.slow
def test_int4_logits_match_official(odd, speech, record_property):
    """No int4 test exists for tiny-a/tiny-b; docs/conversion.md reports for them (greedy teacher,
    4 s, 40 steps) argmax 97.5-100 % and min cosine 0.977-0.984. Required here: argmax >= 95 %,
    min cosine >= 0.97, just below that range."""
    s = _compare(odd, clip(speech, 4.0), max_new_tokens=40, decoder_dtype="int4")["summary"]
    record_property("int4_min_cosine", s["min_cosine"])
    assert s["steps"] >= 30
    assert s["argmax_agreement"] >= 0.95, s
    assert s["min_cosine"] >= 0.97, s
