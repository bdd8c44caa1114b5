#!/usr/bin/env python3
"""Streaming versus offline on the long multi-utterance clip (audio/long_mixed.wav).

    python scripts/eval_streaming.py --model models/default

Reports (markdown): error rate offline and streaming (default settings, random-size pieces;
and both with VAD),
rollback_tokens 2 vs 0 with chunk boundaries inside words, random pieces == fixed pieces,
VAD encoded fraction vs the speech fraction of the reference timing, decoder prefill tokens
per audio second against the offline minimum, and whether any audio was encoded twice.
``--more-clips N`` pools the error rates of many settings over N more such recordings;
``--robustness`` streams noisy, clicked and pause-free copies with and without the pause
rules (``pause_db``). ``--final-pass 1,2,4`` streams every clip as the live surfaces do
(``create_stream(chunk_size=c)``, their other defaults, 0.1 s pieces) with final passes off and
on at each chunk size: pooled MER, the CPU seconds per audio second (process time, so a shared
host's other jobs count less) and the counted work per audio second (encoded audio seconds,
prefill rows, decode steps), final passes included.

Error rate: mixed error rate, i.e. edit distance over units that are English words and
single CJK characters (lower-cased, punctuation removed), over the reference unit count.
ITN is off everywhere (the reference spells numbers as words).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import numpy as np

from . import REPO_ROOT as ROOT, child_env

SR = 16000
_UNIT = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|[a-z0-9']+")


def units(text: str) -> list:
    return _UNIT.findall(text.lower())


def mer(ref: str, hyp: str) -> float:
    """Mixed error rate: word/character edit distance / reference units."""
    r, h = units(ref), units(hyp)
    d = list(range(len(h) + 1))
    for i, a in enumerate(r, 1):
        prev, d[0] = d[0], i
        for j, b in enumerate(h, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (a != b))
    return d[len(h)] / max(1, len(r))


def stream(engine, pcm, pieces_seed=None, **kw):
    """Feed pcm in 0.1 s pieces, or random ones (10 ms to 3 s) with pieces_seed; the final result."""
    s = engine.create_stream(**kw)
    rng = np.random.default_rng(pieces_seed)
    i = 0
    while i < len(pcm):
        n = int(rng.integers(160, SR * 3)) if pieces_seed is not None else SR // 10
        s.feed_audio(pcm[i:i + n])
        i += n
    return s.finish()


def boundaries_inside_words(segments, chunk_size, total):
    """(boundaries inside an utterance, all boundaries) for chunks of chunk_size over total seconds."""
    inside = n = 0
    t = chunk_size
    while t < total:
        n += 1
        inside += any(s["start"] + 0.05 < t < s["end"] - 0.05 for s in segments)
        t += chunk_size
    return inside, n


def more_clips(n: int, work: str, segments: bool = False) -> list:
    """(pcm, reference) of n more long clips like audio/long_mixed.wav: ``make_dataset.py
    --demo-clips --seed k`` for k = 1..n (other test-split texts, pauses and voice draws),
    made once under ``work`` (needs espeak-ng and sox). ``segments``: (pcm, reference, the
    reference's speech segments) instead."""
    import subprocess

    from qwen3asr.audio import prepare_audio

    out = []
    for k in range(1, n + 1):
        d = os.path.join(work, f"seed{k}")
        if not os.path.isfile(os.path.join(d, "transcripts.json")):
            subprocess.run([sys.executable, "-m", "qwen3asr_tools.make_dataset", "--demo-clips", d,
                            "--seed", str(k)], check=True, stdout=subprocess.DEVNULL, env=child_env())
        with open(os.path.join(d, "transcripts.json"), encoding="utf-8") as f:
            clip = next(c for c in json.load(f)["clips"] if c["file"] == "long_mixed.wav")
        pcm = prepare_audio(os.path.join(d, "long_mixed.wav"))
        out.append((pcm, clip["text"], clip["segments"]) if segments else (pcm, clip["text"]))
    return out


def robustness(engine, clips: list, base: dict) -> dict:
    """Default streaming with the pause rules (``pause_db`` 25) and without (None) on altered
    copies of (pcm, reference, segments) clips: white noise at 30 / 20 dB under the speech's
    mean power, a 30 ms full-scale click at 0.5 s, the utterances joined with no gaps (alone
    and with noise 10 dB under them). Per condition and setting: (pooled MER, prefill tokens
    over the offline one-pass minimum)."""
    from qwen3asr.encoder import tokens_for_frames

    def noisy(x, snr, seed, power):
        noise = np.random.default_rng(seed).standard_normal(x.shape[0]) * np.sqrt(power / 10 ** (snr / 10))
        return np.clip(x + noise, -1, 1).astype(np.float32)

    def clicked(x):
        y = x.copy()
        y[SR // 2:SR // 2 + 480] = np.sign(np.sin(np.arange(480) * 0.3)) * 0.99
        return y

    # per clip: (index, audio, its speech segments joined with no gaps, mean power of that speech)
    prepared = []
    for i, (x, _, segs) in enumerate(clips):
        joined = np.concatenate([x[int(s["start"] * SR):int(s["end"] * SR)] for s in segs])
        prepared.append((i, x, joined, float(np.mean(joined.astype(np.float64) ** 2))))
    conditions = {
        "clean": lambda i, x, j, p: x,
        "white noise, 30 dB SNR": lambda i, x, j, p: noisy(x, 30, i, p),
        "white noise, 20 dB SNR": lambda i, x, j, p: noisy(x, 20, i, p),
        "30 ms full-scale click at 0.5 s": lambda i, x, j, p: clicked(x),
        "utterances joined, no pauses": lambda i, x, j, p: j,
        "joined + white noise, 10 dB SNR": lambda i, x, j, p: noisy(j, 10, i, p),
    }
    out = {}
    for name, alter in conditions.items():
        audio = [(alter(*c), ref) for c, (_, ref, _) in zip(prepared, clips)]
        for pause_db in (25.0, None):
            prefill = []  # (streaming prefill tokens, offline one-pass prefill) per clip

            def run(x, pause_db=pause_db):
                r = stream(engine, x, rollback_tokens=2, pause_db=pause_db, **base)
                prefill.append((r.stats.prefill_tokens, len(engine.prompt(tokens_for_frames(x.shape[0] // 160)))))
                return r

            m, _ = pooled(audio, run)
            out[f"{name}, pause_db {pause_db}"] = (m, sum(a for a, _ in prefill) / sum(b for _, b in prefill))
    return out


def final_pass_captions(engine, clips: list, sizes) -> dict:
    """Per chunk size and final pass off / on, over (pcm, reference) clips: pooled MER, CPU seconds
    and counted work per audio second (the chunks' and the final passes')."""
    from qwen3asr_tools.verified_finals import recorded_passes

    out = {}
    seconds = sum(len(x) for x, _ in clips) / SR
    for c in sizes:
        for on in (False, True):
            work = {"encoded_s": 0.0, "prefill_rows": 0, "decode_steps": 0, "final_passes": 0, "verified": 0}
            cpu = [0.0]

            def run(x, c=c, on=on, work=work, cpu=cpu):
                with recorded_passes() as calls:
                    t0 = time.process_time()
                    r = stream(engine, x, chunk_size=c, final_pass=on)
                    cpu[0] += time.process_time() - t0
                st = r.stats
                work["encoded_s"] += st.encoded_seconds + sum(len(p) / SR for p, *_ in calls)
                work["prefill_rows"] += st.prefill_tokens + sum(t.stats.prefill_tokens for *_, t in calls)
                work["decode_steps"] += st.decode_tokens + sum(t.stats.decode_tokens for *_, t in calls)
                work["final_passes"] += len(calls)
                work["verified"] += sum(t.stats.verified_tokens for *_, t in calls)
                return r

            m, per = pooled(clips, run)
            out[f"{c:g} s, final pass {'on' if on else 'off'}"] = {
                "chunk_size": c, "final_pass": on, "mer": m, "per_clip": per, "cpu_s_per_s": cpu[0] / seconds,
                **{k: v if k in ("final_passes", "verified") else v / seconds for k, v in work.items()}}
    return out


def first_words_captions(engine, clips: list, sizes, every: float = 0.5) -> dict:
    """Per chunk size, VAD off / on (final passes on, as the caption surfaces run), previews of the
    first words off / every ``every`` s: pooled MER, previews and chunks decoded, CPU seconds per
    audio second, and the median first text (seconds from the clip's start to the first result
    with text, in feeds of 0.1 s)."""
    out = {}
    seconds = sum(len(x) for x, _ in clips) / SR
    for c in sizes:
        for vad in (False, True):
            for fw in (None, every):
                n = {"previews": 0, "chunks": 0, "passes": 0, "cpu": 0.0, "first": []}

                def run(x, c=c, vad=vad, fw=fw, n=n):
                    t0 = time.process_time()
                    s = engine.create_stream(chunk_size=c, final_pass=True, vad=vad or None, first_words=fw)
                    first = None
                    for i in range(0, len(x), SR // 10):
                        r = s.feed_audio(x[i:i + SR // 10])
                        if first is None and r.text.strip():
                            first = min(len(x), i + SR // 10) / SR
                    r = s.finish()
                    n["first"].append(first if first is not None else len(x) / SR)
                    n["cpu"] += time.process_time() - t0
                    n["previews"] += r.stats.partials
                    n["chunks"] += r.stats.chunks
                    n["passes"] += r.stats.final_passes
                    return r

                m, per = pooled(clips, run)
                out[f"{c:g} s, VAD {'on' if vad else 'off'}, first words {'off' if fw is None else f'{fw:g} s'}"] = {
                    "chunk_size": c, "vad": vad, "first_words": fw, "mer": m, "per_clip": per,
                    "previews": n["previews"], "chunks": n["chunks"], "final_passes": n["passes"],
                    "cpu_s_per_s": n["cpu"] / seconds,
                    "first_text_s": float(np.median(n["first"])) if n["first"] else None}
    return out


def pooled(clips: list, run) -> tuple:
    """(pooled MER, per-clip MERs) of ``run(pcm) -> result`` over (pcm, reference) clips."""
    errs, per = 0.0, []
    for pcm, ref in clips:
        m = mer(ref, run(pcm).text)
        errs += m * len(units(ref))
        per.append(m)
    return errs / sum(len(units(ref)) for _, ref in clips), per


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="bundle (default: $QWEN3ASR_MODEL or models/default)")
    ap.add_argument("--audio", default=os.path.join(ROOT, "audio", "long_mixed.wav"))
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--chunk-size", type=float, default=4.0, help="streaming chunk (default %(default)s)")
    ap.add_argument("--memory-num", type=int, default=2)
    ap.add_argument("--json", default=None, help="also write the numbers here")
    ap.add_argument("--robustness", action="store_true",
                    help="also stream the clips (with --more-clips: all of them) with noise, a click and no pauses, "
                         "with and without the pause rules")
    ap.add_argument("--more-clips", type=int, default=0,
                    help="also pool the error rates over this many more long clips (made with make_dataset.py "
                         "--demo-clips --seed 1..N under build/eval_clips)")
    ap.add_argument("--final-pass", default=None, metavar="SIZES",
                    help="only compare final passes off / on at these chunk sizes (e.g. 1,2,4) over the clip and "
                         "the --more-clips clips")
    ap.add_argument("--first-words", default=None, metavar="SIZES",
                    help="only compare previews of each segment's first words off / 0.5 s at these chunk sizes "
                         "(final passes on, VAD off and on) over the clip and the --more-clips clips")
    args = ap.parse_args(argv)
    from qwen3asr import Qwen3ASREngine
    from qwen3asr.audio import prepare_audio

    with open(os.path.join(ROOT, "audio", "transcripts.json"), encoding="utf-8") as f:
        clip = next(c for c in json.load(f)["clips"] if c["file"] == os.path.basename(args.audio))
    ref, segs = clip["text"], clip["segments"]
    engine = Qwen3ASREngine(args.model, backend="auto", threads=args.threads)
    pcm = prepare_audio(args.audio)
    dur = len(pcm) / SR
    if args.final_pass:
        clips = [(pcm, ref)] + more_clips(args.more_clips, os.path.join(ROOT, "build", "eval_clips"))
        return report_final_pass(engine, clips, [float(c) for c in args.final_pass.split(",")], args.json)
    if args.first_words:
        clips = [(pcm, ref)] + more_clips(args.more_clips, os.path.join(ROOT, "build", "eval_clips"))
        return report_first_words(engine, clips, [float(c) for c in args.first_words.split(",")], args.json)
    out = {"model": os.path.basename(os.path.normpath(engine.bundle.path)), "audio_seconds": dur}

    t0 = time.perf_counter()
    off = engine.transcribe(pcm, max_new_tokens=512, one_pass=True)
    out["offline"] = {"mer": mer(ref, off.text), "prefill_tokens": off.stats.prefill_tokens,
                      "seconds": time.perf_counter() - t0, "text": off.text}
    base = dict(chunk_size=args.chunk_size, memory_num=args.memory_num, max_new_tokens=128)

    t0 = time.perf_counter()
    st = stream(engine, pcm, pieces_seed=0, rollback_tokens=2, **base)
    fixed = stream(engine, pcm, rollback_tokens=2, **base)
    spans = [(c.start, c.end) for c in st.chunks]
    overlap = any(b[0] < a[1] for a, b in zip(spans, spans[1:]))
    out["stream"] = {"mer": mer(ref, st.text), "stats": st.stats.to_dict(), "seconds": time.perf_counter() - t0,
                     "random_equals_fixed": st.token_ids == fixed.token_ids and st.text == fixed.text,
                     "audio_encoded_twice": overlap or st.stats.encoded_seconds > dur + 1e-6, "text": st.text}

    # chunk boundaries inside words: a chunk size that cuts utterances, started mid-word
    cut = dict(base, chunk_size=1.5)
    inside, n = boundaries_inside_words(segs, 1.5, total=dur)
    rb = {}
    for r in (0, 2):
        res = stream(engine, pcm, rollback_tokens=r, **cut)
        rb[r] = mer(ref, res.text)
    out["rollback"] = {"chunk_size": 1.5, "boundaries_inside_utterances": inside, "boundaries": n,
                       "mer_rollback0": rb[0], "mer_rollback2": rb[2]}

    speech = sum(s["end"] - s["start"] for s in segs) / dur
    try:
        v = stream(engine, pcm, rollback_tokens=2, vad=True, **base)
        ov = engine.transcribe(pcm, vad=True, max_new_tokens=512)  # offline, VAD-first segments
        out["vad"] = {"mer": mer(ref, v.text), "encoded_fraction": v.stats.encoded_fraction,
                      "speech_fraction_reference": speech, "prefill_tokens_per_second": v.stats.prefill_tokens_per_second,
                      "decode_tokens_per_second": v.stats.decode_tokens_per_second,
                      "offline_mer": mer(ref, ov.text), "offline_text": ov.text, "text": v.text}
    except FileNotFoundError as exc:
        out["vad"] = {"skipped": str(exc)}

    minimum = off.stats.prefill_tokens / dur  # offline prefill per audio second
    out["prefill_ratio"] = st.stats.prefill_tokens_per_second / minimum
    one = stream(engine, pcm, rollback_tokens=2, **dict(base, memory_num=1))
    out["memory1"] = {"mer": mer(ref, one.text), "prefill_ratio": one.stats.prefill_tokens_per_second / minimum}
    out["offline_prefill_per_second"] = minimum

    if args.more_clips:
        clips = [(pcm, ref)] + more_clips(args.more_clips, os.path.join(ROOT, "build", "eval_clips"))
        runs = {"offline, one pass": lambda x: engine.transcribe(x, max_new_tokens=512, one_pass=True),
                "offline, 30 s chunks, memory 2, rollback 5": lambda x: engine.transcribe(x, chunk_size=30.0),
                "offline, VAD-first segments": lambda x: engine.transcribe(x, vad=True, max_new_tokens=512)}
        for vad in (None, True):
            for c in (1.5, 2.0, 4.0):
                for r in (0, 2, 5):
                    runs[f"stream{', VAD' if vad else ''}, chunk {c} s, rollback {r}"] = \
                        lambda x, c=c, r=r, vad=vad: stream(engine, x, **dict(base, chunk_size=c), rollback_tokens=r,
                                                            vad=vad)
            runs[f"stream{', VAD' if vad else ''}, chunk 4.0 s, memory 1"] = \
                lambda x, vad=vad: stream(engine, x, **dict(base, memory_num=1), rollback_tokens=2, vad=vad)
        out["pooled"] = {"clips": len(clips), "units": sum(len(units(r)) for _, r in clips),
                         "runs": {name: pooled(clips, run) for name, run in runs.items()}}

    if args.robustness:
        extra = more_clips(args.more_clips, os.path.join(ROOT, "build", "eval_clips"), segments=True)
        out["robustness"] = robustness(engine, [(pcm, ref, segs)] + extra, base)

    pct = lambda x: f"{100 * x:.1f} %"  # noqa: E731
    s = out["stream"]["stats"]
    print(f"model {out['model']}, {dur:.1f} s clip, stream chunk {args.chunk_size} s x memory {args.memory_num}\n")
    print("| measure | value |\n|---|---|")
    print(f"| offline MER | {pct(out['offline']['mer'])} |")
    print(f"| streaming MER (rollback 2, random pieces) | {pct(out['stream']['mer'])} |")
    print(f"| rollback 0 / 2 MER (chunk 1.5 s, {inside}/{n} boundaries inside utterances) | "
          f"{pct(rb[0])} / {pct(rb[2])} |")
    print(f"| random pieces == fixed pieces | {out['stream']['random_equals_fixed']} |")
    if "encoded_fraction" in out["vad"]:
        print(f"| VAD: encoded fraction / reference speech fraction | {pct(out['vad']['encoded_fraction'])} / "
              f"{pct(speech)} |")
        print(f"| VAD: streaming MER / offline MER (VAD-first segments, 30 s chunks) | {pct(out['vad']['mer'])} / "
              f"{pct(out['vad']['offline_mer'])} |")
    print(f"| prefill tokens / audio s: streaming / offline (ratio) | {s['prefill_tokens_per_second']:.1f} / "
          f"{minimum:.1f} ({out['prefill_ratio']:.2f}x) |")
    print(f"| memory_num=1 instead: streaming MER, prefill ratio | {pct(out['memory1']['mer'])}, "
          f"{out['memory1']['prefill_ratio']:.2f}x |")
    print(f"| decode tokens / audio s (streaming) | {s['decode_tokens_per_second']:.1f} |")
    print(f"| audio encoded twice | {out['stream']['audio_encoded_twice']} (encoder calls {s['encoder_calls']}, "
          f"{s['encoded_seconds']:.1f} s of {dur:.1f} s) |")
    if args.more_clips:
        p = out["pooled"]
        print(f"\nPooled over {p['clips']} long clips ({p['units']} reference units): MER, then per clip\n")
        print("| run | pooled MER | per clip |\n|---|---|---|")
        for name, (m, per) in p["runs"].items():
            print(f"| {name} | {pct(m)} | {' / '.join(f'{100 * x:.1f}' for x in per)} |")
    if args.robustness:
        print("\nDefault streaming on altered clips, with the pause rules (pause_db 25) and without (None)\n")
        print("| audio, pause_db | pooled MER | prefill ratio |\n|---|---|---|")
        for name, (m, ratio) in out["robustness"].items():
            print(f"| {name} | {pct(m)} | {ratio:.2f}x |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)
    return 0


def _report(out: dict, title: str, header: str, row, json_path) -> int:
    """Print ``title``, the table ``header`` and ``row(name, r)`` of every entry; write ``out`` as JSON."""
    print(title + "\n")
    print(header)
    for name, r in out.items():
        print(row(name, r))
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    return 0


def report_final_pass(engine, clips, sizes, json_path) -> int:
    seconds = sum(len(x) for x, _ in clips) / SR
    return _report(
        final_pass_captions(engine, clips, sizes),
        f"{len(clips)} long clips, {seconds:.0f} s, {sum(len(units(r)) for _, r in clips)} reference units",
        "| chunk, final pass | pooled MER | per clip | CPU s / audio s | encoded s / s | prefill rows / s | "
        "decode steps / s | final passes (ids confirmed) |\n|---|---|---|---|---|---|---|---|",
        lambda name, r: f"| {name} | {100 * r['mer']:.1f} % | {' / '.join(f'{100 * x:.1f}' for x in r['per_clip'])} | "
                        f"{r['cpu_s_per_s']:.3f} | {r['encoded_s']:.2f} | {r['prefill_rows']:.0f} | "
                        f"{r['decode_steps']:.1f} | {r['final_passes']} ({r['verified']}) |", json_path)


def report_first_words(engine, clips, sizes, json_path) -> int:
    seconds = sum(len(x) for x, _ in clips) / SR
    return _report(
        first_words_captions(engine, clips, sizes), f"{len(clips)} long clips, {seconds:.0f} s, final passes on",
        "| chunk, VAD, first words | pooled MER | previews | chunks + final passes | decoder runs added | "
        "CPU s / audio s | first text s (median) |\n|---|---|---|---|---|---|---|",
        lambda name, r: f"| {name} | {100 * r['mer']:.1f} % | {r['previews']} | {r['chunks']} + {r['final_passes']} | "
                        f"{100 * r['previews'] / max(1, r['chunks'] + r['final_passes']):.0f} % | "
                        f"{r['cpu_s_per_s']:.3f} | {r['first_text_s']} |", json_path)


if __name__ == "__main__":
    sys.exit(main())
