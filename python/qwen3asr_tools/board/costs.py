"""Per-SoC unit costs of the board cost model, each with its source.

``UnitCosts`` says what one unit of work costs on one SoC: an encoder graph call by part and size
(the reference design's RK3576 table, docs/reference_design.md; other sizes interpolated or
extrapolated), a decoder prefill position and decode step (Rockchip's rknn-llm benchmark,
``RKLLM_BENCHMARK``), a decoder run's fixed overhead, and for word timestamps the aligner's
encoder graph (the ASR graph x their compute ratio, ``budget``) and host head. ``unit_costs(soc)``
builds them with their sources; ``prefill="rtf-fit"`` takes the pessimistic RK3576 prefill rate
fitted to the reference design's published RTF (``calibrate.fit_prefill_rate``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

from . import budget as bb

SOCS = ("rk3576", "rk3588")

# Reference design's RK3576 encoder table (fp16 RKNN, Qwen3-ASR-0.6B, clocks locked):
REF_MERGED_MS = ((2.0, 302.0), (3.0, 364.0), (4.0, 499.0), (5.0, 643.0))  # graph seconds -> ms per call
REF_FRONTEND_MS = 60.0  # split front end, per call (one 1 s chunk; the source says "~60 ms")
REF_BACKEND_MS = ((2.0, 480.0), (3.0, 505.0), (4.0, 630.0), (5.0, 710.0))
# Rockchip's rknn-llm benchmark.md, release v1.3.0 (2026-06-17), Qwen3-0.6B text-only, a 128-token
# prompt then 64 new tokens, CPU and NPU at their highest clocks: soc -> (decoder quant, time to first
# token ms, decode tokens/s). Earlier releases: v1.2.2/v1.2.3 RK3576 W4A16_G128 512.36 ms / 24.3 tok/s,
# RK3588 W8A8 213.50 / 32.16; v1.2.1 582 / 22.52 and 215.76 / 29.52. (The per-channel W4A16 row of
# v1.3.0, 468.61 ms / 24.85 tok/s, is not what RK3576 runs here: the export is W4A16_G128.)
RKLLM_BENCHMARK_RELEASE = "v1.3.0"
RKLLM_BENCHMARK = {"rk3576": ("w4a16_g128", 506.41, 23.48), "rk3588": ("w8a8", 199.09, 32.91)}
TTFT_TOKENS = 128
DECODE_TOK_S = {soc: row[2] for soc, row in RKLLM_BENCHMARK.items()}
PUBLISHED_PREFILL_TOK_S = {soc: TTFT_TOKENS / (row[1] / 1000.0) for soc, row in RKLLM_BENCHMARK.items()}
# The pessimistic alternative for RK3576: the prefill rate at which the reference design's settings
# reproduce its published RTF (fit_prefill_rate; docs/board.md "Cost model"; refit with this script,
# test_board_model checks it is current). It is 2.6x below Rockchip's measured time to first token.
RK3576_PREFILL_TOK_S_FIT = 98.1
PREFILL_CHOICES = ("published", "rtf-fit")
FITTED = "rk3576 rtf-fit"  # report key of the RK3576 costs with the RTF-fitted prefill rate
DECODER_RUN_MS = 15.0  # per decoder run: host mel + prompt embedding + rkllm_run setup (assumed)
RK3588_ENCODER_SCALE = 1.0  # RK3588 encoder ms = RK3576 ms x this (assumed, see unit_costs)
# Encoder ms of a dynamic-shape .rknn (scripts/onnx2rknn.py's default: one model for every size)
# per ms of the fixed-shape model of the same size (the reference design's table). Unmeasured:
# assumed equal, because the dynamic file carries one compiled NPU program per declared shape
# (its size beyond the weights is the sum of the fixed files'; budget.GRAPH_MB), so each
# call runs a program compiled for its shape; rknnlite switches programs when the shape changes.
# DYNAMIC_SHAPE_SENSITIVITY is the slower case the report also shows (docs/board_checklist.md).
DYNAMIC_SHAPE_SCALE = 1.0
DYNAMIC_SHAPE_SENSITIVITY = 1.25

# Memory of the same benchmark rows (memory(MB) column; the context it was measured at is not stated).
# rockchip.md's 513 MB for RK3576 is the per-channel W4A16 row (512.71), not the W4A16_G128 one we run.
RKLLM_MEMORY_MB = {"rk3576": 545.35, "rk3588": 791.11}
# Word timestamps. The aligner's encoder has no published board figures: its graph costs the ASR
# encoder's graph of the same size x the ratio of their MACs (budget, from the two configs;
# assumed: NPU time proportional to MACs). Per part: the merged graph, the split front end (conv
# stem + conv_out of one chunk) and back end (the rest).
ALIGNER_ENCODER_SCALE = (("merged", bb.encoder_flop_ratio()), ("frontend", bb.part_flop_ratio("frontend")),
                         ("backend", bb.part_flop_ratio("backend")))
HEAD_GFLOPS = 5.0  # host fp32 rate of the aligner head's matmul (assumed, see unit_costs)
HEAD_FLOP_PER_SLOT = 2 * 1024 * bb.ALIGNER_CLASSES  # one slot row through the 5000 x 1024 head



@dataclasses.dataclass(frozen=True)
class UnitCosts:
    """What one unit of work costs on one SoC (all ms or tokens per second)."""

    soc: str
    decoder_quant: str  # "w4a16_g128" (RK3576) or "w8a8" (RK3588)
    merged_ms: Tuple[Tuple[float, float], ...]  # (graph seconds, ms per call), ascending
    frontend_ms: float  # split front end, per call (one 1 s chunk)
    backend_ms: Tuple[Tuple[float, float], ...]  # split back end: (graph seconds, ms per call)
    prefill_tok_s: float  # decoder prefill, prompt positions per second
    decode_tok_s: float  # decoder generation, tokens per second
    decoder_run_ms: float  # fixed cost of each decoder run (and of each aligner RKLLM run)
    sources: Tuple[Tuple[str, str], ...]  # (cost, where it comes from)
    aligner_scale: Tuple[Tuple[str, float], ...] = ALIGNER_ENCODER_SCALE  # (part, aligner ms per ASR ms)
    head_gflops: float = HEAD_GFLOPS  # host rate of the aligner head (fp32 GFLOP/s)
    dynamic_scale: float = DYNAMIC_SHAPE_SCALE  # merged / back-end graph ms of a dynamic-shape model per fixed ms

    def __post_init__(self):
        problems = []
        if self.soc not in SOCS:
            problems.append(f"soc must be one of {', '.join(SOCS)} (got {self.soc!r})")
        for name in ("frontend_ms", "prefill_tok_s", "decode_tok_s", "decoder_run_ms"):
            v = getattr(self, name)
            low_ok = v >= 0 if name in ("frontend_ms", "decoder_run_ms") else v > 0
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not low_ok:
                problems.append(f"{name} must be a finite number > 0 (>= 0 for overheads), got {v!r}")
        for name in ("head_gflops", "dynamic_scale"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                problems.append(f"{name} must be a finite number > 0, got {v!r}")
        if sorted(p for p, _ in self.aligner_scale) != ["backend", "frontend", "merged"] or \
                not all(isinstance(v, (int, float)) and v > 0 for _, v in self.aligner_scale):
            problems.append("aligner_scale needs a factor > 0 for each of merged, frontend, backend")
        for name in ("merged_ms", "backend_ms"):
            table = getattr(self, name)
            if len(table) < 2 or any(b[0] <= a[0] for a, b in zip(table, table[1:])):
                problems.append(f"{name} needs at least two (seconds, ms) rows in ascending seconds")
        if problems:
            raise ValueError("invalid unit costs: " + "; ".join(problems))

    def graph_ms(self, part: str, seconds: float) -> float:
        """ms of one call of a ``part`` ("merged", "backend", "frontend") graph of ``seconds``.

        Sizes between rows are interpolated; beyond the table they are extrapolated linearly
        from its last two rows (the 8 s graph: an assumption, recorded in ``sources``). Merged and
        back-end graphs are dynamic-shape models (x ``dynamic_scale``); the front end is fixed."""
        if part == "frontend":
            return self.frontend_ms
        if part not in ("merged", "backend"):
            raise ValueError(f"unknown encoder graph part {part!r}; accepted: merged, backend, frontend")
        return self._table_ms(self.merged_ms if part == "merged" else self.backend_ms, seconds) * self.dynamic_scale

    @staticmethod
    def _table_ms(table, seconds: float) -> float:
        for s, ms in table:
            if abs(s - seconds) < 1e-9:
                return ms
        (s0, m0), (s1, m1) = table[-2], table[-1]
        if seconds < table[0][0]:
            (s0, m0), (s1, m1) = table[0], table[1]
        else:
            for a, b in zip(table, table[1:]):
                if a[0] < seconds < b[0]:
                    (s0, m0), (s1, m1) = a, b
        return m0 + (m1 - m0) * (seconds - s0) / (s1 - s0)

    def aligner_graph_ms(self, part: str, seconds: float) -> float:
        """ms of one call of the aligner encoder's ``part`` graph of ``seconds``: the ASR graph's
        ms x the compute ratio of that part."""
        return self.graph_ms(part, seconds) * dict(self.aligner_scale)[part]

    def head_ms(self, slots: int) -> float:
        """ms of the aligner head on the host for ``slots`` rows."""
        return slots * HEAD_FLOP_PER_SLOT / (self.head_gflops * 1e9) * 1000.0


def unit_costs(soc: str, prefill_tok_s: Optional[float] = None, decoder_run_ms: float = DECODER_RUN_MS,
               rk3588_encoder_scale: float = RK3588_ENCODER_SCALE, prefill_source: str = "given",
               prefill: str = "published", dynamic_scale: float = DYNAMIC_SHAPE_SCALE) -> UnitCosts:
    """The unit costs of ``soc`` ("rk3576" W4A16_G128 or "rk3588" W8A8) with their sources.

    prefill: where the decoder's prefill rate comes from when ``prefill_tok_s`` is not given:
    "published" (default): Rockchip's benchmark, 128 prompt tokens / time to first token;
    "rtf-fit": on RK3576 the rate fitted to the reference design's published RTF
    (``RK3576_PREFILL_TOK_S_FIT``; RK3588 has no such fit and keeps the published rate).
    prefill_tok_s: override the rate (``prefill_source`` then says where it comes from).
    rk3588_encoder_scale: RK3588 encoder ms per RK3576 ms.
    dynamic_scale: encoder ms of the dynamic-shape models per fixed-shape ms (DYNAMIC_SHAPE_SCALE).
    """
    if soc not in SOCS:
        raise ValueError(f"unknown SoC {soc!r}; accepted: {', '.join(SOCS)}")
    if prefill not in PREFILL_CHOICES:
        raise ValueError(f"unknown prefill source {prefill!r}; accepted: {', '.join(PREFILL_CHOICES)}")
    quant, ttft_ms, decode = RKLLM_BENCHMARK[soc]
    bench = f"Rockchip rknn-llm benchmark {RKLLM_BENCHMARK_RELEASE}, Qwen3-0.6B {quant.upper()}"
    ref = "reference design's RK3576 table (fp16 RKNN, Qwen3-ASR-0.6B, clocks locked)"
    extrap = "8 s and other sizes beyond 5 s: linear from the 4 s and 5 s rows (assumed)"
    if soc == "rk3576":
        scale, enc_src = 1.0, f"{ref}; {extrap}"
    else:
        scale = rk3588_encoder_scale
        enc_src = (f"derived, no RK3588 table published: RK3576 table x {scale:g}. Both NPUs are 6 TOPS (int8) "
                   "in total (RK3588 3 cores x 2, RK3576 2 cores x 3) and the encoder runs on all cores by "
                   "default, so equal time is assumed; on one core RK3588 would be ~1.5x slower; "
                   f"uncertainty x1.0-1.5. {extrap}")
    if prefill_tok_s is not None:
        rate, pre_src = prefill_tok_s, prefill_source
    elif prefill == "rtf-fit" and soc == "rk3576":
        rate = RK3576_PREFILL_TOK_S_FIT
        pre_src = ("fitted: the rate at which the reference design's settings reproduce its published RTF "
                   "0.55-0.58 at 2-5 s chunks (fit_prefill_rate, value of the committed run)")
    else:
        rate = PUBLISHED_PREFILL_TOK_S[soc]
        pre_src = (f"{bench}: time to first token {ttft_ms:g} ms for a {TTFT_TOKENS}-token prompt, all counted "
                   "as prefill")
    return UnitCosts(
        soc=soc, decoder_quant=quant,
        merged_ms=tuple((s, ms * scale) for s, ms in REF_MERGED_MS), frontend_ms=REF_FRONTEND_MS * scale,
        backend_ms=tuple((s, ms * scale) for s, ms in REF_BACKEND_MS),
        prefill_tok_s=rate, decode_tok_s=decode, decoder_run_ms=decoder_run_ms, dynamic_scale=dynamic_scale,
        sources=(("encoder", enc_src),
                 ("dynamic shapes", f"merged and back-end graphs are dynamic-shape models (onnx2rknn's default): "
                                    f"x{dynamic_scale:g} the fixed-shape table, assumed (unmeasured: one compiled "
                                    f"program per declared shape; docs/board_checklist.md)"),
                 ("prefill", pre_src),
                 ("decode", f"{bench}: {decode:g} tokens/s"),
                 ("decoder run", f"{decoder_run_ms:g} ms per run, assumed (host mel, prompt embedding, "
                                 "rkllm_run setup on the CPU; not measured, 5-30 ms)"),
                 ("aligner encoder", "derived, no published figures: the ASR encoder graph of the same size x the "
                                     "ratio of their MACs counted from the two configs (board_budget): "
                                     + ", ".join(f"{p} x{v:.3f}" for p, v in ALIGNER_ENCODER_SCALE)
                                     + f"; assumed: NPU time proportional to MACs (the conv stem, "
                                       f"{100 * bb.stem_share(bb.ASR_AUDIO):.0f} % of the ASR graph's MACs, is the "
                                       "same in both; without it the ratio is "
                                     + f"{bb.transformer_flop_ratio():.2f})"),
                 ("aligner prefill", "the decoder's prefill rate: the aligner's LLM is Qwen3-0.6B-shaped, converted "
                                     "with the same quantisation; GET_LAST_HIDDEN_LAYER runs generate nothing "
                                     "(rknn-llm issue #278: 'Generate ... 1 token 0.00 ms')"),
                 ("aligner head", f"{HEAD_FLOP_PER_SLOT / 1e6:.2f} MFLOP per slot row (2 per word) at "
                                  f"{HEAD_GFLOPS:g} GFLOP/s on one CPU core, assumed: a seventh of a Cortex-A72/A76 "
                                  "core's fp32 NEON peak (2 x 128-bit FMA pipes, 16 FLOP/cycle at 2.2-2.4 GHz), "
                                  "and the 20 MB head read once per alignment")))
