#!/usr/bin/env python3
"""Would decoding concurrent streams in one decoder call pay on the CPU? Measured, not built.

    python scripts/bench_batch.py --preset 0.6b --dtypes int8,int4 --batches 1,2,4,8,16 \\
        --context 200 --runs 15 --threads 2 --json build/bench_batch.json

A server decoding B streams at once runs B single-token decode steps per generated token. The
bundle's decoder has a batch of 1, so today those are B calls. This tool builds the same
decoder with a batch axis (``onnx_graphs.decoder(batch=True)``: B sequences, each at its own
cache length) from a checkpoint and times, interleaved round by round:

- sequential: B calls of one sequence each, every stream with its own KV cache bound before its
  call (what interleaved streams cost today: the IOBinding switches caches every call);
- batched: one call of B sequences (caches [B, kv_heads, C, head_dim]).

Both run the same graph and weights (B = 1 calls for the sequential side), so the ratio is the
batching alone. It prints ms per generated token of all streams and tokens/s of the B streams
together for each dtype and B, the batched/sequential speed ratio (> 1: batching pays), and
how far a batched row's logits are from the same stream decoded alone (max abs difference,
lowest cosine, argmax agreement over 8 rows of different cache lengths). The prompt's prefill
is per stream and not batched here. Random weights give the real shapes and
costs, never meaningful text.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from typing import Optional, Sequence

import numpy as np

from .bench import preset_checkpoint

log = logging.getLogger("bench_batch")

BITS = {"fp32": None, "int8": 8, "int4": 4}


def build_session(ckpt_dir: str, dtype: str, threads: int, block: Optional[int] = None):
    """An ONNX Runtime session of the batch-axis decoder of ``ckpt_dir`` in ``dtype`` (the
    export's own quantisation choices: block size and, for int4, searched scales)."""
    import onnxruntime as ort

    from . import checkpoint as ckpt
    from . import onnx_graphs as graphs
    from .export_onnx import default_quant_block

    if dtype not in BITS:
        raise ValueError(f"unknown dtype {dtype!r}; use {', '.join(BITS)}")
    cfg = ckpt.read_config(ckpt_dir)
    bits = BITS[dtype]
    block = block or (default_quant_block(bits, cfg.text) if bits else 32)
    model = graphs.decoder(ckpt.open_weights(ckpt_dir), cfg, bits=bits, block_size=block, scale_search=bits == 4,
                           batch=True)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]), cfg


class Caches:
    """KV caches of ``b`` sequences in one set of OrtValues ([b, kv_heads, capacity, head_dim]
    per layer), and the IOBinding that runs the session on them in place."""

    def __init__(self, session, cfg, b: int, capacity: int, seed: int = 0):
        import onnxruntime as ort

        t = cfg.text
        rng = np.random.default_rng(seed)
        shape = (b, t.num_key_value_heads, capacity, t.head_dim)
        self.session, self.b, self.layers = session, b, t.num_hidden_layers
        self.values = [ort.OrtValue.ortvalue_from_numpy(rng.standard_normal(shape).astype(np.float32))
                       for _ in range(2 * self.layers)]
        self.logits = ort.OrtValue.ortvalue_from_numpy(np.zeros((b, 1, t.vocab_size), np.float32))
        self.binding = session.io_binding()
        for i in range(self.layers):
            for j, kind in enumerate(("key", "value")):
                v = self.values[2 * i + j]
                self.binding.bind_ortvalue_input(f"past_{kind}_{i}", v)
                self.binding.bind_ortvalue_output(f"present_{kind}_{i}", v)
        self.binding.bind_ortvalue_output("logits", self.logits)
        self.binding.bind_cpu_input("logit_index", np.zeros(1, np.int64))  # the one position of each row
        self.run_options = ort.RunOptions()

    def step(self, embeds: np.ndarray, seqlens_k: np.ndarray) -> np.ndarray:
        """One token per sequence: embeds [b, 1, H]; seqlens_k [b] int32 (cache length after the
        call, minus 1). Returns the logits OrtValue's numpy view [b, 1, V]."""
        bd = self.binding
        bd.bind_cpu_input("inputs_embeds", embeds)
        bd.bind_cpu_input("seqlens_k", seqlens_k)
        bd.bind_cpu_input("total_sequence_length", np.array(int(seqlens_k.max()) + 1, np.int32))
        self.session.run_with_iobinding(bd, self.run_options)
        return self.logits.numpy()


def check_exactness(session, cfg, b: int = 8, capacity: int = 64, seed: int = 1) -> dict:
    """How far the logits of ``b`` sequences (different cache lengths) decoded in one batched
    call are from each decoded alone on a copy of its own cache: the max abs difference, the
    lowest cosine and the fraction of rows with the same argmax."""
    rng = np.random.default_rng(seed)
    H = cfg.text.hidden_size
    batched = Caches(session, cfg, b, capacity, seed)
    lens = np.array([capacity // 2 - 3 * i for i in range(b)], np.int32)  # seqlens_k: each its own
    embeds = (rng.standard_normal((b, 1, H)) * 0.05).astype(np.float32)
    singles = []
    for i in range(b):
        one = Caches(session, cfg, 1, capacity, seed)
        for k, v in enumerate(one.values):
            v.update_inplace(np.ascontiguousarray(batched.values[k].numpy()[i:i + 1]))
        singles.append(one.step(embeds[i:i + 1], lens[i:i + 1])[0, 0].copy())
    got = batched.step(embeds, lens)[:, 0]
    cos = [float(got[i] @ singles[i] / (np.linalg.norm(got[i]) * np.linalg.norm(singles[i]) + 1e-30))
           for i in range(b)]
    return {"rows": b, "max_abs_diff": float(max(np.abs(got[i] - singles[i]).max() for i in range(b))),
            "min_cos": min(cos), "argmax_same": sum(int(got[i].argmax() == singles[i].argmax()) for i in range(b)) / b}


def measure(session, cfg, batches: Sequence[int], context: int, runs: int, warmup: int = 2) -> list[dict]:
    """Median ms per step of all streams, batched (one call) and sequential (one call per
    stream), for each B; the runs of both sides and of all B interleaved."""
    H = cfg.text.hidden_size
    capacity = context + 8
    rng = np.random.default_rng(0)
    sides = {}
    for b in batches:
        sides[b] = {"batched": Caches(session, cfg, b, capacity),
                    "single": [Caches(session, cfg, 1, capacity, seed=1 + i) for i in range(b)],
                    "embeds": (rng.standard_normal((b, 1, H)) * 0.05).astype(np.float32),
                    "lens": np.full(b, context, np.int32), "t": {"batched": [], "sequential": []}}
    for r in range(warmup + runs):
        for b in batches:
            s = sides[b]
            order = ("batched", "sequential") if r % 2 == 0 else ("sequential", "batched")
            for side in order:
                t0 = time.perf_counter()
                if side == "batched":
                    s["batched"].step(s["embeds"], s["lens"])
                else:
                    for i, c in enumerate(s["single"]):
                        c.step(s["embeds"][i:i + 1], s["lens"][i:i + 1])
                if r >= warmup:
                    s["t"][side].append((time.perf_counter() - t0) * 1000)
    rows = []
    for b in batches:
        t = sides[b]["t"]
        mb, ms = statistics.median(t["batched"]), statistics.median(t["sequential"])
        rows.append({"batch": b, "batched_ms": round(mb, 2), "sequential_ms": round(ms, 2),
                     "batched_tok_s": round(b * 1000 / mb, 1), "sequential_tok_s": round(b * 1000 / ms, 1),
                     "speedup": round(ms / mb, 2), "batched_min_ms": round(min(t["batched"]), 2),
                     "sequential_min_ms": round(min(t["sequential"]), 2)})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", help="random-weight checkpoint of this preset, built into build/ if missing")
    ap.add_argument("--checkpoint", help="checkpoint directory (instead of --preset)")
    ap.add_argument("--dtypes", default="int8,int4", help="decoder dtypes, comma-separated (fp32, int8, int4)")
    ap.add_argument("--batches", default="1,2,4,8,16", help="stream counts B, comma-separated")
    ap.add_argument("--context", type=int, default=200, help="cache length of every stream (tokens)")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        batches = [int(b) for b in args.batches.split(",")]
        dtypes = [d.strip() for d in args.dtypes.split(",")]
        if min(batches) < 1 or args.context < 8 or args.runs < 1:
            raise ValueError
        unknown = [d for d in dtypes if d not in BITS]
        if unknown:
            ap.error(f"unknown dtype {unknown[0]!r}; use {', '.join(BITS)}")
    except ValueError:
        ap.error("--batches: positive integers separated by commas; --context >= 8; --runs >= 1")
    if not args.preset and not args.checkpoint:
        ap.error("give --preset or --checkpoint")
    ckpt_dir = args.checkpoint or preset_checkpoint(args.preset)
    report = {"checkpoint": ckpt_dir, "context": args.context, "threads": args.threads, "runs": args.runs,
              "load_average": os.getloadavg()[0], "dtypes": {}}
    print(f"{'dtype':<6} {'B':>3} {'batched ms':>10} {'sequential ms':>13} {'tok/s batched':>13} "
          f"{'tok/s sequential':>16} {'speedup':>7}")
    for dt in dtypes:
        session, cfg = build_session(ckpt_dir, dt, args.threads)
        exact = check_exactness(session, cfg)
        rows = measure(session, cfg, batches, args.context, args.runs)
        report["dtypes"][dt] = {"batched_vs_alone": exact, "rows": rows}
        for r in rows:
            print(f"{dt:<6} {r['batch']:>3} {r['batched_ms']:>10.2f} {r['sequential_ms']:>13.2f} "
                  f"{r['batched_tok_s']:>13.1f} {r['sequential_tok_s']:>16.1f} {r['speedup']:>7.2f}", flush=True)
        print(f"{dt}: batched logits vs each stream alone ({exact['rows']} rows): max abs difference "
              f"{exact['max_abs_diff']:.3g}, lowest cosine {exact['min_cos']:.7f}, same argmax "
              f"{exact['argmax_same']:.0%}", flush=True)
        del session
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
