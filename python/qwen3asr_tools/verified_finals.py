"""Is the verified final the one-pass final, token for token, and what does it save after the stop?

For each utterance with text of a dataset split (``--manifest``: the demo model's test split,
``make_dataset.py --n-test 500 --seed 0``), streamed as the Wyoming server streams it (the
server's PCM conversion, 100 ms pieces, 2 s chunks or ``--chunk-size``, on bench_waits' simulated clock):

- **stream**: final passes off, the streamed text;
- **verified**: final passes on, each piece's one pass with the streamed ids as its draft
  (qwen3asr.decoding.verify_draft); every such pass is also decoded again on the same audio
  **without** a draft (the one-pass final of today), and the two id sequences are compared. At
  a difference, the top-2 logit margin of the draft-less decode there (run step by step) says
  whether it was a near tie that the many-row prefill rounded the other way.

Reports how many transcripts equal the reference, the wait after the stop (CPU, measured on a
shared host: compare within the run) and the boards' predicted waits (bench_waits.board_final,
from counted work).

``--random-model B --random-clips N``: the same exactness question on a random-weight bundle
(e.g. 0.6B-shaped): for N of the utterances, the greedy one-pass ids without a draft (as many as
the demo model's pass plus one; no loop guard, random weights never end a sequence), then the
same decode with those ids as the draft: every id is verified in the prefill. Differences are
counted with their margins.

    python scripts/verified_finals.py --manifest build/evaldata/test/manifest.jsonl --json build/verified.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import time

import numpy as np

from . import REPO_ROOT

SOCS = ("rk3576", "rk3588")


@contextlib.contextmanager
def recorded_passes():
    """The final passes a stream runs meanwhile: a list of (pcm, options, draft, Transcription)."""
    from qwen3asr.streaming import final

    calls, original = [], final.FinalPasses.decode

    def decode(self, pcm, end, in_unit, draft=()):
        out = original(self, pcm, end, in_unit, draft)
        calls.append((np.array(pcm, copy=True), self.options, tuple(int(t) for t in draft), self.last))
        return out

    final.FinalPasses.decode = decode
    try:
        yield calls
    finally:
        final.FinalPasses.decode = original


def top2(logits) -> tuple:
    """(best id, second id, their logit gap)."""
    x = np.asarray(logits, dtype=np.float64)
    a, b = np.argsort(x)[-2:][::-1]
    return int(a), int(b), float(x[a] - x[b])


def margin_at(engine, embeds: np.ndarray, options, ids, i: int) -> dict:
    """The step-by-step decode of ``embeds`` fed ``ids[:i]``: its top-2 ids and their logit gap at
    position ``i``."""
    gen = engine.decoder.start(embeds, options)
    for t in ids[:i]:
        gen.feed(int(t))
    a, b, m = top2(gen.next_logits)
    return {"position": i, "top": [a, b], "margin": m}


def margins(engine, embeds: np.ndarray, options, ids) -> tuple:
    """(the top-2 logit gap at every position of the step-by-step decode of ``embeds`` that gave
    ``ids``, the largest |logit| difference at each position between that decode and one prefill
    of ``embeds`` with all of ``ids``: what the many-row prefill rounds differently)."""
    gen, steps = engine.decoder.start(embeds, options), []
    for t in ids:
        steps.append(np.array(gen.next_logits, dtype=np.float64))
        gen.feed(int(t))
    kv = engine.decoder.kv
    x = np.concatenate([embeds, np.stack([engine.decoder.embed(int(t)) for t in ids]).astype(np.float32)])
    rows = np.arange(len(embeds) - 1, len(embeds) - 1 + len(ids))
    prefill, _ = kv.forward(x, kv.new_cache(), rows)
    return ([top2(lg)[2] for lg in steps],
            [float(np.max(np.abs(lg - p.astype(np.float64)))) for lg, p in zip(steps, prefill)])


def first_difference(a, b) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def one_pass_ids(engine, pcm: np.ndarray, options) -> tuple:
    """(ids, Request) of the one-pass decode of ``pcm`` with the final pass's ``options``, no draft."""
    from qwen3asr.onepass import transcribe_one_pass
    from qwen3asr.work import NO_WORK

    r = transcribe_one_pass(engine, pcm, options, work=NO_WORK)
    return list(r.token_ids), r


def demo_runs(engine, cases, progress=None) -> list:
    """Each case streamed with final passes off and verified, each verified pass compared with the
    draft-less one pass on the same audio."""
    from . import bench_waits as bw
    from .wyoming_finals import server_pcm

    rows = []
    for n, (name, pcm16, ref) in enumerate(cases):
        pcm = np.concatenate(server_pcm(pcm16, False))
        st = bw.live_run(engine, pcm, "stream")
        with recorded_passes() as calls:
            ver = bw.live_run(engine, pcm, "verified")
        pieces = []
        for x, opts, draft, got in calls:
            want, plain = one_pass_ids(engine, x, opts)
            ids = list(got.token_ids)
            piece = {"ids": len(want), "draft": len(draft), "kept": got.stats.verified_tokens,
                     "decode_steps": got.stats.decode_tokens, "plain_decode_steps": plain.stats.decode_tokens,
                     "same": ids == want, "fallback": got.stats.fallback_tries + plain.stats.fallback_tries}
            if ids != want:
                i = first_difference(want, ids)
                req = engine.prepare(x, opts)
                piece.update(margin_at(engine, req.embeds, opts.decoding(), want, i),
                             one_pass=plain.text, verified=got.text, within_draft=i < got.stats.verified_tokens + 1)
            pieces.append(piece)
        board = {soc: {m: bw.board_final(run, st, m, soc)["final_s"] for m, run in (("stream", st), ("verified", ver))}
                 for soc in SOCS}
        rows.append({"name": name, "reference": ref, "stream_text": st["text"], "verified_text": ver["text"],
                     "stream_ok": st["text"] == ref, "verified_ok": ver["text"] == ref,
                     "stream_final_s": st["final_s"], "verified_final_s": ver["final_s"], "board": board,
                     "pieces": pieces, "audio_s": st["audio_s"]})
        if progress:
            progress(n + 1, len(cases), rows[-1])
    return rows


def random_runs(engine, demo_engine, cases, n: int) -> list:
    """For ``n`` cases on the random-weight ``engine``: the greedy one-pass ids (as many as the demo
    model's one pass plus one) without and with themselves as the draft."""
    import dataclasses

    from qwen3asr import TranscribeOptions
    from qwen3asr.plan import final_pass_options
    from .wyoming_finals import server_pcm

    opts = final_pass_options(TranscribeOptions())
    rows = []
    for name, pcm16, _ in cases[:n]:
        pcm = np.concatenate(server_pcm(pcm16, False))
        tokens = len(one_pass_ids(demo_engine, pcm, opts)[0]) + 1
        req = engine.prepare(pcm, opts)
        dec = dataclasses.replace(opts.decoding(), max_new_tokens=tokens)
        want, plain = engine.generate(req.embeds, dec, prefix_len=req.prompt.audio_start)
        got, st = engine.generate(req.embeds, dec, prefix_len=req.prompt.audio_start, draft=want)
        row = {"name": name, "ids": len(want), "draft": st.draft_tokens, "kept": st.verified_tokens,
               "same": got == want}
        row["margins"], row["prefill_vs_step"] = margins(engine, req.embeds, dec, want)
        if got != want:
            row.update(margin_at(engine, req.embeds, dec, want, first_difference(want, got)))
        rows.append(row)
    return rows


def summary(rows: list) -> dict:
    pieces = [p for r in rows for p in r["pieces"]]
    diffs = [dict(p, name=r["name"]) for r in rows for p in r["pieces"] if not p["same"]]
    ratio = [r["verified_final_s"] / r["stream_final_s"] for r in rows if r["stream_final_s"] > 0]
    return {
        "utterances": len(rows), "passes": len(pieces), "identical_passes": sum(p["same"] for p in pieces),
        "identical_utterances": sum(all(p["same"] for p in r["pieces"]) for r in rows),
        "differences": diffs,
        "stream_right": sum(r["stream_ok"] for r in rows), "verified_right": sum(r["verified_ok"] for r in rows),
        "ids": sum(p["ids"] for p in pieces), "kept": sum(p["kept"] for p in pieces),
        "decode_steps": sum(p["decode_steps"] for p in pieces),
        "plain_decode_steps": sum(p["plain_decode_steps"] for p in pieces),
        "cpu_final_ms": {m: statistics.median(1000 * r[f"{m}_final_s"] for r in rows) for m in ("stream", "verified")},
        "cpu_final_ratio": statistics.median(ratio) if ratio else None,
        "board": {soc: {m: statistics.median(r["board"][soc][m] for r in rows) for m in ("stream", "verified")}
                  for soc in SOCS},
    }


def print_report(s: dict, rnd: list | None) -> None:
    print(f"\n{s['utterances']} utterances, {s['passes']} final passes")
    print(f"verified = one pass without a draft: {s['identical_passes']} / {s['passes']} passes, "
          f"{s['identical_utterances']} / {s['utterances']} utterances")
    for d in s["differences"]:
        print(f"  {d['name']}: position {d['position']}, margin {d['margin']:.4g} (top ids {d['top']}), "
              f"{d['one_pass']!r} / {d['verified']!r}")
    print(f"ids {s['ids']}: {s['kept']} confirmed from the draft; decode steps {s['decode_steps']} "
          f"(without the draft {s['plain_decode_steps']})")
    print("\n| final | = reference | after the stop, CPU ms (median) | RK3576 s (predicted median) | RK3588 s |")
    print("|---|---|---|---|---|")
    for m in ("stream", "verified"):
        print(f"| {m} | {s[f'{m}_right']} / {s['utterances']} | {s['cpu_final_ms'][m]:.1f} | "
              f"{s['board']['rk3576'][m]:.2f} | {s['board']['rk3588'][m]:.2f} |")
    print(f"CPU wait verified / stream (median of per-clip ratios): {s['cpu_final_ratio']:.2f}")
    if rnd is not None:
        print()
        print_report_random(rnd)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", required=True, help="a dataset manifest (jsonl): its utterances with text")
    ap.add_argument("--model", default=os.path.join(REPO_ROOT, "models", "default"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk-size", type=float, default=None,
                    help="seconds per streamed chunk (default: the Wyoming server's, bench_waits.CHUNK_S)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N utterances")
    ap.add_argument("--random-model", default=None, help="also a random-weight bundle (e.g. 0.6B-shaped)")
    ap.add_argument("--random-clips", type=int, default=40)
    ap.add_argument("--no-demo", action="store_true", help="only the random-weight model")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from qwen3asr import Qwen3ASREngine
    from .wyoming_finals import manifest_cases

    from . import bench_waits

    if args.chunk_size:
        bench_waits.CHUNK_S = args.chunk_size  # live_run's chunk
    cases = manifest_cases(args.manifest)[:args.limit]
    out = {}
    t0 = time.perf_counter()

    def progress(k, n, row):
        if k % 25 == 0 or k == n:
            print(f"{k}/{n} ({time.perf_counter() - t0:.0f} s)", flush=True)

    with Qwen3ASREngine(args.model, backend="onnx", threads=args.threads) as demo:
        if not args.no_demo:
            rows = demo_runs(demo, cases, progress)
            out["demo"] = {"summary": summary(rows), "rows": rows}
        if args.random_model:
            with Qwen3ASREngine(args.random_model, backend="onnx", threads=args.threads) as rnd:
                out["random"] = random_runs(rnd, demo, cases, args.random_clips)
    if "demo" in out:
        print_report(out["demo"]["summary"], out.get("random"))
    else:
        print_report_random(out["random"])
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)
    return 0


def print_report_random(rnd: list) -> None:
    same = sum(r["same"] for r in rnd)
    every = np.sort([m for r in rnd for m in r["margins"]])
    print(f"random weights: {same} / {len(rnd)} identical with the full draft "
          f"({sum(r['kept'] for r in rnd)} of {sum(r['draft'] for r in rnd)} draft ids kept)")
    print(f"top-2 margins of the draft-less decode over its {len(every)} positions: median {np.median(every):.3g}, "
          f"10th percentile {np.percentile(every, 10):.3g}, smallest {every[0]:.3g}")
    diff = np.array([d for r in rnd for d in r["prefill_vs_step"]])
    print(f"largest |logit| difference, one prefill with the ids against the step-by-step decode, per position: "
          f"median {np.median(diff):.3g}, largest {diff.max():.3g}")
    for r in rnd:
        if not r["same"]:
            below = int(np.searchsorted(every, r["margin"], side="right"))
            print(f"  {r['name']}: position {r['position']} of {r['ids']}, margin {r['margin']:.4g} "
                  f"({below} of {len(every)} positions have a margin this small or smaller; logit difference "
                  f"there {r['prefill_vs_step'][r['position']]:.3g})")


if __name__ == "__main__":
    raise SystemExit(main())
