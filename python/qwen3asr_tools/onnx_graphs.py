"""ONNX graphs of the Qwen3-ASR audio encoder and text decoder, built node by node.

Built directly with onnx.helper (no torch tracing) so the graphs contain only plain ops
the RKNN converter accepts (opset 17; no Range/Trilu/CumSum/ScatterElements/GatherND/
Einsum): all chunking, masks and positions are computed by the host and passed in.

Encoder graphs (per fixed duration of D seconds, C = D chunks of 100 frames, L = 13*C):
  merged:   mel [1, n_mels, 100*C], conv_mask1 [C,1,1,50], conv_mask2 [C,1,1,25],
            attn_bias [1,1,L,L]  ->  embeds [1, L, output_dim]
  frontend: mel [1, n_mels, 100], conv_mask1 [1,1,1,50], conv_mask2 [1,1,1,25]
            -> hidden [1, 13, d_model]   (one chunk, positions added)
  backend:  hidden [1, L, d_model], attn_bias [1,1,L,L] -> embeds [1, L, output_dim]
Decoder graph (KV cache, prefill and single step share it; GroupQueryAttention):
  inputs_embeds [1,S,H], seqlens_k [1] int32 (= P+S-1), total_sequence_length [] int32 (= P+S),
  logit_index [K] int64, past_key_i/past_value_i [1,kv_heads,C,head_dim] (capacity C >= P+S)
  -> logits [1,K,V], present_key_i/present_value_i [1,kv_heads,C,head_dim]
  (bind past and present to one buffer: the new rows are written in place)
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qwen3asr.encoder import CHUNK_FRAMES, TOKENS_PER_CHUNK, conv_out  # the runtime's geometry

OPSET = 17


def conv_lengths(n: int) -> list[int]:
    """Sizes after each of the three stem convs: n -> ceil(n/2) three times."""
    a = conv_out(n)
    b = conv_out(a)
    return [a, b, conv_out(b)]


class GraphBuilder:
    """Tiny helper: named nodes and initializers, unique names.

    ``weight_bits=8``: every ``linear`` stores its weight as weight-only int8 (MatMulNBits,
    ``block_size`` weights per scale) instead of fp32; the lean encoder (export --memory lean).
    """

    def __init__(self, name: str, weight_bits: int | None = None, block_size: int = 128):
        self.name = name
        self.weight_bits, self.block_size = weight_bits, block_size
        self.domains: set[str] = set()
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._n = 0
        self._consts: dict[tuple, str] = {}

    def _uid(self, base: str) -> str:
        self._n += 1
        return f"{base}_{self._n}"

    def input(self, name: str, elem: int, shape: list) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def output(self, value: str, name: str, elem: int, shape: list) -> None:
        self.op("Identity", [value], outputs=[name])
        self.outputs.append(helper.make_tensor_value_info(name, elem, shape))

    def weight(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def const(self, values, dtype=np.int64) -> str:
        arr = np.asarray(values, dtype=dtype)
        key = (arr.dtype.str, arr.shape, arr.tobytes())
        if key not in self._consts:
            self._consts[key] = self.weight(self._uid("const"), arr)
        return self._consts[key]

    def op(self, op_type: str, inputs: list[str], outputs: list[str] | None = None, n_out: int = 1,
           domain: str = "", **attrs) -> str:
        if outputs is None:
            outputs = [self._uid(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=self._uid(op_type), domain=domain, **attrs))
        return outputs[0] if len(outputs) == 1 else outputs

    # composite ops ------------------------------------------------------------
    def linear(self, x: str, w: np.ndarray, b: np.ndarray | None, name: str) -> str:
        """x @ w.T + b with torch Linear weight layout ``w`` (out, in); int8 weights with
        ``weight_bits``."""
        if self.weight_bits:
            n, k = w.shape
            packed, scales = quantize_blockwise(np.asarray(w, np.float32), self.weight_bits, self.block_size)
            self.domains.add("com.microsoft")
            # accuracy_level 4: int8 activations per block, int32 sums (as fast as the fp32 MatMul
            # at 39 rows, faster at 390; docs/benchmarks.md "Lean profile")
            y = self.op("MatMulNBits", [x, self.weight(name + ".qweight", packed), self.weight(name + ".scales", scales)],
                        domain="com.microsoft", K=k, N=n, bits=self.weight_bits, block_size=self.block_size,
                        accuracy_level=4)
        else:
            y = self.op("MatMul", [x, self.weight(name + ".weight_t", w.T.astype(np.float32))])
        if b is not None:
            y = self.op("Add", [y, self.weight(name + ".bias", b.astype(np.float32))])
        return y

    def gelu(self, x: str) -> str:
        """Exact (erf) GELU: 0.5 * x * (1 + erf(x / sqrt 2)); opset 17 has no Gelu op."""
        e = self.op("Erf", [self.op("Div", [x, self.const(math.sqrt(2.0), np.float32)])])
        return self.op("Mul", [self.op("Mul", [x, self.const(0.5, np.float32)]),
                               self.op("Add", [e, self.const(1.0, np.float32)])])

    def layer_norm(self, x: str, w: np.ndarray, b: np.ndarray, name: str, eps: float = 1e-5) -> str:
        return self.op("LayerNormalization", [x, self.weight(name + ".weight", w), self.weight(name + ".bias", b)],
                       axis=-1, epsilon=eps)

    def rms_norm(self, x: str, w: np.ndarray, name: str, eps: float) -> str:
        var = self.op("ReduceMean", [self.op("Pow", [x, self.const(2.0, np.float32)])], axes=[-1], keepdims=1)
        denom = self.op("Sqrt", [self.op("Add", [var, self.const(eps, np.float32)])])
        return self.op("Mul", [self.op("Div", [x, denom]), self.weight(name + ".weight", w)])

    def reshape(self, x: str, shape: list[int]) -> str:
        return self.op("Reshape", [x, self.const(shape)])

    def build(self, opset: int = OPSET, extra_domains: tuple = ()) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.inits)
        domains = sorted(set(extra_domains) | self.domains)
        imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
        model = helper.make_model(graph, opset_imports=imports, producer_name="qwen3asr-rk")
        model.ir_version = 8
        return model


# ----------------------------------------------------------------------------- encoder
def sinusoids(length: int, channels: int, max_timescale: float = 10000.0) -> np.ndarray:
    """Whisper-style positions ``(length, channels)`` float32: [sin | cos] halves."""
    inc = np.log(max_timescale) / (channels // 2 - 1)
    inv = np.exp(-inc * np.arange(channels // 2, dtype=np.float32)).astype(np.float32)
    t = np.arange(length, dtype=np.float32)[:, None] * inv[None, :]
    return np.concatenate([np.sin(t), np.cos(t)], axis=1).astype(np.float32)


def _conv_stem(g: GraphBuilder, x: str, n_chunks: int, W, cfg) -> str:
    """x: [C, 1, n_mels, 100] -> [C, 13, d_model] with positions added."""
    P = "thinker.audio_tower."
    m1 = g.input("conv_mask1", TensorProto.FLOAT, [n_chunks, 1, 1, CHUNK_FRAMES // 2])
    m2 = g.input("conv_mask2", TensorProto.FLOAT, [n_chunks, 1, 1, conv_lengths(CHUNK_FRAMES)[1]])
    for i, mask in ((1, m1), (2, m2), (3, None)):
        x = g.op("Conv", [x, g.weight(f"conv2d{i}.weight", W.get(f"{P}conv2d{i}.weight")),
                         g.weight(f"conv2d{i}.bias", W.get(f"{P}conv2d{i}.bias"))],
                 kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
        x = g.gelu(x)
        if mask is not None:
            # zero the frames past a short single chunk so the next conv sees zero padding,
            # exactly as the official encoder running that chunk at its own length
            x = g.op("Mul", [x, mask])
    ch = cfg.downsample_hidden_size
    f3 = conv_lengths(cfg.num_mel_bins)[2]
    t3 = conv_lengths(CHUNK_FRAMES)[2]
    x = g.op("Transpose", [x], perm=[0, 3, 1, 2])  # [C, t, ch, f]
    x = g.reshape(x, [n_chunks, t3, ch * f3])
    x = g.linear(x, W.get(P + "conv_out.weight"), None, "conv_out")
    pos = sinusoids(cfg.max_source_positions, cfg.d_model)[:t3]
    return g.op("Add", [x, g.weight("positions", pos)])


def _encoder_layers(g: GraphBuilder, x: str, bias: str, W, cfg) -> str:
    """x: [1, L, d] -> [1, L, output_dim]."""
    P = "thinker.audio_tower."
    d, nh = cfg.d_model, cfg.encoder_attention_heads
    hd = d // nh
    for i in range(cfg.encoder_layers):
        p = f"{P}layers.{i}."
        h = g.layer_norm(x, W.get(p + "self_attn_layer_norm.weight"), W.get(p + "self_attn_layer_norm.bias"),
                         f"l{i}.ln1")
        heads = []
        for proj in ("q", "k", "v"):
            y = g.linear(h, W.get(p + f"self_attn.{proj}_proj.weight"), W.get(p + f"self_attn.{proj}_proj.bias"),
                         f"l{i}.{proj}")
            heads.append(g.op("Transpose", [g.reshape(y, [1, -1, nh, hd])], perm=[0, 2, 1, 3]))
        q, k, v = heads
        q = g.op("Mul", [q, g.const(hd ** -0.5, np.float32)])
        s = g.op("Add", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]), bias])
        a = g.op("MatMul", [g.op("Softmax", [s], axis=-1), v])
        a = g.reshape(g.op("Transpose", [a], perm=[0, 2, 1, 3]), [1, -1, d])
        x = g.op("Add", [x, g.linear(a, W.get(p + "self_attn.out_proj.weight"), W.get(p + "self_attn.out_proj.bias"),
                                     f"l{i}.o")])
        h = g.layer_norm(x, W.get(p + "final_layer_norm.weight"), W.get(p + "final_layer_norm.bias"), f"l{i}.ln2")
        h = g.gelu(g.linear(h, W.get(p + "fc1.weight"), W.get(p + "fc1.bias"), f"l{i}.fc1"))
        x = g.op("Add", [x, g.linear(h, W.get(p + "fc2.weight"), W.get(p + "fc2.bias"), f"l{i}.fc2")])
    x = g.layer_norm(x, W.get(P + "ln_post.weight"), W.get(P + "ln_post.bias"), "ln_post")
    x = g.gelu(g.linear(x, W.get(P + "proj1.weight"), W.get(P + "proj1.bias"), "proj1"))
    return g.linear(x, W.get(P + "proj2.weight"), W.get(P + "proj2.bias"), "proj2")


def encoder_block(cfg) -> int:
    """Weights per scale of the int8 encoder: 128 when every linear's input width (d_model, the
    FFN width, the conv stem's flattened output) is a multiple of 128 (the official 0.6B and
    1.7B: faster than 32, docs/benchmarks.md), else 32."""
    widths = (cfg.d_model, cfg.encoder_ffn_dim, cfg.downsample_hidden_size * conv_lengths(cfg.num_mel_bins)[2])
    return 128 if all(w % 128 == 0 for w in widths) else 32


def encoder_merged(W, cfg, n_chunks: int, weight_bits: int | None = None) -> onnx.ModelProto:
    g = GraphBuilder(f"qwen3asr_encoder_merged_{n_chunks}", weight_bits, encoder_block(cfg))
    L = TOKENS_PER_CHUNK * n_chunks
    mel = g.input("mel", TensorProto.FLOAT, [1, cfg.num_mel_bins, CHUNK_FRAMES * n_chunks])
    bias = g.input("attn_bias", TensorProto.FLOAT, [1, 1, L, L])
    x = g.reshape(mel, [cfg.num_mel_bins, n_chunks, CHUNK_FRAMES])
    x = g.op("Unsqueeze", [g.op("Transpose", [x], perm=[1, 0, 2]), g.const([1])])  # [C,1,mels,100]
    x = _conv_stem(g, x, n_chunks, W, cfg)
    x = g.reshape(x, [1, L, cfg.d_model])
    y = _encoder_layers(g, x, bias, W, cfg)
    g.output(y, "embeds", TensorProto.FLOAT, [1, L, cfg.output_dim])
    return g.build()


def encoder_frontend(W, cfg, weight_bits: int | None = None) -> onnx.ModelProto:
    g = GraphBuilder("qwen3asr_encoder_frontend", weight_bits, encoder_block(cfg))
    mel = g.input("mel", TensorProto.FLOAT, [1, cfg.num_mel_bins, CHUNK_FRAMES])
    x = g.op("Unsqueeze", [mel, g.const([1])])  # [1,1,mels,100]
    x = _conv_stem(g, x, 1, W, cfg)
    g.output(x, "hidden", TensorProto.FLOAT, [1, TOKENS_PER_CHUNK, cfg.d_model])
    return g.build()


def encoder_backend(W, cfg, n_chunks: int, weight_bits: int | None = None) -> onnx.ModelProto:
    g = GraphBuilder(f"qwen3asr_encoder_backend_{n_chunks}", weight_bits, encoder_block(cfg))
    L = TOKENS_PER_CHUNK * n_chunks
    x = g.input("hidden", TensorProto.FLOAT, [1, L, cfg.d_model])
    bias = g.input("attn_bias", TensorProto.FLOAT, [1, 1, L, L])
    y = _encoder_layers(g, x, bias, W, cfg)
    g.output(y, "embeds", TensorProto.FLOAT, [1, L, cfg.output_dim])
    return g.build()


# ----------------------------------------------------------------------------- decoder
class _Weights:
    """Linear-weight sink for the decoder: fp32 MatMul, or MatMulNBits (weight-only int8/int4)."""

    def __init__(self, g: GraphBuilder, bits: int | None, block_size: int = 32, search: bool = False):
        self.g, self.bits, self.block, self.search = g, bits, block_size, search

    def linear(self, x: str, w: np.ndarray, name: str) -> str:
        if self.bits is None:
            return self.g.linear(x, w, None, name)
        n, k = w.shape
        packed, scales = quantize_blockwise(w, self.bits, self.block, self.search)
        return self.g.op("MatMulNBits", [x, self.g.weight(name + ".qweight", packed),
                                         self.g.weight(name + ".scales", scales)],
                         domain="com.microsoft", K=k, N=n, bits=self.bits, block_size=self.block,
                         accuracy_level=4)

    def fused(self, x: str, ws: list[np.ndarray], name: str) -> list[str]:
        """Several linears of the same input as one matmul (weights stacked along the output axis),
        split afterwards: one pass over ``x`` and one kernel launch instead of len(ws). Each output
        column is the same dot product as in the separate matmuls (and, quantised, the same
        per-row blocks)."""
        y = self.linear(x, np.concatenate(ws, axis=0), name)
        sizes = [w.shape[0] for w in ws]
        return self.g.op("Split", [y, self.g.const(sizes)], axis=-1, n_out=len(ws))


def check_quant_block(block: int) -> None:
    """MatMulNBits takes block sizes that are powers of 2 and at least 16; raise ValueError otherwise."""
    if block < 16 or block & (block - 1):
        raise ValueError(f"quantisation block {block} is not accepted by MatMulNBits; use a power of 2 >= 16 "
                         f"(16, 32, 64, 128, 256)")


def quantize_blockwise(w: np.ndarray, bits: int, block: int, search: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric block-wise weight quantisation in ONNX Runtime's MatMulNBits layout.

    ``w`` is (N, K) (torch Linear: out x in), any K. MatMulNBits splits each row into
    ``nb = ceil(K / block)`` blocks; when ``block`` does not divide K the row is padded up to
    ``nb * block`` with zero weights, which quantise to the zero point (value 0), so the padding
    neither changes the last block's scale nor adds to the product. Returns ``packed`` uint8
    (N, nb, block*bits/8) and ``scales`` float32 (N * nb,). The default zero point
    (2^(bits-1)) is implied.

    ``search=False``: each block's scale is absmax / (2^(bits-1) - 1), nothing clipped.
    ``search=True``: each block's scale is the one of ``SCALE_GRID`` (fractions of that absmax
    scale, 1.0 included) with the least squared error over the block: a clipped outlier can
    cost less than the coarser grid it forces on the other weights. Never worse than absmax in
    squared error per block, by construction.
    """
    if bits not in (4, 8):
        raise ValueError(f"unsupported bits {bits}; use 8 or 4")
    check_quant_block(block)
    n, k = w.shape
    nb = -(-k // block)
    qmax = 2 ** (bits - 1) - 1
    wb = np.zeros((n, nb * block), np.float32)
    wb[:, :k] = w
    wb = wb.reshape(n, nb, block)
    absmax = np.abs(wb).max(axis=-1, keepdims=True)
    scales = np.where(absmax > 0, absmax / qmax, 1.0).astype(np.float32)
    if search:
        scales = _search_scales(wb, scales, qmax)
    q = np.clip(np.rint(wb / scales), -qmax - 1, qmax).astype(np.int32) + 2 ** (bits - 1)
    q = q.astype(np.uint8)
    if bits == 8:
        packed = q
    else:
        packed = (q[..., 0::2] & 0x0F) | ((q[..., 1::2] & 0x0F) << 4)
    return np.ascontiguousarray(packed.astype(np.uint8)), scales.reshape(-1)


SCALE_GRID = tuple(np.round(np.linspace(0.70, 1.0, 16), 4))  # fractions of the absmax scale tried


def _search_scales(wb: np.ndarray, base: np.ndarray, qmax: int, rows: int = 4096) -> np.ndarray:
    """Per block, the scale of ``SCALE_GRID`` x ``base`` with the least squared quantisation
    error (rows at a time, to bound the memory)."""
    out = base.copy()
    for r in range(0, wb.shape[0], rows):
        x, b = wb[r:r + rows], base[r:r + rows]
        best_err = np.full(b.shape, np.inf, np.float32)
        for f in SCALE_GRID:
            s = (b * np.float32(f)).astype(np.float32)
            err = ((np.clip(np.rint(x / s), -qmax - 1, qmax) * s - x) ** 2).sum(axis=-1, keepdims=True)
            better = err < best_err
            best_err = np.where(better, err, best_err)
            out[r:r + rows] = np.where(better, s, out[r:r + rows])
    return out


def rope_cache(n_positions: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin ``(n_positions, head_dim // 2)`` float32 for positions 0..n-1, computed in float32
    as the official rotary embedding (inverse frequencies, then position * frequency)."""
    inv = 1.0 / (np.float32(theta) ** (np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)))
    freqs = np.arange(n_positions, dtype=np.float32)[:, None] * inv.astype(np.float32)[None, :]
    return np.cos(freqs).astype(np.float32), np.sin(freqs).astype(np.float32)


DECODER_MAX_POSITIONS = 4096  # rows of the rotary tables stored in the decoder (the bundle's max_context)


def decoder(W, cfg, bits: int | None = None, block_size: int = 32,
            max_positions: int = DECODER_MAX_POSITIONS, scale_search: bool = False,
            batch: bool = False) -> onnx.ModelProto:
    """The Qwen3 text decoder with KV cache; see the module docstring for the I/O.

    Attention is ONNX Runtime's com.microsoft GroupQueryAttention (rotary inside, from tables of
    ``max_positions`` rows stored in the graph). Bound through IOBinding to the same buffer as
    input and output, past_key_i/present_key_i are one fixed-capacity cache that the op extends in
    place at rows [seqlens_k + 1 - S, seqlens_k + 1): no copy of the cache per step.

    ``batch=True``: the leading dimension of inputs_embeds, seqlens_k, the caches and the logits
    is B instead of 1 (B sequences, each at its own cache length seqlens_k[b]; every row of the
    call the same S). Not what the bundle ships: qwen3asr_tools.bench_batch measures with it
    whether decoding concurrent streams in one call pays (docs/serving.md).
    """
    t = cfg.text
    g = GraphBuilder("qwen3asr_decoder")
    lin = _Weights(g, bits, block_size, scale_search)
    H, nh, kvh, hd = t.hidden_size, t.num_attention_heads, t.num_key_value_heads, t.head_dim
    B = "B" if batch else 1  # the leading dimension
    lead = 0 if batch else 1  # in Reshape shapes: 0 copies the input's B
    x = g.input("inputs_embeds", TensorProto.FLOAT, [B, "S", H])
    seqlens_k = g.input("seqlens_k", TensorProto.INT32, [B])  # cache length after this call, minus 1
    total_len = g.input("total_sequence_length", TensorProto.INT32, [])  # cache length after this call
    logit_index = g.input("logit_index", TensorProto.INT64, ["K"])
    cos, sin = rope_cache(max_positions, hd, t.rope_theta)
    cos_cache, sin_cache = g.weight("rope_cos", cos), g.weight("rope_sin", sin)

    P = "thinker.model."
    for i in range(t.num_hidden_layers):
        p = f"{P}layers.{i}."
        pk = g.input(f"past_key_{i}", TensorProto.FLOAT, [B, kvh, "C", hd])
        pv = g.input(f"past_value_{i}", TensorProto.FLOAT, [B, kvh, "C", hd])
        h = g.rms_norm(x, W.get(p + "input_layernorm.weight"), f"l{i}.in_norm", t.rms_norm_eps)
        q, k, v = lin.fused(h, [W.get(p + f"self_attn.{n}_proj.weight") for n in "qkv"], f"l{i}.qkv")
        # per-head RMSNorm of q and k (before RoPE, which GroupQueryAttention applies)
        q = g.rms_norm(g.reshape(q, [lead, -1, nh, hd]), W.get(p + "self_attn.q_norm.weight"), f"l{i}.q_norm",
                       t.rms_norm_eps)
        k = g.rms_norm(g.reshape(k, [lead, -1, kvh, hd]), W.get(p + "self_attn.k_norm.weight"), f"l{i}.k_norm",
                       t.rms_norm_eps)
        a = g.op("GroupQueryAttention",
                 [g.reshape(q, [lead, -1, nh * hd]), g.reshape(k, [lead, -1, kvh * hd]), v, pk, pv, seqlens_k,
                  total_len, cos_cache, sin_cache],
                 outputs=[g._uid("gqa"), f"present_key_{i}", f"present_value_{i}"], domain="com.microsoft",
                 num_heads=nh, kv_num_heads=kvh, scale=hd ** -0.5, do_rotary=1, rotary_interleaved=0)[0]
        x = g.op("Add", [x, lin.linear(a, W.get(p + "self_attn.o_proj.weight"), f"l{i}.o")])
        h = g.rms_norm(x, W.get(p + "post_attention_layernorm.weight"), f"l{i}.post_norm", t.rms_norm_eps)
        gate, up = lin.fused(h, [W.get(p + "mlp.gate_proj.weight"), W.get(p + "mlp.up_proj.weight")], f"l{i}.gate_up")
        act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])
        x = g.op("Add", [x, lin.linear(act, W.get(p + "mlp.down_proj.weight"), f"l{i}.down")])
        g.outputs.append(helper.make_tensor_value_info(f"present_key_{i}", TensorProto.FLOAT, [B, kvh, "C", hd]))
        g.outputs.append(helper.make_tensor_value_info(f"present_value_{i}", TensorProto.FLOAT, [B, kvh, "C", hd]))
    x = g.op("Gather", [x, logit_index], axis=1)  # only the rows whose logits are wanted
    x = g.rms_norm(x, W.get(P + "norm.weight"), "final_norm", t.rms_norm_eps)
    head = "thinker.lm_head.weight"
    lm = W.get(head) if head in W else W.get(P + "embed_tokens.weight")
    logits = lin.linear(x, lm, "lm_head")  # an aligner's head: its time classes instead of the vocabulary
    g.output(logits, "logits", TensorProto.FLOAT, [B, "K", cfg.head_rows])
    return g.build(extra_domains=("com.microsoft",))
