"""What word timestamps need on the board: the aligner encoder's compute, and memory with both models loaded.

Compute (used by ``costs`` for the aligner's encoder, which has no published board figures):
the multiply-accumulates (MACs) of one merged encoder graph call, counted from the audio
config's widths exactly as the official ``Qwen3ASRAudioEncoder`` computes them for one clip of
whole 1 s chunks up to one 8 s attention window (tests/test_board_model.py checks the count
against torch's FLOP counter on the official module):

    per 1 s chunk (conv stem, 128 mel x 100 frames): conv2d1 1 -> C, 3x3, stride 2 (64 x 50 out),
        conv2d2 C -> C (32 x 25 out), conv2d3 C -> C (16 x 13 out)    C = downsample_hidden_size
    per token (13 per chunk): conv_out C*16 -> d; per layer q, k, v, out d x d, fc1 d x ffn, fc2
        ffn x d, attention scores and values 2 x tokens x d; proj1 d x d, proj2 d x output_dim

Layer norms, activations, softmax and biases are left out (elementwise, a few % at most). The
graph computes attention over all its tokens with a block-diagonal mask (qwen3asr.encoder), so
the attention term uses the graph's tokens (104 at 8 s).

Memory: ``memory_budget`` adds up what an rk engine with word timestamps loads per SoC (the
two RKNN encoders, two RKLLM handles, host tables, the Python process), with a low and a high
estimate per item and the source of each, against a board's RAM minus a reserve for the OS.
The encoders come in the two shape kinds of scripts/onnx2rknn.py: "dynamic" (its default: one
.rknn per model for all its sizes, one copy of the fp16 weights) or "fixed" (one .rknn per size,
each with its own copy). Every compiled input shape also carries its own NPU program (command
buffers, layout): ``graph_mb``, measured from .rknn file sizes. Units: MB = 10^6 bytes.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import tempfile
from typing import Mapping, Optional, Sequence, Tuple

from qwen3asr.backends.rk.rknn_meta import SHAPE_KINDS  # scripts/onnx2rknn.py --shapes (dynamic: its default)

from ..make_random_checkpoint import aligner_config_dict, config_dict

MB = 1e6
CHUNK_TOKENS = 13  # encoder tokens per 1 s chunk (qwen3asr.encoder.TOKENS_PER_CHUNK)
WINDOW_CHUNKS = 8  # chunks per attention window (104 tokens, 8 s)
FP16 = 2  # bytes per weight / activation in the fp16 .rknn graphs

# The real models' configs, as the random-checkpoint writer reproduces them (its "0.6b" and
# "fa-0.6b" presets: the widths of Qwen3-ASR-0.6B's and Qwen3-ForcedAligner-0.6B's config.json).
ASR_CONFIG = config_dict("0.6b")["thinker_config"]
ALIGNER_CONFIG = aligner_config_dict("fa-0.6b")["thinker_config"]
ASR_AUDIO: Mapping = ASR_CONFIG["audio_config"]  # 896 wide, 18 layers, 14 heads, ffn 3584
ALIGNER_AUDIO: Mapping = ALIGNER_CONFIG["audio_config"]  # 1024 wide, 24 layers, 16 heads, ffn 4096
ALIGNER_CLASSES = 5000  # classify_num of the real aligner: its host head is 5000 x 1024
# Contexts the two RKLLM models are converted for (docs/board.md sections 1 and 9).
ASR_RKLLM_CONTEXT = 4096  # scripts/export_rkllm.py --max-context default
ALIGNER_RKLLM_CONTEXT = 2048  # docs/board.md section 9's conversion command


def _stem_dims(cfg: Mapping) -> Tuple[int, int, Tuple[Tuple[int, int], ...]]:
    """(stem channels, mel bins after the stem, output (height, width) of the three convs per chunk)."""
    c, h, w, outs = int(cfg["downsample_hidden_size"]), int(cfg["num_mel_bins"]), 100, []
    for _ in range(3):
        h, w = (h + 1) // 2, (w + 1) // 2
        outs.append((h, w))
    return c, h, tuple(outs)


def encoder_params(cfg: Mapping) -> int:
    """Parameters of an audio encoder of ``cfg`` (an official ``audio_config``), biases and norms included."""
    c, f, _ = _stem_dims(cfg)
    d, ffn, out, layers = (int(cfg[k]) for k in ("d_model", "encoder_ffn_dim", "output_dim", "encoder_layers"))
    stem = (9 * c + c) + 2 * (9 * c * c + c) + c * f * d  # conv2d1..3 with bias, conv_out without
    layer = 4 * (d * d + d) + (d * ffn + ffn) + (ffn * d + d) + 2 * 2 * d  # attention, fc1, fc2, two LayerNorms
    return stem + layers * layer + 2 * d + (d * d + d) + (d * out + out)  # ln_post, proj1, proj2


def encoder_macs(cfg: Mapping, n_chunks: int) -> int:
    """MACs of one merged graph of ``n_chunks`` 1 s chunks (1..8: within one attention window)."""
    if not 1 <= n_chunks <= WINDOW_CHUNKS:
        raise ValueError(f"n_chunks must be 1..{WINDOW_CHUNKS} (one attention window), got {n_chunks!r}")
    c, f, ((h1, w1), (h2, w2), (h3, w3)) = _stem_dims(cfg)
    tokens = CHUNK_TOKENS * n_chunks
    stem = 9 * c * h1 * w1 + 9 * c * c * (h2 * w2 + h3 * w3)
    return n_chunks * stem + tokens * (c * f * int(cfg["d_model"]) + _after_conv_out(cfg, n_chunks))


def part_macs(cfg: Mapping, part: str, n_chunks: int = WINDOW_CHUNKS) -> int:
    """MACs of one call of a graph ``part``: "merged" (``n_chunks`` s), "frontend" (the split
    front end: the stem and conv_out of one chunk) or "backend" (the rest, ``n_chunks`` s)."""
    front = encoder_macs(cfg, 1) - CHUNK_TOKENS * _after_conv_out(cfg, 1)
    if part == "merged":
        return encoder_macs(cfg, n_chunks)
    if part == "frontend":
        return front
    if part == "backend":
        return CHUNK_TOKENS * n_chunks * _after_conv_out(cfg, n_chunks)
    raise ValueError(f"unknown encoder graph part {part!r}; accepted: merged, frontend, backend")


def _after_conv_out(cfg: Mapping, n_chunks: int) -> int:
    """MACs per token after conv_out (layers with attention over the graph's tokens, proj1, proj2)."""
    d, ffn, out, layers = (int(cfg[k]) for k in ("d_model", "encoder_ffn_dim", "output_dim", "encoder_layers"))
    return layers * (4 * d * d + 2 * d * ffn + 2 * CHUNK_TOKENS * n_chunks * d) + d * d + d * out


def part_flop_ratio(part: str, n_chunks: int = WINDOW_CHUNKS, num: Mapping = ALIGNER_AUDIO,
                    den: Mapping = ASR_AUDIO) -> float:
    """MACs of the aligner's ``part`` graph over the ASR encoder's (part_macs)."""
    return part_macs(num, part, n_chunks) / part_macs(den, part, n_chunks)


def stem_share(cfg: Mapping, n_chunks: int = WINDOW_CHUNKS) -> float:
    """Share of the graph's MACs in the conv stem (the three convs; conv_out is counted as a layer)."""
    c, _, ((h1, w1), (h2, w2), (h3, w3)) = _stem_dims(cfg)
    return n_chunks * (9 * c * h1 * w1 + 9 * c * c * (h2 * w2 + h3 * w3)) / encoder_macs(cfg, n_chunks)


def encoder_flop_ratio(n_chunks: int = WINDOW_CHUNKS, num: Mapping = ALIGNER_AUDIO, den: Mapping = ASR_AUDIO) -> float:
    """MACs of the aligner's graph over the ASR encoder's, same size (default 8 s)."""
    return encoder_macs(num, n_chunks) / encoder_macs(den, n_chunks)


def transformer_flop_ratio(n_chunks: int = WINDOW_CHUNKS, num: Mapping = ALIGNER_AUDIO,
                           den: Mapping = ASR_AUDIO) -> float:
    """The same ratio without the conv stem (what it would be if the stem cost no time)."""
    def rest(cfg):
        return encoder_macs(cfg, n_chunks) * (1 - stem_share(cfg, n_chunks))

    return rest(num) / rest(den)


def activation_mb(cfg: Mapping, n_chunks: int) -> Tuple[float, float]:
    """(low, high) estimate of one loaded fp16 graph's activation buffers, MB.

    Low: the largest pair of tensors alive at once, the first two conv outputs of the stem
    (n x C x 64 x 50 and n x C x 32 x 25), as a runtime that reuses buffers needs. High: every
    main intermediate tensor kept (no reuse): the stem's three conv outputs before and after
    the activation, and per layer and token 10 d-wide tensors, 2 ffn-wide and 2 x heads x tokens
    attention scores."""
    c, _, ((h1, w1), (h2, w2), (h3, w3)) = _stem_dims(cfg)
    d, ffn, heads, layers = (int(cfg[k]) for k in ("d_model", "encoder_ffn_dim", "encoder_attention_heads",
                                                   "encoder_layers"))
    tokens = CHUNK_TOKENS * n_chunks
    low = n_chunks * c * (h1 * w1 + h2 * w2)
    high = 2 * n_chunks * c * (h1 * w1 + h2 * w2 + h3 * w3) + layers * tokens * (10 * d + 2 * ffn + 2 * heads * tokens)
    return low * FP16 / MB, high * FP16 / MB


# .rknn bytes beyond the fp16 weights, per compiled shape (rknn-toolkit2 2.5.0, rk3576, fp16,
# optimization_level 3), measured here on merged graphs of the real widths with random weights
# and 2 or 4 encoder layers (the full models were not converted: 18-24 layers take too long on
# this host): file size - 2 x parameters (scripts/rknn_sizes.py --encoder asr|aligner --layers 2|4
# --sizes 2,8 [--dynamic]). Per width: (graph seconds, MB without layers, MB per
# layer) at 2 s and 8 s, from these files (MB beyond the weights):
#   ASR 0.6B width (896, ffn 3584): 2 layers 1.83 / 2.12 / 2.17 / 2.34 / 2.57 at 2 / 3 / 4 / 5 / 8 s,
#     4 layers 3.12 / 4.17 at 2 / 8 s;
#   aligner width (1024, ffn 4096): 2 layers 1.99 / 2.76, 4 layers 3.41 / 4.54 at 2 / 8 s.
# One dynamic-shape file of the five sizes: 74.88 MB with 2 layers = weights 64.10 + 10.78, the
# sum of the five fixed files' 11.04 less 2 %; 120.99 MB with 4 layers (weights 102.68): one
# weight copy, one program per shape.
GRAPH_MB = {896: ((2, 0.549, 0.642), (8, 0.976, 0.797)), 1024: ((2, 0.558, 0.714), (8, 0.985, 0.889))}
GRAPH_SOURCE = ("measured .rknn file size beyond the fp16 weights per compiled shape, real widths with 2 and 4 "
                "layers, extrapolated linearly in layers and graph seconds (board_budget.GRAPH_MB)")


def graph_mb(cfg: Mapping, n_chunks: int) -> float:
    """Estimated .rknn bytes (MB) beyond the weights for one compiled shape of ``n_chunks`` s of an
    encoder of ``cfg``: the NPU program of that shape, linear in layers and in graph seconds
    between the two measured sizes (GRAPH_MB; another width takes the nearest one's, per layer
    scaled by the ratio of widths)."""
    d = int(cfg["d_model"])
    width = d if d in GRAPH_MB else min(GRAPH_MB, key=lambda w: abs(w - d))
    (s0, b0, l0), (s1, b1, l1) = GRAPH_MB[width]
    f = (n_chunks - s0) / (s1 - s0)
    base, per_layer = b0 + f * (b1 - b0), l0 + f * (l1 - l0)
    scale = 1.0 if width == d else d / width
    return base + int(cfg["encoder_layers"]) * per_layer * scale


def kv_bytes_per_position(text_cfg: Mapping, bytes_per_value: int = FP16) -> int:
    """KV-cache bytes per position of a Qwen3 text model: K and V, every layer, every KV head."""
    return 2 * int(text_cfg["num_hidden_layers"]) * int(text_cfg["num_key_value_heads"]) * \
        int(text_cfg["head_dim"]) * bytes_per_value


# ----------------------------------------------------------------------------- memory budget
@dataclasses.dataclass(frozen=True)
class MemoryItem:
    """One line of a budget: what, how much (MB, low and high estimate), and where the numbers come from."""

    name: str
    low_mb: float
    high_mb: float
    source: str


@dataclasses.dataclass(frozen=True)
class MemoryBudget:
    """Memory of one engine setup on one SoC against a board."""

    soc: str
    label: str  # what is loaded
    items: Tuple[MemoryItem, ...]
    board_mb: float  # the board's RAM
    os_mb: float  # kept for the OS (assumed)

    @property
    def low_mb(self) -> float:
        return sum(i.low_mb for i in self.items)

    @property
    def high_mb(self) -> float:
        return sum(i.high_mb for i in self.items)

    @property
    def available_mb(self) -> float:
        return self.board_mb - self.os_mb

    @property
    def fits(self) -> bool:
        """Whether even the high estimate leaves the OS its reserve."""
        return self.high_mb <= self.available_mb


BOARD_MB = 4 * 1024 ** 3 / MB  # a "4 GB" board: 4 GiB = 4295 MB
OS_MB = 800.0  # assumed: a headless Debian/Ubuntu board image (desktop off) after boot, 0.5-0.8 GB; the top
EMBED_ROW_PAGES = 2  # a bf16 row of 1024 (2 KB) spans at most two 4 KiB pages of the memory-mapped table
PAGE = 4096




def memory_budget(soc: str, rkllm_mb: float, asr_sizes: Sequence[int], aligner_sizes: Sequence[int],
                  baseline_mb: float, embed_rows: int, label: str = "", board_mb: float = BOARD_MB,
                  os_mb: float = OS_MB, rkllm_source: str = "published", asr_context: int = ASR_RKLLM_CONTEXT,
                  aligner_context: int = ALIGNER_RKLLM_CONTEXT, shapes: str = "dynamic") -> MemoryBudget:
    """Budget of an rk engine with word timestamps on ``soc``.

    rkllm_mb: one Qwen3-0.6B-shaped RKLLM handle as published (costs.RKLLM_MEMORY_MB);
    asr_sizes / aligner_sizes: merged encoder sizes in use (seconds; empty aligner_sizes: no
    aligner); baseline_mb: RSS of the Python process with the package imported (measured);
    embed_rows: distinct embedding rows a session touches per table (estimate); asr_context /
    aligner_context: the KV-cache lengths of the two handles (RKOptions.max_context);
    shapes: "dynamic" (one .rknn per model for all its sizes: one weight copy, and the
    activation buffers of the largest size, assumed shared by all: the toolkit sizes a dynamic
    model's memory by its "MaxShape") or "fixed" (one .rknn per size: a weight copy and
    activation buffers each).
    """
    if shapes not in SHAPE_KINDS:
        raise ValueError(f"shapes must be one of {', '.join(SHAPE_KINDS)}, got {shapes!r}")
    items = []
    for name, cfg, sizes in (("ASR", ASR_AUDIO, asr_sizes), ("aligner", ALIGNER_AUDIO, aligner_sizes)):
        if not sizes:
            continue
        params = encoder_params(cfg)
        dynamic = shapes == "dynamic" and len(sizes) > 1
        copies = 1 if dynamic else len(sizes)
        w = copies * params * FP16 / MB
        what = ", ".join(f"{s:g}" for s in sizes)
        items.append(MemoryItem(f"{name} RKNN encoder weights", w, w,
                                (f"one dynamic-shape .rknn for {what} s: one copy of " if dynamic else
                                 f"{len(sizes)} fixed-shape .rknn ({what} s), each its own copy of ")
                                + f"{params / 1e6:.1f} M parameters x 2 bytes (fp16)"))
        g = sum(graph_mb(cfg, int(s)) for s in sizes)
        items.append(MemoryItem(f"{name} RKNN programs, {len(sizes)} shape(s)", g, g, GRAPH_SOURCE))
        acts = [activation_mb(cfg, int(s)) for s in (sizes if not dynamic else [max(sizes)])]
        items.append(MemoryItem(f"{name} RKNN encoder activations", sum(a[0] for a in acts), sum(a[1] for a in acts),
                                ("the largest shape's buffers, shared by all (assumed: the toolkit sizes a dynamic "
                                 "model by its MaxShape); " if dynamic else "per loaded variant; ")
                                + "estimate: low = the stem's two largest fp16 tensors (buffers reused), high = "
                                  "every main intermediate tensor (no reuse)"))
    handles = (("ASR decoder", ASR_CONFIG, asr_context),) + (
        (("aligner LLM", ALIGNER_CONFIG, aligner_context),) if aligner_sizes else ())
    for name, cfg, ctx in handles:
        kv = kv_bytes_per_position(cfg["text_config"]) * ctx / MB
        items.append(MemoryItem(f"RKLLM handle, {name} (context {ctx})", rkllm_mb, rkllm_mb + kv,
                                f"{rkllm_source}; the benchmark's max_context_len is not stated (prompt 128 + 64 "
                                f"new tokens), so high = that + an fp16 KV cache of the whole context "
                                f"({kv_bytes_per_position(cfg['text_config']) // 1024} KiB per position)"))
    tables = 1 + bool(aligner_sizes)
    rows_mb = tables * embed_rows * EMBED_ROW_PAGES * PAGE / MB
    items.append(MemoryItem(f"host embedding rows ({tables} memory-mapped bf16 table(s))", rows_mb / EMBED_ROW_PAGES,
                            rows_mb, f"{embed_rows} distinct rows touched per table (estimate), 1-2 pages each; "
                            "clean file pages the kernel can drop (a whole table is 311 MB)"))
    if aligner_sizes:
        hidden = int(ALIGNER_CONFIG["text_config"]["hidden_size"])
        head = (ALIGNER_CLASSES * hidden + hidden) * 4 / MB
        items.append(MemoryItem(f"aligner head {ALIGNER_CLASSES} x {hidden} + final norm, fp32", head, head,
                                "read whole by backends.rk.aligner.load_head"))
    items.append(MemoryItem("Python + numpy + onnxruntime + qwen3asr (import only)", baseline_mb, baseline_mb,
                            "measured here (x86_64; the board's aarch64 process with rknnlite is not measured)"))
    return MemoryBudget(soc=soc, label=label, items=tuple(items), board_mb=board_mb, os_mb=os_mb)


IMPORTS = ("import numpy, onnxruntime, qwen3asr; from qwen3asr import Qwen3ASREngine; "
           "import qwen3asr.streaming, qwen3asr.vad, qwen3asr.aligner.model, qwen3asr.backends.rk.backend, "
           "qwen3asr.backends.rk.aligner")


def import_rss_mb(python: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> float:
    """RSS (MB) of a fresh Python process that has imported what the rk engine imports here (no
    models loaded; rknnlite is not importable off a board)."""
    from .. import child_env

    code = IMPORTS + "\nprint(open('/proc/self/status').read())"
    out = subprocess.run([python or sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=child_env(env), cwd=tempfile.gettempdir())
    m = re.search(r"VmRSS:\s+(\d+) kB", out.stdout)
    if not m:
        raise RuntimeError(f"no VmRSS in /proc/self/status of the child: {out.stdout[:200]!r}")
    return int(m.group(1)) * 1024 / MB


__all__ = ["ALIGNER_AUDIO", "ASR_AUDIO", "BOARD_MB", "GRAPH_MB", "MemoryBudget", "MemoryItem", "OS_MB", "SHAPE_KINDS",
           "activation_mb", "encoder_flop_ratio", "encoder_macs", "encoder_params", "graph_mb", "import_rss_mb",
           "kv_bytes_per_position", "memory_budget", "part_flop_ratio", "part_macs", "stem_share",
           "transformer_flop_ratio"]
