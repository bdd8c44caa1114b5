#!/usr/bin/env python3
"""Does the Wyoming server's early final (server/wyoming/early.py) give today's final text?

Each utterance of a dataset manifest (default: the test split of make_dataset.py) gets
``--silence`` seconds of trailing silence (what Home Assistant streams before its ``audio-stop``;
zeros, or noise at ``--noise-db`` dBFS), goes through the server's PCM conversion in 100 ms
pieces into a stream session as the server makes it (2 s chunks, final passes), with an
EarlyFinal per ``--pads`` value fed alongside, its pass run when due, as the server's worker
does. At the end: the early text (when it holds) against ``finish()``'s (today's final) and the
reference, and where the pass started (seconds after the last speech window and before the
stop) and its CPU time.

    python scripts/wyoming_early.py --manifest build/evaldata/test/manifest.jsonl --silence 0.7,1.0
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from . import REPO_ROOT as ROOT
from .wyoming_finals import manifest_cases, server_pcm


def run_case(engine, pieces, pads, min_silence):
    """One utterance: today's final text and, per pad, the early pass's (text or None, its stats)."""
    from qwen3asr.server.wyoming.early import EarlyFinal

    s = engine.create_stream(chunk_size=2.0, final_pass=True)
    early = {p: EarlyFinal(min_silence_s=min_silence, pad_s=p) for p in pads}
    runs = {p: [] for p in pads}  # (stop-relative start sample, speech end, cpu s) of each pass
    for pcm in pieces:
        if not pcm.size:
            continue
        for e in early.values():
            e.feed(pcm)
        s.feed_audio(pcm)
        for p, e in early.items():
            if e.due():
                at = e.seen
                t0 = time.perf_counter()
                e.run(s)
                runs[p].append((at, e.last_speech, time.perf_counter() - t0))
    stop = sum(x.shape[0] for x in pieces)
    out = {p: (e.text(s), runs[p], stop) for p, e in early.items()}
    t0 = time.perf_counter()
    today = s.finish().text
    return today, time.perf_counter() - t0, out


def predict_waits(waits_json, silences=(0.7, 1.0), min_silence=0.3):
    """Predicted seconds from audio-stop to the transcript on the boards with the early final, for
    the bundled commands of a ``bench_waits.py --json`` report (its demo rows: the verified final
    pass's encoder, prefill and decode on each SoC, and the backlog at the clip's end).

    Home Assistant stops ``silence`` s after the speech end (the last Silero speech window); the
    early pass starts ``min_silence`` + one 100 ms feed after it, or when the stream's backlog is
    done, and takes what the verified final takes after the stop today. The wait is what is left
    of it at the stop (0 when it finished before)."""
    from qwen3asr.audio import prepare_audio
    from qwen3asr.vad import VADOptions, speech_segments

    with open(waits_json, encoding="utf-8") as f:
        rows = json.load(f)["demo"]["waits"]["rows"]
    out = {}
    for r in rows:
        pcm = prepare_audio(os.path.join(ROOT, "audio", r["clip"]))
        speech_end = speech_segments(pcm, VADOptions(speech_pad_ms=0.0))[-1].end_s
        clip_end = r["verified"]["audio_s"]
        for soc, b in r["verified"]["board"].items():
            work = b["final_s"] - b["queue_s"]
            start = max(speech_end + min_silence + 0.1, clip_end + b["queue_s"])
            for sil in silences:
                out.setdefault((soc, sil), []).append({"clip": r["clip"], "today_s": b["final_s"],
                                                       "early_s": max(0.0, start + work - (speech_end + sil)),
                                                       "pass_s": work, "start_s": start - speech_end})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--manifest", default=os.path.join(ROOT, "build", "evaldata", "test", "manifest.jsonl"))
    ap.add_argument("--silence", default="0.7,1.0", help="seconds of trailing silence added (comma list)")
    ap.add_argument("--noise-db", type=float, default=None, help="the silence as white noise at this dBFS")
    ap.add_argument("--pads", default="0.3", help="EarlyFinal pad_s values (comma list)")
    ap.add_argument("--min-silence", type=float, default=0.3, help="EarlyFinal min_silence_s")
    ap.add_argument("--limit", type=int, default=0, help="only the first N utterances")
    ap.add_argument("--json", help="write the per-utterance rows here")
    ap.add_argument("--predict", metavar="WAITS_JSON",
                    help="only the board prediction, from a `bench_waits.py --json` report")
    args = ap.parse_args()
    if args.predict:
        print("| SoC | HA silence s | today's final, s (median) | early final, s (median) | early, worst clip | "
              "pass starts after speech end, s (median) |")
        print("|---|---|---|---|---|---|")
        for (soc, sil), rs in sorted(predict_waits(args.predict, min_silence=args.min_silence).items()):
            print(f"| {soc} | {sil:g} | {statistics.median(r['today_s'] for r in rs):.2f} | "
                  f"{statistics.median(r['early_s'] for r in rs):.2f} | {max(r['early_s'] for r in rs):.2f} | "
                  f"{statistics.median(r['start_s'] for r in rs):.2f} |")
        return 0
    from qwen3asr import Qwen3ASREngine

    pads = [float(p) for p in args.pads.split(",")]
    engine = Qwen3ASREngine(args.model, backend="onnx", threads=args.threads)
    cases = manifest_cases(args.manifest)[:args.limit or None]
    rng = np.random.default_rng(0)
    rows = []
    for sil in (float(x) for x in args.silence.split(",")):
        for k, (name, pcm16, ref) in enumerate(cases):
            if k % 50 == 0:
                print(f"silence {sil:g} s: {k}/{len(cases)}", file=sys.stderr, flush=True)
            tail = np.zeros(int(sil * 16000), np.int16)
            if args.noise_db is not None:
                tail = np.clip(np.round(rng.standard_normal(tail.shape[0]) * 32768 * 10 ** (args.noise_db / 20)),
                               -32768, 32767).astype(np.int16)
            today, today_s, early = run_case(engine, server_pcm(np.concatenate([pcm16, tail]), False), pads,
                                             args.min_silence)
            for p, (got, runs, stop) in early.items():
                last = runs[-1] if runs else None
                rows.append({"name": name, "silence": sil, "pad": p, "ref": ref, "today": today, "today_s": today_s,
                             "early": got[0] if got else None, "passes": len(runs),
                             "start_after_speech_s": (last[0] - last[1]) / 16000 if last else None,
                             "start_before_stop_s": (stop - last[0]) / 16000 if last else None,
                             "pass_s": last[2] if last else None})
    print(f"{len(cases)} utterances of {args.manifest}; min_silence {args.min_silence:g} s; "
          f"silence {'zeros' if args.noise_db is None else f'noise {args.noise_db:g} dBFS'}")
    print("| silence s | pad s | early holds | = today | differ | today = ref | early final = ref | "
          "passes (mean) | pass starts before stop, s (median) | pass CPU s (median) | today after stop CPU s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for sil in sorted({r["silence"] for r in rows}):
        for p in pads:
            rs = [r for r in rows if r["silence"] == sil and r["pad"] == p]
            held = [r for r in rs if r["early"] is not None]
            same = sum(r["early"] == r["today"] for r in held)
            final = [r["early"] if r["early"] is not None else r["today"] for r in rs]
            before = [r["start_before_stop_s"] for r in held]
            print(f"| {sil:g} | {p:g} | {len(held)} | {same} | {len(held) - same} | "
                  f"{sum(r['today'] == r['ref'] for r in rs)} | {sum(f == r['ref'] for f, r in zip(final, rs))} | "
                  f"{np.mean([r['passes'] for r in rs]):.2f} | "
                  f"{statistics.median(before) if before else float('nan'):.2f} | "
                  f"{statistics.median([r['pass_s'] for r in held]) if held else float('nan'):.3f} | "
                  f"{statistics.median([r['today_s'] for r in rs]):.3f} |")
            for r in held:
                if r["early"] != r["today"]:
                    print(f"    {r['name']}: today {r['today']!r} early {r['early']!r} (ref {r['ref']!r})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, ensure_ascii=False, indent=0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
