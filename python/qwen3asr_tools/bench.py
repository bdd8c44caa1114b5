#!/usr/bin/env python3
"""Speed of the ONNX Runtime CPU backend against the official PyTorch model, in one process.

    python scripts/bench.py --preset 0.6b --runs 5 --threads 2 --json build/bench.json
    python scripts/bench.py --checkpoint CKPT --bundle BUNDLE --audio FILE --seconds 3

Measured for the official fp32 model (``qwen-asr`` transformers code), for each decoder
dtype of the bundle (fp32, int8, int4) and for the bundle's encoder, interleaved run by run
so that all sides see the same machine load:

- encoder: ms for the clip (official: the audio tower alone; ours: the merged encoder graph of
  the smallest fitting duration, host-side masks included), and ms per audio second. The
  encoder graph does not depend on the decoder dtype, so it is timed once per round as its
  own row (``onnx-encoder``, run after the decoders, not right after the official model);
- prefill: the prompt (audio embeddings spliced in) through the decoder with a KV cache,
  tokens/s (official: one thinker forward with ``use_cache=True``; ours: ``Generation`` prefill);
- decode: a fixed number of greedy single-token steps with the KV cache, end of sequence ignored,
  tokens/s (official: thinker forwards with ``past_key_values``; ours: ``Generation.run``).

Memory roofline (``roofline`` in the report, printed under the table): each round also times a
streaming read of ``READ_PROBE_MIB`` with ``--threads`` threads (numpy reductions, which run at
the same rate whatever the reduction: the read is the limit), and each quantised decoder row
gets its bytes per decode step (the graph's weights, rotary tables left out, plus the KV rows
read at the run's mean context), the decode rate that bandwidth would allow and the measured
fraction of it.

``--spin-wait-rows`` adds a twin of every onnx row whose ONNX Runtime threads spin before they
sleep (``Qwen3ASREngine(spin_wait=True)``), named ``...+spin``.

Every system's run is followed by ``SETTLE_S`` of idle time before the next one (or the round's
read probe) starts: threads that spin after their work (a spinning session's worker for about
30 ms, PyTorch's OpenMP threads for about 10) otherwise slow whatever is timed next, by ~15 % for
an encoder run right after a spinning decode and ~8 % right after the official model
(docs/benchmarks.md). Each row gets the same gap, so none starts on busier cores than another.

Prompt-prefix reuse (``--reuse-rows``, on by default; ``--reuse-only`` skips everything else):
the same work on one engine, its decoder keeping prefix KV caches (qwen3asr.PrefixCacheOptions())
or not (max_entries=0) by turns, so both sides run the same sessions and weights; interleaved run
by run, the side that goes first alternating from round to round:

- long context: one request for the clip with a 180-token context (50 Home Assistant-style
  names, ``HA_CONTEXT``): ms per request (mel + encoder + prefill + decode), the prefill's share
  without reuse, and the ratio without / with (> 1 is the gain);
- stream: ``--stream-seconds`` of audio through ``create_stream()`` at the default streaming
  settings (4 s chunks, memory 2, rollback 2), ms per chunk, with the default empty context and
  with the 180-token one.

Random weights rarely end early, so both sides cap generation at ``--decode-tokens`` (the
reuse does not change the tokens: they are the same with and without it, checked every run).

Warm-up runs come first and are not counted; the table gives the median with the min..max
spread and each of our numbers as a ratio of the official median of the same run (> 1 is
faster). ``--preset`` builds a random-weight checkpoint with the official code into build/
and exports a bundle from it (only the 3 s merged encoder) when they are missing.
Random weights give the real shapes and costs, never meaningful text.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import platform
import statistics
import sys
import time
from typing import Callable, Optional, Sequence

import numpy as np

from qwen3asr.audio import SAMPLE_RATE, prepare_audio
from qwen3asr.encoder import tokens_for_frames
from qwen3asr.mel import log_mel

from . import REPO_ROOT as ROOT

log = logging.getLogger("bench")

DEFAULT_AUDIO = os.path.join(ROOT, "audio", "long_mixed.wav")
AUDIO_OFFSET_S = 2.0  # skip the clip's leading silence
DTYPES = ("fp32", "int8", "int4")
OFFICIAL = "official-fp32"
READ_PROBE_MIB = 512  # streaming-read probe size: larger than the caches' share of this machine
SETTLE_S = 0.1  # idle after each timed run: spinning threads of the last system stop before the next is timed
# 50 device and area names as a Home Assistant satellite would pass for biasing (about 180
# tokens with the Qwen tokenizer; the exact count is in the report)
HA_NAMES = (
    "Kitchen Light", "Living Room Lamp", "Dining Table Light", "Hallway Ceiling", "Porch Light", "Garage Door",
    "Front Door Lock", "Back Door Lock", "Bedroom Fan", "Guest Room Heater", "Office Desk Lamp", "Bathroom Mirror",
    "Laundry Dryer", "Washing Machine", "Dishwasher", "Coffee Maker", "Kettle", "Toaster Plug", "Fridge Sensor",
    "Freezer Alarm", "Attic Fan", "Basement Dehumidifier", "Garden Sprinkler", "Pool Pump", "Patio Heater",
    "Driveway Gate", "Doorbell Camera", "Nursery Monitor", "Kids Room Nightlight", "Master Bedroom Blinds",
    "Living Room Curtains", "TV Backlight", "Soundbar", "Hallway Thermostat", "Upstairs Thermostat",
    "Air Purifier", "Robot Vacuum", "Aquarium Light", "Christmas Tree", "Shed Light", "Greenhouse Vent",
    "Bike Charger", "Car Charger", "Solar Inverter", "Water Heater", "Smoke Detector", "Window Sensor",
    "Motion Sensor", "Reading Lamp", "Balcony Light")
HA_CONTEXT = ", ".join(HA_NAMES)


@dataclasses.dataclass(frozen=True)
class Spread:
    """Median and range of one measured quantity over the counted runs."""

    median: float
    min: float
    max: float
    values: tuple  # every counted run, in order

    @staticmethod
    def of(values: Sequence[float]) -> "Spread":
        v = tuple(float(x) for x in values)
        return Spread(statistics.median(v), min(v), max(v), v)


@dataclasses.dataclass(frozen=True)
class RunTimes:
    """One run of one system."""

    encoder_ms: Optional[float] = None  # the whole clip; None = not measured by this system
    prefill_tokens: Optional[int] = None  # None: prefill and decode not measured by this system
    prefill_ms: Optional[float] = None
    decode_tokens: Optional[int] = None
    decode_ms: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class SystemResult:
    """All counted runs of one system, as rates."""

    name: str  # "official-fp32", "onnx-encoder", or "onnx-fp32" / "onnx-int8" / "onnx-int4"
    encoder_ms: Optional[Spread]  # for the clip; None for the onnx-<dtype> rows
    encoder_ms_per_audio_s: Optional[Spread]
    prefill_tok_s: Optional[Spread]  # None for the onnx-encoder row
    decode_tok_s: Optional[Spread]
    prefill_tokens: Optional[int]
    decode_tokens: Optional[int]


@dataclasses.dataclass(frozen=True)
class Ratio:
    """Our median over the official median of the same run (> 1 is faster than official), and
    the same for each side's fastest counted run (``*_fastest``: on a noisy host the least
    disturbed run of each side, a check on the medians)."""

    encoder_speedup: Optional[float]  # official encoder ms / ours (onnx-encoder row only)
    prefill_speedup: Optional[float]  # onnx-<dtype> rows only
    decode_speedup: Optional[float]
    encoder_speedup_fastest: Optional[float] = None  # official min ms / our min ms
    prefill_speedup_fastest: Optional[float] = None  # our max tok/s / official max
    decode_speedup_fastest: Optional[float] = None


# ----------------------------------------------------------------------------- systems
class OfficialSystem:
    """The official PyTorch model (fp32, eager attention) timed stage by stage."""

    name = OFFICIAL

    def __init__(self, ckpt_dir: str, threads: int):
        import torch

        from .official_ref import load_official_model

        torch.set_num_threads(threads)
        self.torch = torch
        self.model = load_official_model(ckpt_dir, dtype=torch.float32)
        self.thinker = self.model.thinker

    def run(self, mel: np.ndarray, prompt_embeds: np.ndarray, n_decode: int) -> RunTimes:
        torch = self.torch
        with torch.inference_mode():
            t0 = time.perf_counter()
            self.thinker.audio_tower(torch.from_numpy(mel), feature_lens=torch.tensor([mel.shape[1]]))
            enc_ms = (time.perf_counter() - t0) * 1000
            t0 = time.perf_counter()
            out = self.thinker(inputs_embeds=torch.from_numpy(prompt_embeds)[None], use_cache=True)
            tok = int(out.logits[0, -1].argmax())
            prefill_ms = (time.perf_counter() - t0) * 1000
            past = out.past_key_values
            t0 = time.perf_counter()
            for _ in range(n_decode):
                out = self.thinker(input_ids=torch.tensor([[tok]]), past_key_values=past, use_cache=True)
                past = out.past_key_values
                tok = int(out.logits[0, -1].argmax())
            decode_ms = (time.perf_counter() - t0) * 1000
        return RunTimes(enc_ms, prompt_embeds.shape[0], prefill_ms, n_decode, decode_ms)


class OnnxEncoderSystem:
    """Our encoder (the engine's merged graph for the clip), timed alone."""

    def __init__(self, engine, name: str = "onnx-encoder"):
        self.engine = engine
        self.name = name

    def run(self, mel: np.ndarray, prompt_embeds: np.ndarray, n_decode: int) -> RunTimes:
        t0 = time.perf_counter()
        self.engine.encode(mel)
        return RunTimes(encoder_ms=(time.perf_counter() - t0) * 1000)


class OnnxSystem:
    """Our ONNX Runtime decoder with one dtype (prefill + decode), through the engine's own stages."""

    def __init__(self, bundle_dir: str, dtype: str, seconds: int, threads: int, spin_wait: bool = False):
        from qwen3asr import Qwen3ASREngine

        self.name = f"onnx-{dtype}" + ("+spin" if spin_wait else "")
        self.dtype = dtype
        self.engine = Qwen3ASREngine(bundle_dir, backend="onnx", encoder_form="merged", encoder_sizes=[seconds],
                                     decoder_dtype=dtype, threads=threads, spin_wait=spin_wait)

    def run(self, mel: np.ndarray, prompt_embeds: np.ndarray, n_decode: int) -> RunTimes:
        from qwen3asr.decoding import DecodingOptions, Generation

        # no end-of-sequence ids: exactly n_decode decoder steps after the prefill
        # (the token chosen last ends the budget and needs no step of its own)
        gen = Generation(self.engine.decoder.kv, prompt_embeds, (), self.engine.embeddings.row,
                         DecodingOptions(max_new_tokens=n_decode + 1))
        gen.run()
        t = gen.times
        if t.decode_tokens != n_decode:
            raise RuntimeError(f"{self.name}: {t.decode_tokens} decode steps instead of {n_decode}")
        return RunTimes(None, t.prefill_tokens, t.prefill_ms, t.decode_tokens, t.decode_ms)


class ReuseBench:
    """Prompt-prefix reuse on / off over one engine: ``use(on)`` gives its decoder the kept
    prefix cache or one that keeps nothing."""

    def __init__(self, bundle_dir: str, dtype: str, threads: int):
        from qwen3asr import PrefixCacheOptions, Qwen3ASREngine
        from qwen3asr.backends.prefix_cache import PrefixCache

        self.engine = Qwen3ASREngine(bundle_dir, backend="onnx", encoder_form="merged", decoder_dtype=dtype,
                                     threads=threads, prefix_cache=PrefixCacheOptions())
        self.kept = self.engine.decoder.prefixes
        self.none = PrefixCache(PrefixCacheOptions(max_entries=0))
        self.dtype = dtype

    def use(self, on: bool):
        self.engine.decoder.prefixes = self.kept if on else self.none
        return self.engine

    def request(self, engine, pcm: np.ndarray, decode_tokens: int) -> tuple[dict, tuple]:
        r = engine.transcribe(pcm, context=HA_CONTEXT, max_new_tokens=decode_tokens, one_pass=True)
        s = r.stats
        return {"total_ms": s.total_ms, "prefill_ms": s.prefill_ms, "encoder_ms": s.encoder_ms,
                "decode_ms": s.decode_ms, "prefill_tokens": s.prefill_tokens}, r.token_ids

    def stream(self, engine, pcm: np.ndarray, context: str, decode_tokens: int) -> tuple[dict, tuple]:
        session = engine.create_stream(context=context, max_new_tokens=decode_tokens)
        step = SAMPLE_RATE // 2  # 0.5 s pieces, as a microphone delivers them
        for a in range(0, pcm.shape[0], step):
            session.feed_audio(pcm[a:a + step])
        r = session.finish()
        st = r.stats
        n = max(1, st.chunks)
        return {"chunk_ms": (st.encoder_ms + st.prefill_ms + st.decode_ms) / n, "prefill_ms": st.prefill_ms / n,
                "chunks": st.chunks, "prefill_tokens": st.prefill_tokens / n}, r.token_ids

    def close(self) -> None:
        self.engine.close()


def _med(runs: Sequence[dict], key: str) -> Spread:
    return Spread.of([r[key] for r in runs])


def bench_reuse(bundle: str, pcm: np.ndarray, stream_pcm: np.ndarray, runs: int, warmup: int, threads: int,
                decode_tokens: int, dtype: str,
                progress: Callable[[str], None] = lambda s: None) -> dict:
    """The reuse rows (see the module docstring): per work item, runs with and without reuse,
    interleaved; ValueError if the tokens ever differ (reuse must not change the result)."""
    rb = ReuseBench(bundle, dtype, threads)
    try:
        work = {
            "long-context request": lambda e: rb.request(e, pcm, decode_tokens),
            "stream, default context": lambda e: rb.stream(e, stream_pcm, "", decode_tokens),
            "stream, 180-token context": lambda e: rb.stream(e, stream_pcm, HA_CONTEXT, decode_tokens),
        }
        times = {(w, side): [] for w in work for side in ("off", "on")}
        for i in range(warmup + runs):
            for w, fn in work.items():
                got = {}
                for side in (("off", "on") if i % 2 == 0 else ("on", "off")):
                    t, tokens = fn(rb.use(side == "on"))
                    got[side] = tokens
                    if i >= warmup:
                        times[(w, side)].append(t)
                    key = "total_ms" if "total_ms" in t else "chunk_ms"
                    progress(f"{'warm-up' if i < warmup else f'run {i - warmup + 1}/{runs}'} {w} reuse {side}: "
                             f"{t[key]:.0f} ms, prefill {t['prefill_ms']:.0f} ms")
                if got["on"] != got["off"]:
                    raise ValueError(f"{w}: the tokens differ with and without prefix reuse")
        rows = []
        for w in work:
            off, on = times[(w, "off")], times[(w, "on")]
            key = "total_ms" if "total_ms" in off[0] else "chunk_ms"
            o, n = _med(off, key), _med(on, key)
            po, pn = _med(off, "prefill_ms"), _med(on, "prefill_ms")
            rows.append({"work": w, "unit": "request" if key == "total_ms" else "chunk",
                         "ms_without": dataclasses.asdict(o), "ms_with": dataclasses.asdict(n),
                         "prefill_ms_without": dataclasses.asdict(po), "prefill_ms_with": dataclasses.asdict(pn),
                         "prefill_share_without": po.median / o.median, "speedup": o.median / n.median,
                         "prefill_tokens": off[0]["prefill_tokens"],
                         "chunks": off[0].get("chunks")})
        n_ctx = len(rb.engine.tokenizer.encode(HA_CONTEXT))
        stats = dataclasses.asdict(rb.kept.stats)
        if rb.none.stats.hits or len(rb.none):
            raise RuntimeError("the side without reuse reused a prefix")
    finally:
        rb.close()
    return {"dtype": dtype, "context_tokens": n_ctx, "decode_tokens_cap": decode_tokens,
            "stream_seconds": stream_pcm.shape[0] / SAMPLE_RATE, "prefix_cache": stats, "rows": rows,
            "table": format_reuse_table(rows)}


def format_reuse_table(rows: Sequence[dict]) -> str:
    head = ("| work (per unit) | ms without reuse | ms with reuse | x (without / with) | prefill ms without "
            "| prefill ms with | prefill share without |")
    lines = [head, "|" + "---|" * 7]
    for r in rows:
        a, b = Spread(**r["ms_without"]), Spread(**r["ms_with"])
        pa, pb = Spread(**r["prefill_ms_without"]), Spread(**r["prefill_ms_with"])
        lines.append(f"| {r['work']} (per {r['unit']}) | {_cell(a, '.0f')} | {_cell(b, '.0f')} | {r['speedup']:.2f} | "
                     f"{_cell(pa, '.0f')} | {_cell(pb, '.0f')} | {100 * r['prefill_share_without']:.0f} % |")
    return "\n".join(lines)


def summarize(name: str, runs: Sequence[RunTimes], audio_seconds: float) -> SystemResult:
    enc = runs[0].encoder_ms is not None
    dec = runs[0].decode_tokens is not None
    return SystemResult(
        name=name,
        encoder_ms=Spread.of([r.encoder_ms for r in runs]) if enc else None,
        encoder_ms_per_audio_s=Spread.of([r.encoder_ms / audio_seconds for r in runs]) if enc else None,
        prefill_tok_s=Spread.of([r.prefill_tokens / r.prefill_ms * 1000 for r in runs]) if dec else None,
        decode_tok_s=Spread.of([r.decode_tokens / r.decode_ms * 1000 for r in runs]) if dec else None,
        prefill_tokens=runs[0].prefill_tokens, decode_tokens=runs[0].decode_tokens)


def ratio(ours: SystemResult, official: SystemResult) -> Ratio:
    """Ratios for the quantities ``ours`` measured (None for the others)."""
    def faster(num: Optional[Spread], den: Optional[Spread], pick: str = "median") -> Optional[float]:
        return None if num is None or den is None else getattr(num, pick) / getattr(den, pick)

    return Ratio(encoder_speedup=faster(official.encoder_ms, ours.encoder_ms),
                 prefill_speedup=faster(ours.prefill_tok_s, official.prefill_tok_s),
                 decode_speedup=faster(ours.decode_tok_s, official.decode_tok_s),
                 encoder_speedup_fastest=faster(official.encoder_ms, ours.encoder_ms, "min"),
                 prefill_speedup_fastest=faster(ours.prefill_tok_s, official.prefill_tok_s, "max"),
                 decode_speedup_fastest=faster(ours.decode_tok_s, official.decode_tok_s, "max"))


# ----------------------------------------------------------------------------- roofline
def read_bandwidth(parts: Sequence[np.ndarray], reps: int = 3) -> float:
    """GB/s of a streaming read of ``parts`` (one thread each; best of ``reps``). numpy's
    reductions release the GIL; on this kind of machine max, sum, count_nonzero and bitwise-or
    reductions all read at the same ~16 GB/s per thread, so the memory, not the reduction, is
    what is timed."""
    import threading

    best = math.inf
    for _ in range(reps):
        ts = [threading.Thread(target=np.bitwise_or.reduce, args=(p,)) for p in parts]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        best = min(best, time.perf_counter() - t0)
    return sum(p.nbytes for p in parts) / best / 1e9


def decoder_weight_bytes(path: str) -> int:
    """Bytes of the decoder graph's initializers a decode step reads: all but the rotary tables
    (of which a step reads one row)."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    total = 0
    for t in model.graph.initializer:
        if t.name.startswith("rope_"):
            continue
        if t.data_location == onnx.TensorProto.EXTERNAL:
            total += int({e.key: e.value for e in t.external_data}.get("length", 0))
        else:
            total += len(t.raw_data) or onnx.numpy_helper.to_array(t).nbytes
    return total


def roofline_rows(systems, results, bandwidth: "Spread", prompt_tokens: int, decode_tokens: int) -> list:
    """Per quantised onnx-<dtype> row: bytes per decode step, the rate ``bandwidth`` allows, the
    fraction reached."""
    rows = []
    by_name = {r.name: r for r in results}
    weight_bytes: dict = {}  # per decoder file (a +spin twin runs the same graph)
    for s in systems:
        if not isinstance(s, OnnxSystem) or s.dtype == "fp32":
            continue
        kv = s.engine.decoder.kv
        path = s.engine.bundle.decoder_path(s.dtype)
        if path not in weight_bytes:
            weight_bytes[path] = decoder_weight_bytes(path)
        weights = weight_bytes[path]
        mean_ctx = prompt_tokens + decode_tokens / 2
        kv_bytes = int(2 * kv.n_layers * kv.kv_heads * kv.head_dim * 4 * mean_ctx)
        step = weights + kv_bytes
        roof = bandwidth.median * 1e9 / step
        dec = by_name[s.name].decode_tok_s.median
        rows.append({"system": s.name, "weight_bytes": weights, "kv_bytes": kv_bytes, "step_bytes": step,
                     "read_gb_s": bandwidth.median, "roofline_tok_s": roof, "decode_tok_s": dec,
                     "fraction": dec / roof, "achieved_gb_s": dec * step / 1e9})
    return rows


def format_roofline(rows: Sequence[dict], bandwidth: "Spread") -> str:
    lines = [f"memory roofline: streaming read {_cell(bandwidth, '.1f')} GB/s ({READ_PROBE_MIB} MiB, same threads)",
             "| system | MB read per decode step (weights + KV) | roofline tok/s | decode tok/s | fraction | GB/s reached |",
             "|" + "---|" * 6]
    for r in rows:
        lines.append(f"| {r['system']} | {r['step_bytes'] / 1e6:.0f} ({r['weight_bytes'] / 1e6:.0f} + "
                     f"{r['kv_bytes'] / 1e6:.0f}) | {r['roofline_tok_s']:.1f} | {r['decode_tok_s']:.2f} | "
                     f"{100 * r['fraction']:.0f} % | {r['achieved_gb_s']:.1f} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- report
def _cell(s: Optional[Spread], fmt: str) -> str:
    return "-" if s is None else f"{s.median:{fmt}} ({s.min:{fmt}}-{s.max:{fmt}})"


def _ratio_cell(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f}"


def format_table(results: Sequence[SystemResult], ratios: dict) -> str:
    """A Markdown table: one row per system, medians with (min-max), ratios vs official."""
    head = ("| system | encoder ms (clip) | encoder ms / audio s | x off. | prefill tok/s | x off. "
            "| decode tok/s | x off. |")
    lines = [head, "|" + "---|" * 8]
    for r in results:
        q = ratios.get(r.name)
        enc, pre, dec = (_ratio_cell(q.encoder_speedup), _ratio_cell(q.prefill_speedup),
                         _ratio_cell(q.decode_speedup)) if q else ("1", "1", "1")
        lines.append(f"| {r.name} | {_cell(r.encoder_ms, '.0f')} | {_cell(r.encoder_ms_per_audio_s, '.0f')} | {enc} | "
                     f"{_cell(r.prefill_tok_s, '.1f')} | {pre} | {_cell(r.decode_tok_s, '.2f')} | {dec} |")
    return "\n".join(lines)


def format_fastest(ratios: dict) -> str:
    """One line: the ratios of each side's fastest counted run ('' without the official model)."""
    parts = []
    for name, q in ratios.items():
        cells = [f"{label} {x:.2f}" for label, x in (("encoder", q.encoder_speedup_fastest),
                                                    ("prefill", q.prefill_speedup_fastest),
                                                    ("decode", q.decode_speedup_fastest)) if x is not None]
        if cells:
            parts.append(f"{name} " + ", ".join(cells))
    return "x off. of each side's fastest counted run: " + "; ".join(parts) if parts else ""


def machine_facts(threads: int) -> dict:
    import onnxruntime

    facts = {"python": platform.python_version(), "onnxruntime": onnxruntime.__version__,
             "numpy": np.__version__, "cpu_count": os.cpu_count(), "threads": threads,
             "machine": platform.machine(), "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE")}
    try:
        import torch

        facts["torch"] = torch.__version__
    except ImportError:
        pass
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            info = f.read()
        for line in info.splitlines():
            if line.startswith("model name"):
                facts["cpu"] = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                facts["cpu_flags"] = sorted(flags & {"avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni",
                                                     "avx512_bf16", "amx_int8", "amx_bf16", "avx512_fp16"})
                break
    except OSError:
        pass
    return facts


def _loadavg() -> Optional[float]:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


# ----------------------------------------------------------------------------- setup
def preset_checkpoint(preset: str, checkpoint: Optional[str] = None) -> str:
    """The random-weight checkpoint of ``preset`` (build/ckpt-PRESET unless ``checkpoint``),
    built with the official code when missing; shared by the bench tools."""
    checkpoint = checkpoint or os.path.join(ROOT, "build", f"ckpt-{preset}")
    if not os.path.isfile(os.path.join(checkpoint, "config.json")):
        from .make_random_checkpoint import make_checkpoint

        log.info("building a random-weight %s checkpoint in %s", preset, checkpoint)
        make_checkpoint(preset, checkpoint, dtype="bfloat16")
    return checkpoint


def ensure_model(preset: Optional[str], checkpoint: Optional[str], bundle: Optional[str],
                 dtypes: Sequence[str], seconds: int) -> tuple[str, str]:
    """(checkpoint_dir, bundle_dir); with ``preset`` both are built under build/ when missing."""
    if preset:
        checkpoint = preset_checkpoint(preset, checkpoint)
        bundle = bundle or os.path.join(ROOT, "build", f"bundle-{preset}")
        if not os.path.isfile(os.path.join(bundle, "model.json")):
            from . import export_onnx

            log.info("exporting %s to %s", checkpoint, bundle)
            export_onnx.export(checkpoint, bundle, durations=(seconds,), forms=("merged",),
                               decoder_dtypes=tuple(dtypes))
    if not checkpoint or not bundle:
        raise ValueError("give --preset, or both --checkpoint and --bundle")
    for path, what in ((os.path.join(checkpoint, "config.json"), "checkpoint"),
                       (os.path.join(bundle, "model.json"), "bundle")):
        if not os.path.isfile(path):
            raise ValueError(f"{what} file missing: {path}")
    return checkpoint, bundle


def bench(checkpoint: str, bundle: str, audio: str, seconds: float, runs: int, warmup: int, threads: int,
          decode_tokens: int, dtypes: Sequence[str], official: bool = True,
          progress: Callable[[str], None] = lambda s: None, reuse: bool = True, main_rows: bool = True,
          stream_seconds: float = 12.0, spin_rows: bool = False) -> dict:
    """Measure every system ``warmup + runs`` times, interleaved; returns the JSON-ready report."""
    if runs < 1 or warmup < 0 or decode_tokens < 1:
        raise ValueError("runs >= 1, warmup >= 0 and decode_tokens >= 1 are required")
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        raise ValueError(f"unknown decoder dtypes {bad}; accepted: {', '.join(DTYPES)}")
    pcm = prepare_audio(audio)
    start = int(AUDIO_OFFSET_S * SAMPLE_RATE)
    if pcm.shape[0] < start + int(seconds * SAMPLE_RATE):
        start = 0
    pcm = pcm[start:start + int(round(seconds * SAMPLE_RATE))]
    audio_s = pcm.shape[0] / SAMPLE_RATE
    if audio_s < seconds - 1e-3:
        raise ValueError(f"{audio} holds {audio_s:.2f} s of audio, less than --seconds {seconds}")
    mel = log_mel(pcm)
    size = math.ceil(seconds)
    reuse_report = None
    if reuse:
        full = prepare_audio(audio)
        stream_pcm = full[start:start + int(round(stream_seconds * SAMPLE_RATE))]
        reuse_report = bench_reuse(bundle, pcm, stream_pcm, runs, warmup, threads, decode_tokens,
                                   dtypes[0] if dtypes else "fp32", progress)
    if not main_rows:
        return {"settings": {"audio": os.path.basename(audio), "audio_seconds": audio_s, "runs": runs,
                             "warmup": warmup, "threads": threads, "dtypes": list(dtypes[:1])},
                "machine": machine_facts(threads), "loadavg_1min": {"before": None, "after": _loadavg()},
                "reuse": reuse_report}
    systems: list = [OnnxSystem(bundle, d, size, threads) for d in dtypes]
    engine = systems[0].engine if systems else None
    spin = [OnnxSystem(bundle, d, size, threads, spin_wait=True) for d in dtypes] if spin_rows else []
    if engine is None:
        from qwen3asr import Qwen3ASREngine

        engine = Qwen3ASREngine(bundle, backend="onnx", encoder_form="merged", encoder_sizes=[size],
                                decoder_dtype="fp32", threads=threads)
    # Run order per round: official, onnx-<dtype>..., onnx-encoder; rows: official, encoder, decoders.
    systems += spin
    systems.append(OnnxEncoderSystem(engine))
    if spin:
        systems.append(OnnxEncoderSystem(spin[0].engine, "onnx-encoder+spin"))
    n_audio = tokens_for_frames(mel.shape[1])
    prompt = engine.prompt(n_audio)
    prompt_embeds = engine.embed_prompt(prompt, engine.encode(mel))
    if official:
        systems.insert(0, OfficialSystem(checkpoint, threads))
    times: dict = {s.name: [] for s in systems}
    read_gb_s = []
    probe = np.array_split(np.ones(READ_PROBE_MIB * 2 ** 20 // 8, np.uint64), threads)
    load_before = _loadavg()
    for i in range(warmup + runs):
        bw = read_bandwidth(probe)
        progress(f"memory read {bw:.1f} GB/s")
        if i >= warmup:
            read_gb_s.append(bw)
        for s in systems:
            r = s.run(mel, prompt_embeds, decode_tokens)
            time.sleep(SETTLE_S)  # the next row (or the next round's read probe) starts on quiet cores
            tag = "warm-up" if i < warmup else f"run {i - warmup + 1}/{runs}"
            parts = ([f"encoder {r.encoder_ms:.0f} ms"] if r.encoder_ms is not None else []) + \
                ([f"prefill {r.prefill_ms:.0f} ms", f"decode {r.decode_tokens / r.decode_ms * 1000:.2f} tok/s"]
                 if r.decode_tokens is not None else [])
            progress(f"{tag} {s.name}: {', '.join(parts)}")
            if i >= warmup:
                times[s.name].append(r)
    order = ([OFFICIAL] if official else []) + ["onnx-encoder"] + (["onnx-encoder+spin"] if spin else []) + \
        [n for d in dtypes for n in [f"onnx-{d}"] + ([f"onnx-{d}+spin"] if spin else [])]
    results = [summarize(name, times[name], audio_s) for name in order]
    del probe
    bandwidth = Spread.of(read_gb_s)
    roof = roofline_rows(systems, results, bandwidth, len(prompt), decode_tokens)
    ratios = {}
    if official:
        ref = results[0]
        ratios = {r.name: ratio(r, ref) for r in results[1:]}
    return {
        "settings": {"audio": os.path.basename(audio), "audio_seconds": audio_s, "encoder_variant_s": size,
                     "prompt_tokens": len(prompt), "decode_tokens": decode_tokens, "runs": runs, "warmup": warmup,
                     "threads": threads, "dtypes": list(dtypes), "official": official},
        "machine": machine_facts(threads),
        "loadavg_1min": {"before": load_before, "after": _loadavg()},
        "results": [dataclasses.asdict(r) for r in results],
        "ratios_vs_official": {k: dataclasses.asdict(v) for k, v in ratios.items()},
        "table": format_table(results, ratios),
        "fastest": format_fastest(ratios),
        "read_gb_s": dataclasses.asdict(bandwidth),
        "roofline": roof,
        "roofline_table": format_roofline(roof, bandwidth),
        "reuse": reuse_report,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", help="build a random-weight checkpoint of this preset (e.g. 0.6b) into build/")
    ap.add_argument("--checkpoint", help="official checkpoint directory")
    ap.add_argument("--bundle", help="bundle exported from it (scripts/export_onnx.py)")
    ap.add_argument("--audio", default=DEFAULT_AUDIO, help="speech file (default: the bundled 77 s clip)")
    ap.add_argument("--seconds", type=float, default=3.0, help="clip length in seconds (default %(default)s)")
    ap.add_argument("--runs", type=int, default=3, help="counted runs per system (default %(default)s)")
    ap.add_argument("--warmup", type=int, default=1, help="uncounted runs first (default %(default)s)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for both sides (default %(default)s)")
    ap.add_argument("--decode-tokens", type=int, default=64, help="greedy steps, EOS ignored (default %(default)s)")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="our decoder dtypes (default %(default)s)")
    ap.add_argument("--no-official", action="store_true", help="only our backend (no torch needed)")
    ap.add_argument("--no-reuse-rows", action="store_true", help="skip the prompt-prefix reuse rows")
    ap.add_argument("--reuse-only", action="store_true",
                    help="only the reuse rows (first of --dtypes; no official model, no torch)")
    ap.add_argument("--stream-seconds", type=float, default=12.0,
                    help="audio streamed in the stream reuse rows (default %(default)s)")
    ap.add_argument("--spin-wait-rows", action="store_true",
                    help="also time every onnx row with spinning ONNX Runtime threads (Qwen3ASREngine(spin_wait=True))")
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    try:
        ck, bd = ensure_model(args.preset, args.checkpoint, args.bundle, dtypes, math.ceil(args.seconds))
        report = bench(ck, bd, args.audio, args.seconds, args.runs, args.warmup, args.threads, args.decode_tokens,
                       dtypes, official=not args.no_official and not args.reuse_only,
                       progress=lambda s: print(s, file=sys.stderr, flush=True), reuse=not args.no_reuse_rows,
                       main_rows=not args.reuse_only, stream_seconds=args.stream_seconds,
                       spin_rows=args.spin_wait_rows)
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    s = report["settings"]
    if "table" in report:
        print(f"{s['audio_seconds']:.2f} s audio, prompt {s['prompt_tokens']} tokens, {s['decode_tokens']} decode "
              f"steps, {s['runs']} runs (+{s['warmup']} warm-up), {s['threads']} threads; "
              f"load avg {report['loadavg_1min']['before']} -> {report['loadavg_1min']['after']}")
        print(report["table"])
        if report["fastest"]:
            print("\n" + report["fastest"])
        print()
        print(report["roofline_table"])
    r = report.get("reuse")
    if r:
        print(f"\nprompt-prefix reuse, {r['dtype']} decoder, {s['audio_seconds']:.2f} s clip, {r['context_tokens']}-token "
              f"context, stream of {r['stream_seconds']:.1f} s at the default stream settings, generation capped at "
              f"{r['decode_tokens_cap']} tokens, {s['runs']} runs (+{s['warmup']} warm-up); "
              f"load avg now {report['loadavg_1min']['after']}")
        print(r["table"])
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
