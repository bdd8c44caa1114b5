#!/usr/bin/env python3
"""Measure on a board what scripts/board_model.py predicts: same clips, same settings, same table.

    PYTHONPATH=python .venv/bin/python scripts/bench_board.py --backend rk --json bench_board.json
    PYTHONPATH=python .venv/bin/python scripts/bench_board.py --backend rk --realtime   # true caption latency

Runs (``--runs``, default all):

- ``one_pass``: the whole clip in one decoder pass (``engine.transcribe(pcm)``);
- ``vad_first``: the file as the CLI decodes long audio: VAD speech segments, 30 s chunks,
  memory 2, rollback 5 (needs the Silero VAD model);
- ``stream``: a stream at the defaults (4 s chunks, memory 2, rollback 2, pause rules);
- ``stream_continuous``: the same on the clip's speech segments joined with no pauses
  (clips listed in audio/transcripts.json).

For each run it prints one measured row in the cost model's format (wall time, RTF, the
engine's own encoder / prefill / decode times; overhead = the rest), then the model's
prediction for the same run's accounting, so the two can be pasted into an issue together.
Caption latency: with ``--realtime`` the stream is fed at real-time pace and latency is
measured (from the moment a chunk's audio was complete to the moment its text came back);
without, the measured per-chunk compute is replayed on the real-time schedule (host time
between chunks not included). Clocks: lock them first (deploy/lock_clocks.py).

Off a board (``--backend auto`` picks the CPU, or ``--backend onnx``) it runs on ONNX Runtime
and says that the numbers are CPU numbers, not board numbers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import statistics
import sys
import time
from typing import List, Optional

from qwen3asr.audio import SAMPLE_RATE

from . import REPO_ROOT as ROOT
from .board.accounting import Accounting
from .board.costs import SOCS, unit_costs
from .board.predict import ChunkPrediction, Prediction, predict
from .board.record import (FEED_SECONDS, chunk_works, graph_log, joined_speech, record_file, record_one_pass,
                           system_tokens)
from .board.report import prediction_table

RUNS = ("one_pass", "vad_first", "stream", "stream_continuous")


@dataclasses.dataclass(frozen=True)
class Measured:
    """One measured run: the row in the cost model's format, and the run's accounting."""

    prediction: Prediction  # measured figures in the Prediction layout (soc = where it ran)
    accounting: Accounting
    latency: str  # "measured", "replayed" or "-" (files)


def _row(label: str, where: str, acc: Accounting, wall_s: float, enc_ms: List[float], pre_ms: List[float],
         dec_ms: List[float], latencies: Optional[List[float]]) -> Prediction:
    per = tuple(ChunkPrediction(c.start, c.end, e, p, d, 0.0, lat)
                for c, e, p, d, lat in zip(acc.chunks, enc_ms, pre_ms, dec_ms, latencies or [None] * len(enc_ms)))
    enc, pre, dec = sum(enc_ms) / 1000, sum(pre_ms) / 1000, sum(dec_ms) / 1000
    later = list(latencies or [])[1:]
    return Prediction(
        label=label, soc=where, overlap=False, audio_seconds=acc.audio_seconds, chunks=len(acc.chunks),
        encoder_s=enc, prefill_s=pre, decode_s=dec, overhead_s=max(0.0, wall_s - enc - pre - dec), wall_s=wall_s,
        latency_first_s=latencies[0] if latencies else None,
        latency_median_s=statistics.median(later) if later else None,
        latency_max_s=max(latencies) if latencies else None, per_chunk=per)


def _replayed(acc: Accounting, chunks) -> List[float]:
    """Latency of each chunk when its measured compute runs serially on the real-time schedule."""
    t, out = 0.0, []
    for c, st in zip(acc.chunks, chunks):
        t = max(c.ready, t) + (st.encoder_ms + st.prefill_ms + st.decode_ms) / 1000
        out.append(t - c.ready)
    return out


def run_stream(engine, pcm, label: str, where: str, realtime: bool, **options) -> Measured:
    """A stream at ``options`` (create_stream keywords), fed in board.record.FEED_SECONDS pieces."""
    step = int(round(FEED_SECONDS * SAMPLE_RATE))
    session = engine.create_stream(**options)
    ready: List[float] = []
    measured: List[float] = []
    t0 = time.perf_counter()
    with graph_log(engine) as log:
        for a in range(0, pcm.shape[0], step):
            t_audio = min(pcm.shape[0], a + step) / SAMPLE_RATE
            if realtime:
                time.sleep(max(0.0, t0 + t_audio - time.perf_counter()))
            r = session.feed_audio(pcm[a:a + step])
            new = len(r.chunks) - len(ready)
            ready.extend([t_audio] * new)
            measured.extend([time.perf_counter() - t0 - t_audio] * new)
        total = pcm.shape[0] / SAMPLE_RATE
        if realtime:
            time.sleep(max(0.0, t0 + total - time.perf_counter()))
        r = session.finish()
        new = len(r.chunks) - len(ready)
        ready.extend([total] * new)
        measured.extend([time.perf_counter() - t0 - total] * new)
    wall = time.perf_counter() - t0
    acc = Accounting(label=label, audio_seconds=total, chunks=chunk_works(r.chunks, log.calls, ready),
                     live=True, system_tokens=system_tokens(engine))
    if realtime:
        # fed in real time, the wall clock is the audio duration: report compute (sum of the stages)
        wall = sum(c.encoder_ms + c.prefill_ms + c.decode_ms for c in r.chunks) / 1000
        lat, how = measured, "measured"
    else:
        lat, how = _replayed(acc, r.chunks), "replayed"
    row = _row(label, where, acc, wall, [c.encoder_ms for c in r.chunks], [c.prefill_ms for c in r.chunks],
               [c.decode_ms for c in r.chunks], lat)
    return Measured(row, acc, how)


def run_vad_first(engine, pcm, label: str, where: str) -> Measured:
    t0 = time.perf_counter()
    acc, r = record_file(engine, pcm, label)
    wall = time.perf_counter() - t0
    row = _row(label, where, acc, wall, [c.encoder_ms for c in r.chunks], [c.prefill_ms for c in r.chunks],
               [c.decode_ms for c in r.chunks], None)
    return Measured(row, acc, "-")


def run_one_pass(engine, pcm, label: str, where: str) -> Measured:
    acc, t = record_one_pass(engine, pcm, label)
    s = t.stats
    row = _row(label, where, acc, s.total_ms / 1000, [s.encoder_ms], [s.prefill_ms], [s.decode_ms], None)
    return Measured(row, acc, "-")


def bench(model: Optional[str], backend: str, audio: str, runs, realtime: bool = False,
          threads: Optional[int] = None, progress=lambda s: None) -> dict:
    """Run ``runs`` (names of RUNS) and return the JSON-ready report."""
    bad = [r for r in runs if r not in RUNS]
    if bad:
        raise ValueError(f"unknown runs {', '.join(bad)}; accepted: {', '.join(RUNS)}")
    from qwen3asr import Qwen3ASREngine
    from qwen3asr.audio import AudioError, prepare_audio

    engine = Qwen3ASREngine(model, backend=backend, threads=threads)
    soc = engine.soc
    where = soc or "cpu"
    pcm = prepare_audio(audio)
    name = os.path.basename(audio)
    results: List[Measured] = []
    skipped = {}
    for run in runs:
        progress(f"{run} ...")
        try:
            if run == "one_pass":
                results.append(run_one_pass(engine, pcm, f"file, one pass, {name}", where))
            elif run == "vad_first":
                results.append(run_vad_first(engine, pcm, f"file, VAD-first, {name}", where))
            elif run == "stream":
                results.append(run_stream(engine, pcm, f"stream defaults, {name}", where, realtime))
            else:
                joined = joined_speech(pcm, name)
                results.append(run_stream(engine, joined, "stream defaults, continuous speech", where, realtime))
        except (AudioError, FileNotFoundError, ValueError) as exc:
            skipped[run] = str(exc)
            progress(f"{run} skipped: {exc}")
    socs = [soc] if soc else list(SOCS)
    predicted = [predict(m.accounting, unit_costs(s)) for m in results for s in socs]
    return {
        "backend": engine.backend, "soc": soc, "board": soc is not None, "audio": name, "realtime": realtime,
        "machine": {"machine": platform.machine(), "python": platform.python_version()},
        "measured_table": prediction_table([m.prediction for m in results]),
        "predicted_table": prediction_table(predicted),
        "latency": {m.accounting.label: m.latency for m in results},
        "measured": [dataclasses.asdict(m.prediction) for m in results],
        "accountings": {m.accounting.label: m.accounting.to_dict() for m in results},
        "skipped": skipped,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="bundle (default: $QWEN3ASR_MODEL or models/default)")
    ap.add_argument("--backend", default="auto", choices=("auto", "rk", "onnx"), help="default %(default)s")
    ap.add_argument("--audio", default=os.path.join(ROOT, "audio", "long_mixed.wav"),
                    help="clip (default: the bundled 77 s clip, as the cost model)")
    ap.add_argument("--runs", default=",".join(RUNS), help="comma list of %(default)s")
    ap.add_argument("--realtime", action="store_true", help="feed streams at real-time pace, measure latency")
    ap.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads (CPU backend)")
    ap.add_argument("--json", help="write the report here (it holds the accountings: board_model.py "
                                   "--accounting FILE predicts them)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    try:
        report = bench(args.model, args.backend, args.audio, runs, args.realtime, args.threads,
                       progress=lambda s: print(s, file=sys.stderr, flush=True))
    except ImportError as exc:
        print(f"error: {exc} (run with PYTHONPATH=python, or after pip install -e .)", file=sys.stderr)
        return 2
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if report["board"]:
        print(f"board: {report['soc']}, backend rk, {report['machine']['machine']}; clip {report['audio']}")
    else:
        print(f"CPU NUMBERS, NOT BOARD NUMBERS: backend {report['backend']} on {report['machine']['machine']} "
              f"(no RK3576/RK3588 NPU used). On a board run with --backend rk; clip {report['audio']}")
    how = ", ".join(f"{k}: {v}" for k, v in report["latency"].items() if v != "-")
    print(f"\nMeasured (latency {how or '-'}; overhead = wall time outside encoder, prefill and decode):\n")
    print(report["measured_table"])
    print("\nPredicted by scripts/board_model.py for the same runs (serial):\n")
    print(report["predicted_table"])
    for run, why in report["skipped"].items():
        print(f"\nskipped {run}: {why}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
