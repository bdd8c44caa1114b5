#!/usr/bin/env python3
"""Encoder latency per variant (form x duration x NPU core mask): mean, spread and real-time factor.

    python scripts/bench_encoder.py --bundle models/qwen3-asr-0.6b --backend rknn \\
        --forms merged,split --sizes 2,3,4,5 --core-masks 0,0_1,0_1_2 --runs 20 --json bench.json

Each run encodes one full-length input of the variant's duration through AudioEncoder (so
host-side padding/masks and, for split, the per-chunk front end calls are included).
RTF = latency / duration. --backend onnx times ONNX Runtime on the CPU (core masks do not
apply); --backend rknn needs a board with rknn-toolkit-lite2 and the bundle's .rknn files.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import sys
import time
from typing import Optional

import numpy as np

from qwen3asr.audio import prepare_audio
from qwen3asr.bundle import Bundle, BundleError
from qwen3asr.encoder import AudioEncoder
from qwen3asr.mel import log_mel, SAMPLE_RATE


@dataclasses.dataclass(frozen=True)
class BenchResult:
    form: str  # "merged" or "split"
    seconds: float  # audio the variant holds (s)
    core_mask: Optional[str]  # NPU core mask name (None on the onnx backend)
    runs: int  # timed runs (after warm-up)
    calls_per_run: int  # graph executions per run (split: chunks + 1)
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    rtf: float  # mean latency / duration


def make_encoder(bundle: Bundle, backend: str, form: str, size: int, core_mask: Optional[str],
                 threads: Optional[int]) -> AudioEncoder:
    if backend == "onnx":
        from qwen3asr.backends.onnx import create_onnx_encoder

        return create_onnx_encoder(bundle, form, [size], threads)
    from qwen3asr.backends.rk.rknn import create_rknn_encoder

    return create_rknn_encoder(bundle, form, [size], core_mask=core_mask)


def input_mel(audio: Optional[str], seconds: int, n_mels: int) -> np.ndarray:
    """(n_mels, seconds * 100) log-mel: from ``audio`` (looped if short), else seeded noise."""
    n = seconds * SAMPLE_RATE
    if audio:
        pcm = prepare_audio(audio)
        pcm = np.tile(pcm, -(-n // pcm.shape[0]))[:n]
    else:
        pcm = (np.random.default_rng(seconds).standard_normal(n) * 0.05).astype(np.float32)
    return log_mel(pcm, n_mels)[:, :seconds * 100]


def bench_variant(encoder: AudioEncoder, mel: np.ndarray, runs: int, warmup: int) -> tuple[list[float], int]:
    """Latencies in ms of ``runs`` encode() calls after ``warmup`` untimed ones, and graph calls per run."""
    for _ in range(warmup):
        encoder.encode(mel)
    times = []
    calls0 = encoder.calls
    for _ in range(runs):
        t0 = time.perf_counter()
        encoder.encode(mel)
        times.append((time.perf_counter() - t0) * 1000.0)
    return times, (encoder.calls - calls0) // max(runs, 1)


def run(bundle_dir: str, backend: str = "onnx", forms=("merged",), sizes=None, core_masks=(None,), runs: int = 10,
        warmup: int = 2, audio: Optional[str] = None, threads: Optional[int] = None) -> list[BenchResult]:
    if backend not in ("onnx", "rknn"):
        raise ValueError(f"--backend must be onnx or rknn, got {backend!r}")
    if runs < 1 or warmup < 0:
        raise ValueError(f"--runs must be >= 1 and --warmup >= 0, got {runs} and {warmup}")
    if backend == "onnx" and any(m is not None for m in core_masks):
        raise ValueError("--core-masks applies to the rknn backend only")
    bundle = Bundle.load(bundle_dir)
    n_mels = int(bundle.audio_config["num_mel_bins"])
    results = []
    for form in forms:
        avail = sorted(v.n_chunks for v in bundle.encoder_variants(form))
        for size in (sizes or avail):
            mel = input_mel(audio, size, n_mels)
            for mask in core_masks:
                enc = make_encoder(bundle, backend, form, size, mask, threads)
                try:
                    times, calls = bench_variant(enc, mel, runs, warmup)
                finally:
                    enc.close()
                t = np.asarray(times)
                results.append(BenchResult(form, float(size), mask, runs, calls, float(t.mean()), float(t.std()),
                                           float(t.min()), float(t.max()), float(t.mean()) / 1000.0 / size))
    return results


def table(results: list[BenchResult]) -> str:
    head = f"{'form':<7}{'dur s':>6} {'cores':<6}{'calls':>6}{'mean ms':>10}{'std':>8}{'min':>9}{'max':>9}{'RTF':>8}"
    rows = [head, "-" * len(head)]
    for r in results:
        rows.append(f"{r.form:<7}{r.seconds:>6.0f} {r.core_mask or '-':<6}{r.calls_per_run:>6}{r.mean_ms:>10.2f}"
                    f"{r.std_ms:>8.2f}{r.min_ms:>9.2f}{r.max_ms:>9.2f}{r.rtf:>8.4f}")
    return "\n".join(rows)


def _csv(text: Optional[str]) -> list[str]:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--backend", default="onnx", choices=("onnx", "rknn"))
    ap.add_argument("--forms", default="merged", help="merged, split or both (default %(default)s)")
    ap.add_argument("--sizes", default=None, help="durations in seconds (default: all of each form)")
    ap.add_argument("--core-masks", default=None,
                    help="rknn: NPU core masks, e.g. 0,0_1,0_1_2 or auto (default: all cores of the SoC)")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--audio", default=None, help="audio file for the input (default: seeded noise)")
    ap.add_argument("--threads", type=int, default=None, help="onnx: intra-op threads")
    ap.add_argument("--json", default=None, help="write results here as JSON")
    args = ap.parse_args(argv)
    # Each timed encoder holds one variant and gets input of exactly its length, so it never
    # chains; its "no variant is a multiple of the attention window" warning does not apply.
    logging.getLogger("qwen3asr.encoder").setLevel(logging.ERROR)
    try:
        results = run(args.bundle, args.backend, tuple(_csv(args.forms)),
                      [int(x) for x in _csv(args.sizes)] or None, tuple(_csv(args.core_masks)) or (None,),
                      args.runs, args.warmup, args.audio, args.threads)
    except (BundleError, ValueError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(table(results))
    if args.json:
        doc = {"backend": args.backend, "bundle": os.path.basename(os.path.normpath(args.bundle)),
               "runs": args.runs, "warmup": args.warmup, "audio": args.audio, "machine": platform.machine(),
               "results": [dataclasses.asdict(r) for r in results]}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
