#!/usr/bin/env python3
"""Board cost model: predicted wall time, RTF and caption latency on RK3576 / RK3588.

    PYTHONPATH=python .venv/bin/python scripts/board_model.py --model models/default --json build/board_model.json
    ... --aligner DIR   # with word timestamps and memory (board_words; docs/board.md section 8)

The model multiplies the compute accounting of a REAL run of our engine (any backend: per
chunk the encoder graphs run, the decoder's prefill tokens and decode steps, and when the
chunk's audio was complete) by per-SoC unit costs with stated sources (``unit_costs``):

    chunk ms = sum(encoder graph ms) + prefill_tokens / prefill rate
               + decode_tokens / decode rate + one decoder-run overhead

Serial: the encoder, then the decoder, chunk after chunk. Overlap (``overlap=True``): a
two-stage pipeline where the encoder of chunk n+1 runs while the decoder works on chunk n
(per step the max of the two stages instead of their sum once both are busy); this is an
upper bound on the gain, as the two share the NPU's memory bandwidth.

Wall time is for audio that is all there (a file); RTF = wall / audio seconds. Caption
latency is per chunk, in a live stream (audio arriving in real time): from the moment the
chunk's audio was complete (``ChunkWork.ready``, measured in the run) to the moment its
decoder run ends.

The decoder's unit costs are Rockchip's published benchmark (``RKLLM_BENCHMARK``); the
encoder's, the table of the reference design (docs/reference_design.md). Two of its published
figures disagree under these costs (docs/board.md, "Cost model"): its caption latency is
reproduced, its RTF is not. So a second, pessimistic RK3576 prefill rate is fitted
(``fit_prefill_rate``) at which its settings reproduce its published RTF;
``unit_costs(prefill="rtf-fit")`` uses it. No board SDK is imported here; the engine is
imported only by the functions that run it (``record_stream``, ``record_file``,
``record_one_pass``).

Word timestamps (``word_timestamps=True`` in the record functions): every alignment the run
made is recorded (``AlignWork``: the segment, the aligner encoder's graphs, the positions of
its one RKLLM prefill, its slot rows) and costs

    alignment ms = sum(ASR encoder graph ms x aligner/ASR compute ratio) + positions / prefill rate
                   + slot rows x 2 x 1024 x 5000 FLOP / host rate + one run overhead

in the decoder's stage, before the decoder run during which the engine made it (a stream
aligns a segment when it commits it). ``board_budget`` holds the compute ratio and the memory
budget of both models.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import math
import os
import statistics
import sys
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from qwen3asr.audio import SAMPLE_RATE

from .board import budget as bb

SOCS = ("rk3576", "rk3588")
FEED_SECONDS = 0.02  # piece size when a stream is fed to measure when each chunk became ready

# ----------------------------------------------------------------------------- unit costs
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
# (its size beyond the weights is the sum of the fixed files'; board_budget.GRAPH_MB), so each
# call runs a program compiled for its shape; rknnlite switches programs when the shape changes.
# DYNAMIC_SHAPE_SENSITIVITY is the slower case the report also shows (docs/board_checklist.md).
DYNAMIC_SHAPE_SCALE = 1.0
DYNAMIC_SHAPE_SENSITIVITY = 1.25

# Memory of the same benchmark rows (memory(MB) column; the context it was measured at is not stated).
# rockchip.md's 513 MB for RK3576 is the per-channel W4A16 row (512.71), not the W4A16_G128 one we run.
RKLLM_MEMORY_MB = {"rk3576": 545.35, "rk3588": 791.11}
# Word timestamps. The aligner's encoder has no published board figures: its graph costs the ASR
# encoder's graph of the same size x the ratio of their MACs (board_budget, from the two configs;
# assumed: NPU time proportional to MACs). Per part: the merged graph, the split front end (conv
# stem + conv_out of one chunk) and back end (the rest).
ALIGNER_ENCODER_SCALE = (("merged", bb.encoder_flop_ratio()), ("frontend", bb.part_flop_ratio("frontend")),
                         ("backend", bb.part_flop_ratio("backend")))
HEAD_GFLOPS = 5.0  # host fp32 rate of the aligner head's matmul (assumed, see unit_costs)
HEAD_FLOP_PER_SLOT = 2 * 1024 * bb.ALIGNER_CLASSES  # one slot row through the 5000 x 1024 head

PUBLISHED_RTF = {  # reference design, RK3576, clocks locked: chunk seconds -> (low, high) published
    2.0: (0.55, 0.58), 3.0: (0.55, 0.58), 4.0: (0.57, 0.57), 5.0: (0.55, 0.58)}
PUBLISHED_LATENCY_S = (1.8, 1.4)  # reference design at 4 s chunks: first chunk, later chunks
OTHERS = (  # published end-to-end RTF of other designs, for the comparison table
    ("reference design (RK3576, 4 s chunks, memory 2)", {"rk3576": "0.57"}),
    ("rkvoice-stream (RKNN 2/4/15 s buckets + RKLLM)", {"rk3576": "0.36-0.44", "rk3588": "0.23-0.34"}),
)


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


# ----------------------------------------------------------------------------- accounting
@dataclasses.dataclass(frozen=True)
class ChunkWork:
    """What the engine computed for one chunk (one decoder run)."""

    start: float  # s of the input where the chunk's audio starts
    end: float  # s where it ends
    ready: float  # s of input time at which the engine had all audio it needed to decode it
    graphs: Tuple[Tuple[str, float], ...]  # encoder calls in order: ("merged"|"backend"|"frontend", seconds)
    prefill_tokens: int  # decoder prompt positions
    decode_tokens: int  # decoder steps after the prefill (one generated token each)
    prefix_tokens: int = 0  # header + text prefix tokens in the assistant turn (part of prefill_tokens)


CHUNK_FIELDS = tuple(f.name for f in dataclasses.fields(ChunkWork))


@dataclasses.dataclass(frozen=True)
class AlignWork:
    """What the forced aligner computed for one segment's words (one alignment)."""

    start: float  # s of the input: the aligned audio
    end: float
    ready: float  # s of input time at which the segment's audio was complete (its chunk's ``ready``)
    after_runs: int  # ASR decoder runs done when it ran: it runs before run ``after_runs`` (== len(chunks): after all)
    graphs: Tuple[Tuple[str, float], ...]  # the aligner encoder's calls, as ChunkWork.graphs
    positions: int  # rows of its one RKLLM prefill: audio + 2 + the words' tokens and slots
    slots: int  # <timestamp> rows the host head scores (2 per word)

    @property
    def words(self) -> int:
        return self.slots // 2


ALIGN_FIELDS = tuple(f.name for f in dataclasses.fields(AlignWork))


@dataclasses.dataclass(frozen=True)
class Accounting:
    """The compute of one real run: its chunks in decoding order."""

    label: str  # what was run (settings, clip)
    audio_seconds: float  # input duration
    chunks: Tuple[ChunkWork, ...]
    live: bool  # ready times are those of a stream fed in real time (caption latency applies)
    system_tokens: int = 5  # prompt tokens of the empty system block (what a compact prompt drops)
    alignments: Tuple[AlignWork, ...] = ()  # word timestamps: the alignments, in the order they ran

    def __post_init__(self):
        if not (isinstance(self.audio_seconds, (int, float)) and self.audio_seconds > 0):
            raise ValueError(f"audio_seconds must be > 0, got {self.audio_seconds!r}")
        if not self.chunks:
            raise ValueError("an accounting needs at least one chunk")
        runs = [a.after_runs for a in self.alignments]
        if runs != sorted(runs) or any(not 0 <= r <= len(self.chunks) for r in runs):
            raise ValueError(f"alignment after_runs must be ascending in 0..{len(self.chunks)} (the chunks), "
                             f"got {runs}")

    def without_words(self) -> "Accounting":
        """The same run without its alignments (the transcription alone)."""
        return dataclasses.replace(self, alignments=())

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: Mapping) -> "Accounting":
        """From ``to_dict()`` output (e.g. a JSON file); ValueError names a missing or bad field."""
        need = ("label", "audio_seconds", "chunks", "live")
        if not isinstance(d, Mapping):
            raise ValueError(f"an accounting is a JSON object with fields {', '.join(need)}, got {type(d).__name__}")
        missing = [k for k in need if k not in d]
        if missing:
            raise ValueError(f"accounting is missing {', '.join(missing)}; fields: {', '.join(need)} "
                             "(optional: system_tokens)")
        chunks = []
        if not isinstance(d["chunks"], (list, tuple)):
            raise ValueError("accounting chunks must be a list of objects with fields " + ", ".join(CHUNK_FIELDS))
        for i, c in enumerate(d["chunks"]):
            if not isinstance(c, Mapping):
                raise ValueError(f"chunk {i} must be an object with fields {', '.join(CHUNK_FIELDS)}")
            miss = [k for k in CHUNK_FIELDS if k not in c and k != "prefix_tokens"]
            if miss:
                raise ValueError(f"chunk {i} is missing {', '.join(miss)}; chunk fields: {', '.join(CHUNK_FIELDS)}")
            graphs = _graphs(c["graphs"], f"chunk {i}")
            for k in ("prefill_tokens", "decode_tokens"):
                if not isinstance(c[k], int) or c[k] < 0:
                    raise ValueError(f"chunk {i}: {k} must be an integer >= 0, got {c[k]!r}")
            chunks.append(ChunkWork(start=float(c["start"]), end=float(c["end"]), ready=float(c["ready"]),
                                    graphs=graphs, prefill_tokens=c["prefill_tokens"],
                                    decode_tokens=c["decode_tokens"], prefix_tokens=int(c.get("prefix_tokens", 0))))
        aligns = []
        for i, a in enumerate(d.get("alignments") or ()):
            miss = [k for k in ALIGN_FIELDS if not isinstance(a, Mapping) or k not in a]
            if miss:
                raise ValueError(f"alignment {i} is missing {', '.join(miss)}; alignment fields: "
                                 f"{', '.join(ALIGN_FIELDS)}")
            for k in ("after_runs", "positions", "slots"):
                if not isinstance(a[k], int) or a[k] < 0:
                    raise ValueError(f"alignment {i}: {k} must be an integer >= 0, got {a[k]!r}")
            aligns.append(AlignWork(start=float(a["start"]), end=float(a["end"]), ready=float(a["ready"]),
                                    after_runs=a["after_runs"], graphs=_graphs(a["graphs"], f"alignment {i}"),
                                    positions=a["positions"], slots=a["slots"]))
        return Accounting(label=str(d["label"]), audio_seconds=float(d["audio_seconds"]), chunks=tuple(chunks),
                          live=bool(d["live"]), system_tokens=int(d.get("system_tokens", 5)),
                          alignments=tuple(aligns))


def _graphs(items, where: str) -> Tuple[Tuple[str, float], ...]:
    out = []
    for g in items:
        if len(g) != 2 or g[0] not in ("merged", "backend", "frontend"):
            raise ValueError(f"{where}: bad encoder graph {g!r}; expected [part, seconds] with part "
                             "merged, backend or frontend")
        out.append((str(g[0]), float(g[1])))
    return tuple(out)


def compact_prompt(acc: Accounting, header_tokens: int = 3) -> Accounting:
    """The same run with a compact prompt: no system block, no language header in the assistant turn.

    Saved per chunk: the empty system block (``acc.system_tokens``) and, on chunks whose
    assistant turn held text (prefix_tokens > 0, where a detected header is kept in front of
    the prefix), ``header_tokens`` (``language X<asr_text>`` is 3 tokens). Decode steps are
    left as they are. Only the cost is modelled: whether the model transcribes as well
    without those parts must be measured."""
    out = []
    for c in acc.chunks:
        saved = acc.system_tokens + (min(header_tokens, c.prefix_tokens) if c.prefix_tokens > 0 else 0)
        out.append(dataclasses.replace(c, prefill_tokens=max(0, c.prefill_tokens - saved),
                                       prefix_tokens=max(0, c.prefix_tokens - (saved - acc.system_tokens))))
    return dataclasses.replace(acc, label=acc.label + ", compact prompt", chunks=tuple(out), system_tokens=0)


# ----------------------------------------------------------------------------- prediction
@dataclasses.dataclass(frozen=True)
class ChunkPrediction:
    start: float  # s
    end: float
    encoder_ms: float
    prefill_ms: float
    decode_ms: float
    run_ms: float  # decoder-run overhead
    latency_s: Optional[float]  # live: chunk audio complete -> its text (None for offline runs)


@dataclasses.dataclass(frozen=True)
class Prediction:
    """Predicted board timings for one accounting on one SoC."""

    label: str
    soc: str
    overlap: bool  # encoder of chunk n+1 during the decoder of chunk n
    audio_seconds: float
    chunks: int
    encoder_s: float  # totals of the unit costs (s)
    prefill_s: float
    decode_s: float
    overhead_s: float
    wall_s: float  # all audio present at t = 0 (a file)
    latency_first_s: Optional[float]  # live stream: first chunk
    latency_median_s: Optional[float]  # median over the later chunks
    latency_max_s: Optional[float]
    per_chunk: Tuple[ChunkPrediction, ...]
    align_s: float = 0.0  # word timestamps: all alignments (part of wall_s)
    per_align: Tuple["AlignPrediction", ...] = ()

    @property
    def rtf(self) -> float:
        return self.wall_s / self.audio_seconds

    @property
    def words_latency_median_s(self) -> Optional[float]:
        """Live: median over the segments of their audio being complete -> their words."""
        lat = [a.latency_s for a in self.per_align if a.latency_s is not None]
        return statistics.median(lat) if lat else None

    @property
    def words_latency_max_s(self) -> Optional[float]:
        lat = [a.latency_s for a in self.per_align if a.latency_s is not None]
        return max(lat) if lat else None


@dataclasses.dataclass(frozen=True)
class AlignPrediction:
    """Predicted cost of one alignment (ms) and, live, when its words come (s after the segment's audio)."""

    start: float
    end: float
    encoder_ms: float  # the aligner's encoder graphs
    prefill_ms: float  # its one RKLLM prefill
    head_ms: float  # the host head on the slot rows
    run_ms: float  # run overhead
    latency_s: Optional[float]

    @property
    def total_ms(self) -> float:
        return self.encoder_ms + self.prefill_ms + self.head_ms + self.run_ms


def align_costs(a: AlignWork, costs: UnitCosts) -> Tuple[float, float, float, float]:
    """(encoder, prefill, head, run) ms of one alignment under ``costs``."""
    return (sum(costs.aligner_graph_ms(part, s) for part, s in a.graphs), a.positions / costs.prefill_tok_s * 1000.0,
            costs.head_ms(a.slots), costs.decoder_run_ms)


def _schedule(ready: Sequence[float], enc: Sequence[float], dec: Sequence[float], overlap: bool,
              before: Sequence[Sequence[float]] = ()) -> Tuple[List[float], List[float]]:
    """Finish times (s): of each chunk's decoder run, and of each alignment. Serial: one resource,
    encoder then decoder of each chunk. Overlap: encoder and decoder stages, chunk n's decoder after
    its encoder and after chunk n-1's decoder; chunk n+1's encoder after its audio and chunk n's
    encoder. ``before[n]``: alignments (s each) run in the decoder's stage just before chunk n's
    decoder run, as the engine aligns a segment when a decoder run commits it; ``before[len(enc)]``:
    after the last chunk (ready with it)."""
    before = list(before) or [[] for _ in range(len(enc) + 1)]
    done, aligned, t_enc, t_dec = [], [], 0.0, 0.0
    steps = list(zip(ready, enc, dec)) + [(ready[-1], 0.0, 0.0)]
    for n, (r, e, d) in enumerate(steps):
        if overlap:
            t_enc = max(r, t_enc) + e
            t_dec = max(t_enc, t_dec)
        else:
            t_dec = max(r, t_dec) + e
        for a in before[n]:
            t_dec += a
            aligned.append(t_dec)
        t_dec += d
        if n < len(enc):
            done.append(t_dec)
    return done, aligned


def predict(acc: Accounting, costs: UnitCosts, overlap: bool = False) -> Prediction:
    """Board timings of ``acc`` under ``costs`` (see the module docstring for the formula)."""
    if not isinstance(acc, Accounting):
        raise ValueError(f"predict needs an Accounting (Accounting.from_dict for JSON), got {type(acc).__name__}")
    per = []
    enc, dec = [], []
    for c in acc.chunks:
        e = sum(costs.graph_ms(part, s) for part, s in c.graphs)
        p = c.prefill_tokens / costs.prefill_tok_s * 1000.0
        g = c.decode_tokens / costs.decode_tok_s * 1000.0
        per.append((c, e, p, g, costs.decoder_run_ms))
        enc.append(e / 1000.0)
        dec.append((p + g + costs.decoder_run_ms) / 1000.0)
    parts = [align_costs(a, costs) for a in acc.alignments]
    before: List[List[float]] = [[] for _ in range(len(enc) + 1)]
    for a, x in zip(acc.alignments, parts):
        before[a.after_runs].append(sum(x) / 1000.0)
    done, aligned = _schedule([0.0] * len(enc), enc, dec, overlap, before)
    wall = max(done + aligned)
    lat: List[Optional[float]] = [None] * len(per)
    alat: List[Optional[float]] = [None] * len(parts)
    if acc.live:
        ready = [c.ready for c in acc.chunks]
        done, aligned = _schedule(ready, enc, dec, overlap, before)
        lat = [d - r for d, r in zip(done, ready)]
        alat = [t - a.ready for t, a in zip(aligned, acc.alignments)]
    chunks = tuple(ChunkPrediction(c.start, c.end, e, p, g, o, l) for (c, e, p, g, o), l in zip(per, lat))
    later = [x for x in lat[1:] if x is not None]
    return Prediction(
        label=acc.label, soc=costs.soc, overlap=overlap, audio_seconds=acc.audio_seconds, chunks=len(per),
        encoder_s=sum(x[1] for x in per) / 1000, prefill_s=sum(x[2] for x in per) / 1000,
        decode_s=sum(x[3] for x in per) / 1000, overhead_s=sum(x[4] for x in per) / 1000, wall_s=wall,
        latency_first_s=lat[0], latency_median_s=statistics.median(later) if later else None,
        latency_max_s=max(x for x in lat if x is not None) if acc.live else None, per_chunk=chunks,
        align_s=sum(sum(x) for x in parts) / 1000,
        per_align=tuple(AlignPrediction(a.start, a.end, *x, latency_s=lt)
                        for a, x, lt in zip(acc.alignments, parts, alat)))


# ----------------------------------------------------------------------------- calibration
def band_error(rtf: float, chunk_s: float) -> float:
    """Relative distance of ``rtf`` from the published band at ``chunk_s`` (0 inside it)."""
    if chunk_s not in PUBLISHED_RTF:
        raise ValueError(f"no published RTF for {chunk_s} s chunks; accepted: {', '.join(map(str, PUBLISHED_RTF))}")
    lo, hi = PUBLISHED_RTF[chunk_s]
    return rtf / hi - 1 if rtf > hi else (rtf / lo - 1 if rtf < lo else 0.0)


@dataclasses.dataclass(frozen=True)
class Fit:
    """The fitted RK3576 prefill rate and how the calibration runs come out with it."""

    prefill_tok_s: float
    rows: Tuple[Tuple[float, float, float], ...]  # (chunk s, predicted RTF, rate alone: RTF = band middle)

    def errors(self) -> Dict[float, float]:
        """Chunk seconds -> relative distance from the published band (0 inside it)."""
        return {s: band_error(p, s) for s, p, _ in self.rows}

    @property
    def worst_error(self) -> float:
        """Largest |distance from the published band| over the rows."""
        return max(abs(e) for e in self.errors().values())


def published_target(chunk_s: float) -> float:
    """The middle of the reference design's published RTF band at ``chunk_s``."""
    band_error(0.5, chunk_s)  # validates chunk_s
    lo, hi = PUBLISHED_RTF[chunk_s]
    return (lo + hi) / 2


def _rate_for(acc: Accounting, base: UnitCosts, target: float) -> float:
    """Prefill rate at which ``acc`` predicts ``target`` RTF (inf if other costs already exceed it)."""
    rest = predict(acc, dataclasses.replace(base, prefill_tok_s=1e12)).wall_s
    tokens = sum(c.prefill_tokens for c in acc.chunks)
    budget = target * acc.audio_seconds - rest
    return tokens / budget if budget > 0 else math.inf


def _golden(f, lo: float, hi: float) -> float:
    """Minimum of a unimodal f on [lo, hi]."""
    for _ in range(200):
        m1, m2 = lo + (hi - lo) * 0.382, lo + (hi - lo) * 0.618
        if f(m1) < f(m2):
            hi = m2
        else:
            lo = m1
    return (lo + hi) / 2


def fit_prefill_rate(runs: Mapping[float, Accounting], base: Optional[UnitCosts] = None) -> Fit:
    """Fit the RK3576 prefill rate to the reference design's published RTF.

    ``runs``: chunk seconds -> accounting of the reference design's settings at that chunk size.
    Published is a band, 0.55-0.58 over 2-5 s chunks (which size gave which value is not
    said) and 0.57 at 4 s; the loss is the sum of squared log distances from the band
    (0 inside it), then the squared log distance from the band's middle as a tie-break. The
    reference design runs fixed-shape encoders: the default ``base`` has dynamic_scale 1."""
    base = base or unit_costs("rk3576", dynamic_scale=1.0)
    for s in runs:
        band_error(0.5, s)

    def loss(log_rate: float) -> float:
        c = dataclasses.replace(base, prefill_tok_s=math.exp(log_rate))
        total = 0.0
        for s, a in runs.items():
            rtf = predict(a, c).rtf
            total += math.log1p(band_error(rtf, s)) ** 2 + 1e-6 * math.log(rtf / published_target(s)) ** 2
        return total

    rate = math.exp(_golden(loss, math.log(1.0), math.log(1e5)))
    fitted = dataclasses.replace(base, prefill_tok_s=rate)
    rows = tuple((s, predict(a, fitted).rtf, _rate_for(a, base, published_target(s)))
                 for s, a in sorted(runs.items()))
    return Fit(prefill_tok_s=rate, rows=rows)


def fit_prefill_to_latency(acc: Accounting, target_s: float, base: Optional[UnitCosts] = None) -> float:
    """Prefill rate at which the median caption latency of ``acc``'s later chunks is ``target_s``
    (the reference design's published 1.4 s at 4 s chunks); inf if unreachable."""
    base = base or unit_costs("rk3576", dynamic_scale=1.0)  # the reference design: fixed shapes
    if not acc.live:
        raise ValueError("latency needs a live accounting (record_stream)")

    def lat(rate: float) -> float:
        return predict(acc, dataclasses.replace(base, prefill_tok_s=rate)).latency_median_s

    if lat(1e9) > target_s:
        return math.inf
    lo, hi = 1.0, 1e9
    for _ in range(200):  # bisection in log rate; latency falls as the rate rises
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if lat(mid) > target_s else (lo, mid)
    return math.sqrt(lo * hi)


def rate_needed(acc: Accounting, base: UnitCosts, target_rtf: float, overlap: bool = False) -> float:
    """Smallest prefill rate (tok/s) at which ``acc`` reaches ``target_rtf``; inf if no rate does."""
    def rtf(rate: float) -> float:
        return predict(acc, dataclasses.replace(base, prefill_tok_s=rate), overlap).rtf

    if rtf(1e9) > target_rtf:
        return math.inf
    lo, hi = 1.0, 1e9
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if rtf(mid) > target_rtf else (lo, mid)
    return math.sqrt(lo * hi)


# ----------------------------------------------------------------------------- real runs
class _GraphLog:
    """Wraps an EncoderRunner and records every graph call as (part, seconds)."""

    def __init__(self, runner):
        self._runner = runner
        self.calls: List[Tuple[str, float]] = []

    def run_merged(self, variant, *args):
        self.calls.append(("merged", float(variant.seconds)))
        return self._runner.run_merged(variant, *args)

    def run_frontend(self, *args):
        self.calls.append(("frontend", 1.0))
        return self._runner.run_frontend(*args)

    def run_backend(self, variant, *args):
        self.calls.append(("backend", float(variant.seconds)))
        return self._runner.run_backend(variant, *args)

    def __getattr__(self, name):  # close() and anything else the backend asks of its runner
        return getattr(self._runner, name)


@contextlib.contextmanager
def graph_log(engine):
    """Record the encoder graphs ``engine`` runs (any backend whose encoder is an AudioEncoder)."""
    enc = engine.encoder
    log = _GraphLog(enc.runner)
    enc.runner = log
    try:
        yield log
    finally:
        enc.runner = log._runner


class _Counted:
    """Wraps an object and calls ``record(args)`` before each call of its method ``name``."""

    def __init__(self, inner, name: str, record):
        self._inner, self._name, self._record = inner, name, record

    def __getattr__(self, attr):
        if attr == self._name:
            def call(*args, **kw):
                self._record(args)
                return getattr(self._inner, attr)(*args, **kw)
            return call
        return getattr(self._inner, attr)

    def __call__(self, *args, **kw):  # a callable object (the embedding table)
        self._record(args)
        return self._inner(*args, **kw)


class AlignLog:
    """What the forced aligner of an engine computes while it is recorded (``align_log``).

    Attributes: works (the AlignWork of every alignment that ran; ``ready`` is filled in by
    the record functions), rows (distinct embedding rows the aligner looked up), graphs (its
    encoder's _GraphLog), runs (ASR decoder runs so far)."""

    def __init__(self):
        self.works: List[AlignWork] = []
        self.rows: set = set()
        self.runs = 0
        self.graphs: Optional[_GraphLog] = None
        self._scored: List[Tuple[int, int]] = []


@contextlib.contextmanager
def align_log(engine):
    """Record every alignment ``engine``'s aligner makes (loads the aligner) and count the engine's
    decoder runs, so that each alignment knows before which run it came."""
    log = AlignLog()
    aligner = engine.aligner
    runner, scorer, table = aligner.encoder.runner, aligner.scorer, aligner.embeddings
    log.graphs = _GraphLog(runner)
    decode, align = engine.decode, aligner.align

    def counted_decode(*args, **kw):
        try:
            return decode(*args, **kw)
        finally:
            log.runs += 1

    def recorded_align(audio, text, language, *, sample_rate=None, offset=0.0):
        n_graphs, n_scored = len(log.graphs.calls), len(log._scored)
        out = align(audio, text, language, sample_rate=sample_rate, offset=offset)
        if len(log._scored) > n_scored:  # a text without words is not scored, nor encoded
            from qwen3asr.audio import prepare_audio

            positions, slots = log._scored[-1]
            seconds = prepare_audio(audio, sample_rate).shape[0] / SAMPLE_RATE
            log.works.append(AlignWork(start=float(offset), end=float(offset) + seconds, ready=float(offset) + seconds,
                                       after_runs=log.runs, graphs=tuple(log.graphs.calls[n_graphs:]),
                                       positions=positions, slots=slots))
        return out

    shadowed = [(obj, name, obj.__dict__.get(name)) for obj, name in ((engine, "decode"), (aligner, "align"))]
    aligner.encoder.runner = log.graphs
    aligner.scorer = _Counted(scorer, "score", lambda a: log._scored.append((len(a[0]), len(a[1]))))
    aligner.embeddings = _Counted(table, "__call__", lambda a: log.rows.update(int(i) for i in a[0]))
    engine.decode, aligner.align = counted_decode, recorded_align
    try:
        yield log
    finally:
        aligner.encoder.runner, aligner.scorer, aligner.embeddings = runner, scorer, table
        for obj, name, before in shadowed:  # back to the method, or to an outer log's wrapper
            if before is None:
                delattr(obj, name)
            else:
                setattr(obj, name, before)


def _alignments(log: Optional[AlignLog], chunks: Sequence[ChunkWork]) -> Tuple[AlignWork, ...]:
    """The recorded alignments, each ready when the chunk that ends its segment was (its own end
    if none does: an offline run's chunks are all ready at 0)."""
    if log is None:
        return ()
    out = []
    for a in log.works:
        ends = [c.ready for c in chunks if abs(c.end - a.end) < 1e-3]
        out.append(dataclasses.replace(a, ready=ends[0] if ends else a.ready))
    return tuple(out)


def chunk_works(chunks, calls, ready: Sequence[float]) -> Tuple[ChunkWork, ...]:
    """ChunkStats of a session + the recorded graph calls -> ChunkWork (checks they agree)."""
    if sum(c.encoder_calls for c in chunks) != len(calls):
        raise RuntimeError(f"internal: {len(calls)} encoder calls recorded, the session counted "
                           f"{sum(c.encoder_calls for c in chunks)}")
    out, i = [], 0
    for c, r in zip(chunks, ready):
        g = tuple(calls[i:i + c.encoder_calls])
        i += c.encoder_calls
        out.append(ChunkWork(start=c.start, end=c.end, ready=r, graphs=g, prefill_tokens=int(c.prefill_tokens),
                             decode_tokens=int(c.decode_tokens), prefix_tokens=int(c.prefix_tokens)))
    return tuple(out)


def record_stream(engine, pcm, label: str, feed_seconds: float = FEED_SECONDS, **stream_options):
    """Stream (n,) float32 16 kHz ``pcm`` in real-time order through ``engine.create_stream(**stream_options)``
    in pieces of ``feed_seconds``; returns (Accounting, StreamResult). A chunk's ``ready`` is the
    input time at the end of the piece whose feeding decoded it (finish(): the end of the audio)."""
    step = max(1, int(round(feed_seconds * SAMPLE_RATE)))
    ready: List[float] = []
    with _recording(engine, bool(stream_options.get("word_timestamps"))) as (log, words):
        session = engine.create_stream(**stream_options)
        for a in range(0, pcm.shape[0], step):
            r = session.feed_audio(pcm[a:a + step])
            t = min(pcm.shape[0], a + step) / SAMPLE_RATE
            ready.extend([t] * (len(r.chunks) - len(ready)))
        r = session.finish()
    total = pcm.shape[0] / SAMPLE_RATE
    ready.extend([total] * (len(r.chunks) - len(ready)))
    chunks = chunk_works(r.chunks, log.calls, ready)
    return Accounting(label=label, audio_seconds=total, chunks=chunks, live=True, system_tokens=system_tokens(engine),
                      alignments=_alignments(words, chunks)), r


@contextlib.contextmanager
def _recording(engine, words: bool):
    """(graph log of the ASR encoder, align log or None without ``words``)."""
    with graph_log(engine) as log:
        if not words:
            yield log, None
            return
        with align_log(engine) as alog:
            yield log, alog


def record_file(engine, pcm, label: str, chunk_size: float = 30.0, memory_num: int = 2, rollback_tokens: int = 5,
                max_new_tokens: int = 256, vad=True, word_timestamps: bool = False):
    """A file the way ``engine.transcribe(pcm, vad=..., chunk_size=...)`` decodes it (qwen3asr.longform:
    a StreamSession with the clip's mel ceiling, fed in chunk-size pieces); returns (Accounting, StreamResult).
    transcribe_long returns totals only, so the session is run here with the same options."""
    from qwen3asr.longform import clip_ceiling
    from qwen3asr.streaming import StreamOptions, StreamSession

    opts = StreamOptions(chunk_size=chunk_size, memory_num=memory_num, rollback_tokens=rollback_tokens,
                         max_new_tokens=max_new_tokens, vad=vad, word_timestamps=word_timestamps)
    with _recording(engine, word_timestamps) as (log, words):
        session = StreamSession(engine, opts, mel_ceiling=clip_ceiling(pcm, engine.n_mels))
        for a in range(0, pcm.shape[0], opts.chunk_samples):
            session.feed_audio(pcm[a:a + opts.chunk_samples])
        r = session.finish()
    chunks = chunk_works(r.chunks, log.calls, [0.0] * len(r.chunks))
    return Accounting(label=label, audio_seconds=pcm.shape[0] / SAMPLE_RATE, chunks=chunks, live=False,
                      system_tokens=system_tokens(engine),
                      alignments=tuple(dataclasses.replace(a, ready=0.0) for a in _alignments(words, ()))), r


def record_one_pass(engine, pcm, label: str, max_new_tokens: int = 256, word_timestamps: bool = False):
    """The whole clip in one decoder pass (``engine.transcribe(pcm, one_pass=True)``), with its
    alignment after it when ``word_timestamps``; returns (Accounting, Transcription)."""
    with _recording(engine, word_timestamps) as (log, words):
        t = engine.transcribe(pcm, max_new_tokens=max_new_tokens, one_pass=True, word_timestamps=word_timestamps)
    s = t.stats
    total = pcm.shape[0] / SAMPLE_RATE
    work = ChunkWork(start=0.0, end=total, ready=total, graphs=tuple(log.calls), prefill_tokens=int(s.prefill_tokens),
                     decode_tokens=int(s.decode_tokens))
    return Accounting(label=label, audio_seconds=total, chunks=(work,), live=False,
                      system_tokens=system_tokens(engine), alignments=_alignments(words, (work,))), t


def system_tokens(engine) -> int:
    """Prompt tokens of the empty system block (``<|im_start|>system\\n<|im_end|>\\n``)."""
    return len(engine.tokenizer.encode("<|im_start|>system\n<|im_end|>\n"))


def joined_speech(pcm, clip: str = "long_mixed.wav", transcripts: Optional[str] = None):
    """Continuous speech: the reference speech segments of ``clip`` (audio/transcripts.json) joined
    with no pauses, as scripts/eval_streaming.py --robustness makes it."""
    import numpy as np

    from . import REPO_ROOT

    path = transcripts or os.path.join(REPO_ROOT, "audio", "transcripts.json")
    with open(path, encoding="utf-8") as f:
        clips = {c["file"]: c for c in json.load(f)["clips"]}
    if clip not in clips or "segments" not in clips[clip]:
        raise ValueError(f"{path} has no speech segments for {clip!r}")
    segs = clips[clip]["segments"]
    return np.concatenate([pcm[int(s["start"] * SAMPLE_RATE):int(s["end"] * SAMPLE_RATE)] for s in segs])


# ----------------------------------------------------------------------------- report
def _f(x: Optional[float], fmt: str = ".2f") -> str:
    return "-" if x is None else f"{x:{fmt}}"


def prediction_table(preds: Iterable[Prediction]) -> str:
    """Markdown table in the format bench_board.py prints measurements in."""
    lines = ["| run | SoC | overlap | audio s | chunks | encoder s | prefill s | decode s | overhead s | wall s | RTF "
             "| latency first s | latency median s | latency max s |", "|" + "---|" * 14]
    for p in preds:
        lines.append(f"| {p.label} | {p.soc} | {'yes' if p.overlap else 'no'} | {p.audio_seconds:.1f} | {p.chunks} | "
                     f"{p.encoder_s:.2f} | {p.prefill_s:.2f} | {p.decode_s:.2f} | {p.overhead_s:.2f} | {p.wall_s:.2f} "
                     f"| {p.rtf:.3f} | {_f(p.latency_first_s)} | {_f(p.latency_median_s)} | {_f(p.latency_max_s)} |")
    return "\n".join(lines)


def accounting_summary(acc: Accounting) -> str:
    n = len(acc.chunks)
    pre = sum(c.prefill_tokens for c in acc.chunks)
    dec = sum(c.decode_tokens for c in acc.chunks)
    graphs: Dict[str, int] = {}
    for c in acc.chunks:
        for part, s in c.graphs:
            key = f"{part} {s:g} s"
            graphs[key] = graphs.get(key, 0) + 1
    g = ", ".join(f"{v} x {k}" for k, v in sorted(graphs.items()))
    return (f"{acc.label}: {acc.audio_seconds:.1f} s, {n} decoder runs, encoder calls {g}; prefill {pre} tokens "
            f"({pre / acc.audio_seconds:.1f}/s), decode {dec} ({dec / acc.audio_seconds:.2f}/s)")


def _load_audio(path: str):
    from qwen3asr.audio import prepare_audio

    return prepare_audio(path)


def build_report(model: str, audio: str, threads: Optional[int] = None, aligner: Optional[str] = None) -> dict:
    """All runs and predictions of docs/board.md "Cost model" (runs the engine on the CPU backend).
    With an aligner (``aligner``, else the engine's default one), the file and stream runs are
    made with word timestamps and the report gains the "words" section (board_words); without,
    r["words"] is None."""
    from qwen3asr import Qwen3ASREngine

    engine = Qwen3ASREngine(model, backend="onnx", threads=threads, aligner=aligner)
    words = engine.aligner_dir is not None
    pcm = _load_audio(audio)
    name = os.path.basename(audio)
    joined = joined_speech(pcm, name)
    r: dict = {"model": model, "audio": name}

    # 1. calibration: the reference design's settings (memory 2, rollback 2, official prompt,
    #    each chunk encoded once, no pause rules, no VAD)
    ref = dict(memory_num=2, rollback_tokens=2, pause_db=None)
    calib = {cs: record_stream(engine, pcm, f"reference settings, {cs:g} s chunks, {name}", chunk_size=cs, **ref)[0]
             for cs in sorted(PUBLISHED_RTF)}
    calib_joined = {cs: record_stream(engine, joined, f"reference settings, {cs:g} s chunks, continuous speech",
                                      chunk_size=cs, **ref)[0] for cs in sorted(PUBLISHED_RTF)}
    fit = fit_prefill_rate(calib)
    fit_joined = fit_prefill_rate(calib_joined)
    costs = {"rk3576": unit_costs("rk3576"), FITTED: unit_costs("rk3576", prefill_tok_s=fit.prefill_tok_s,
             prefill_source=("fitted in this run: the rate at which the reference design's settings reproduce "
                             "its published RTF 0.55-0.58 at 2-5 s chunks (fit_prefill_rate)")),
             "rk3588": unit_costs("rk3588")}
    ref4 = predict(calib[4.0], costs[FITTED])
    lat_rate = fit_prefill_to_latency(calib[4.0], PUBLISHED_LATENCY_S[1], costs[FITTED])
    pub4 = predict(calib[4.0], costs["rk3576"])
    r["published_costs_check"] = {
        "latency_4s": {"first": pub4.latency_first_s, "median_later": pub4.latency_median_s,
                       "published": PUBLISHED_LATENCY_S},
        "rows": [{"chunk_s": cs, "predicted_rtf": predict(a, costs["rk3576"]).rtf, "published": PUBLISHED_RTF[cs],
                  "residual_vs_middle": published_target(cs) - predict(a, costs["rk3576"]).rtf}
                 for cs, a in sorted(calib.items())],
        "continuous_latency_4s": {"first": predict(calib_joined[4.0], costs["rk3576"]).latency_first_s,
                                  "median_later": predict(calib_joined[4.0], costs["rk3576"]).latency_median_s},
    }
    r["fit"] = {
        "prefill_tok_s": fit.prefill_tok_s, "worst_error": fit.worst_error,
        "rows": [{"chunk_s": cs, "predicted_rtf": p, "published": PUBLISHED_RTF[cs], "error_vs_band": fit.errors()[cs],
                  "error_vs_middle": p / published_target(cs) - 1, "rate_alone": alone}
                 for cs, p, alone in fit.rows],
        "continuous_prefill_tok_s": fit_joined.prefill_tok_s, "continuous_worst_error": fit_joined.worst_error,
        "continuous_rows": [{"chunk_s": cs, "predicted_rtf": p} for cs, p, _ in fit_joined.rows],
        "decoder_run_sensitivity": {f"{ms:g} ms": fit_prefill_rate(calib, unit_costs("rk3576", decoder_run_ms=ms))
                                    .prefill_tok_s for ms in (0.0, 30.0)},
        "latency_4s": {"first": ref4.latency_first_s, "median_later": ref4.latency_median_s,
                       "published": PUBLISHED_LATENCY_S},
        "latency_fit_prefill_tok_s": lat_rate,
        "latency_fit_rtf_4s": predict(calib[4.0], dataclasses.replace(costs[FITTED], prefill_tok_s=lat_rate)).rtf,
    }
    r["unit_costs"] = {k: dataclasses.asdict(v) for k, v in costs.items()}

    # 2. our defaults: files (one pass; VAD-first 30 s, memory 2, rollback 5), streams (4 s,
    #    memory 2, rollback 2, pause rules), on the clip and on continuous speech
    #    (with an aligner these runs align every segment: their ASR work is the same, the
    #    alignments are left out here and predicted in the "words" section)
    with contextlib.ExitStack() as stack:
        every = stack.enter_context(align_log(engine)) if words else None  # distinct rows over all runs
        one_pass = record_one_pass(engine, pcm, f"file, one pass, {name}")[0]
        with_words = [record_file(engine, pcm, f"file, VAD-first, {name}", word_timestamps=words)[0],
                      record_stream(engine, pcm, f"stream defaults, {name}", word_timestamps=words)[0],
                      record_stream(engine, joined, "stream defaults, continuous speech", word_timestamps=words)[0]]
        clips: List[Accounting] = []
        if words:
            from . import REPO_ROOT, board_words

            clips = board_words.clip_runs(engine, os.path.join(REPO_ROOT, "audio"))
            r["words"] = board_words.build(name, with_words[0], one_pass, *with_words[1:], clips,
                                           bb.import_rss_mb(), len(every.rows), engine.aligner_dir)
        else:
            r["words"] = None
    from . import REPO_ROOT, board_finals

    finals = board_finals.runs(engine, os.path.join(REPO_ROOT, "audio"))
    r["finals"] = board_finals.build(finals)
    ours = [one_pass] + [a.without_words() for a in with_words]
    r["defaults"] = []
    for a in ours:
        row = {"run": a.label}
        for name, c in costs.items():
            for ov in (False, True):
                p = predict(a, c, ov)
                key = f"{name}_{'overlap' if ov else 'serial'}"
                row[key] = {"rtf": p.rtf, "wall_s": p.wall_s, "latency_first_s": p.latency_first_s,
                            "latency_median_s": p.latency_median_s, "latency_max_s": p.latency_max_s}
        r["defaults"].append(row)
    r["defaults_table"] = prediction_table([predict(a, costs[soc], ov) for a in ours for soc in SOCS
                                            for ov in (False, True)])  # published costs

    # 3. streaming settings for continuous speech on RK3576
    r["grid"] = []
    grid_accs = []
    for cs in (2.0, 3.0, 4.0, 5.0, 8.0):
        for mem in (1, 2):
            acc = record_stream(engine, joined, f"continuous speech, {cs:g} s, memory {mem}", chunk_size=cs,
                                memory_num=mem, rollback_tokens=2)[0]
            grid_accs.append(acc)
            for compact in (False, True):
                a = compact_prompt(acc) if compact else acc
                serial, over = predict(a, costs["rk3576"]), predict(a, costs["rk3576"], True)
                r["grid"].append({
                    "chunk_s": cs, "memory": mem, "prompt": "compact" if compact else "official",
                    "rtf_serial": serial.rtf, "rtf_overlap": over.rtf, "latency_median_s": serial.latency_median_s,
                    "latency_median_overlap_s": over.latency_median_s,
                    "fitted_rtf_serial": predict(a, costs[FITTED]).rtf,
                    "fitted_rtf_overlap": predict(a, costs[FITTED], True).rtf,
                    "rate_for": {f"{t:.2f}_{'overlap' if ov else 'serial'}": rate_needed(a, costs["rk3576"], t, ov)
                                 for t in (0.30, 0.25) for ov in (False, True)}})
    r["accountings"] = {a.label: a.to_dict() for a in list(calib.values()) + list(calib_joined.values())
                        + [one_pass] + with_words + clips + grid_accs + [a for _, *pair in finals for a in pair]}
    r["summaries"] = [accounting_summary(a) for a in list(calib.values()) + list(calib_joined.values()) + ours
                      + grid_accs]
    return r


def _print_report(r: dict) -> None:
    f = r["fit"]
    print("## Calibration: the reference design's settings (4 runs, one per chunk size)\n")
    print("| chunk s | predicted RTF | published | error vs published | vs band middle "
          "| prefill tok/s fitting this size alone (band middle) |")
    print("|---|---|---|---|---|---|")
    for row in f["rows"]:
        lo, hi = row["published"]
        pub = f"{lo:.2f}" if lo == hi else f"{lo:.2f}-{hi:.2f}"
        print(f"| {row['chunk_s']:g} | {row['predicted_rtf']:.3f} | {pub} | {100 * row['error_vs_band']:+.1f} % "
              f"| {100 * row['error_vs_middle']:+.1f} % | {row['rate_alone']:.1f} |")
    lat = f["latency_4s"]
    print(f"\nfitted RK3576 prefill: {f['prefill_tok_s']:.1f} tok/s (worst error {100 * f['worst_error']:.1f} %); "
          f"fitted on continuous speech instead: {f['continuous_prefill_tok_s']:.1f} tok/s (worst "
          f"{100 * f['continuous_worst_error']:.1f} %); decoder-run overhead "
          + ", ".join(f"{k}: {v:.1f}" for k, v in f["decoder_run_sensitivity"].items()) + " tok/s")
    print(f"latency at 4 s chunks: predicted first {lat['first']:.2f} s, later (median) {lat['median_later']:.2f} s; "
          f"published {lat['published'][0]} / {lat['published'][1]} s. Prefill rate for a 1.4 s median: "
          f"{f['latency_fit_prefill_tok_s']:.1f} tok/s, which predicts RTF {f['latency_fit_rtf_4s']:.3f} at 4 s\n")
    pc = r["published_costs_check"]
    print("## Rockchip's published decoder costs against the reference design's figures\n")
    print("| chunk s | predicted RTF | published | published minus predicted |")
    print("|---|---|---|---|")
    for row in pc["rows"]:
        lo, hi = row["published"]
        pub = f"{lo:.2f}" if lo == hi else f"{lo:.2f}-{hi:.2f}"
        print(f"| {row['chunk_s']:g} | {row['predicted_rtf']:.3f} | {pub} | {row['residual_vs_middle']:+.3f} |")
    lat, cl = pc["latency_4s"], pc["continuous_latency_4s"]
    print(f"\nlatency at 4 s chunks: predicted first {lat['first']:.2f} s, later (median) {lat['median_later']:.2f} s "
          f"(continuous speech {cl['first']:.2f} / {cl['median_later']:.2f} s); published {lat['published'][0]} / "
          f"{lat['published'][1]} s\n")
    print("## Unit costs\n")
    print("| costs | merged encoder ms (2/3/4/5/8 s) | prefill tok/s | decode tok/s | decoder run ms |")
    print("|---|---|---|---|---|")
    for name, c in r["unit_costs"].items():
        uc = UnitCosts(**{k: (tuple(tuple(x) for x in v) if isinstance(v, list) else v) for k, v in c.items()})
        enc = " / ".join(f"{uc.graph_ms('merged', s):.0f}" for s in (2, 3, 4, 5, 8))
        print(f"| {name} | {enc} | {uc.prefill_tok_s:.1f} | {uc.decode_tok_s:g} | {uc.decoder_run_ms:g} |")
    for name, c in r["unit_costs"].items():
        for k, v in c["sources"]:
            print(f"- {name} {k}: {v}")
    print("\n## Our defaults (RTF serial / overlap; caption latency first / median / max s, serial)\n")
    print("| run | RK3576 RTF | RK3576 latency | RK3576 RTF, RTF-fitted prefill | RK3576 latency, RTF-fitted "
          "| RK3588 RTF | RK3588 latency |")
    print("|---|---|---|---|---|---|---|")
    for row in r["defaults"]:
        cells = []
        for name in r["unit_costs"]:
            s, o = row[f"{name}_serial"], row[f"{name}_overlap"]
            cells.append(f"{s['rtf']:.3f} / {o['rtf']:.3f}")
            cells.append("-" if s["latency_median_s"] is None else
                         f"{s['latency_first_s']:.2f} / {s['latency_median_s']:.2f} / {s['latency_max_s']:.2f}")
        print(f"| {row['run']} | " + " | ".join(cells) + " |")
    for name, pub in OTHERS:
        print(f"| {name}, published | {pub.get('rk3576', '-')} | - | - | - | {pub.get('rk3588', '-')} | - |")
    print("\n" + r["defaults_table"] + "\n")
    print("## Continuous speech on RK3576: settings (rollback 2, pause rules on)\n")
    print("| chunk s | memory | prompt | RTF serial / overlap | latency median s serial / overlap "
          "| RTF-fitted prefill: RTF serial / overlap "
          "| prefill tok/s for RTF 0.30 serial / overlap | for 0.25 serial / overlap |")
    print("|---|---|---|---|---|---|---|---|")
    for g in r["grid"]:
        q = g["rate_for"]
        print(f"| {g['chunk_s']:g} | {g['memory']} | {g['prompt']} | {g['rtf_serial']:.3f} / {g['rtf_overlap']:.3f} "
              f"| {g['latency_median_s']:.2f} / {g['latency_median_overlap_s']:.2f} "
              f"| {g['fitted_rtf_serial']:.3f} / {g['fitted_rtf_overlap']:.3f} "
              f"| {q['0.30_serial']:.0f} / {q['0.30_overlap']:.0f} "
              f"| {q['0.25_serial']:.0f} / {q['0.25_overlap']:.0f} |")
    print("\n## Accountings (bundled model on the CPU: only these counts feed the model)\n")
    for s in r["summaries"]:
        print("-", s)
    from . import board_words

    board_words.print_section(r.get("words"))
    from . import board_finals

    board_finals.print_section(r.get("finals"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/default", help="bundle to run on the CPU (default %(default)s)")
    ap.add_argument("--audio", default="audio/long_mixed.wav", help="clip with speech segments in "
                    "audio/transcripts.json (default %(default)s)")
    ap.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads")
    ap.add_argument("--aligner", default=None, help="forced-aligner bundle whose runs give the word-timestamp counts "
                    "(default: $QWEN3ASR_ALIGNER, else the bundled demo aligner; none: no word-timestamp section)")
    ap.add_argument("--accounting", help="instead: predict a saved accounting (JSON from --json or bench_board.py)")
    ap.add_argument("--soc", default="rk3576", help=f"with --accounting: {', '.join(SOCS)}")
    ap.add_argument("--prefill", default="published", help="with --accounting: the decoder prefill rate, "
                    "'published' (Rockchip's benchmark) or 'rtf-fit' (RK3576: fitted to the reference design's RTF)")
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        if args.accounting:
            with open(args.accounting, encoding="utf-8") as f:
                data = json.load(f)
            items = data["accountings"].values() if "accountings" in data else [data]
            accs = [Accounting.from_dict(d) for d in items]
            costs = unit_costs(args.soc, prefill=args.prefill)
            print(prediction_table([predict(a, costs, ov) for a in accs for ov in (False, True)]))
            return 0
        try:
            import qwen3asr  # noqa: F401
        except ImportError:
            print("error: the qwen3asr package is not importable: run with PYTHONPATH=python or after "
                  "pip install -e .", file=sys.stderr)
            return 2
        report = build_report(args.model, args.audio, args.threads, args.aligner)
    except (ValueError, OSError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _print_report(report)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
