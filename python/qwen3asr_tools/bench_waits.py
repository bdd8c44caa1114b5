"""The two waits a live user feels, measured on the CPU and predicted for the boards
(docs/streaming.md, "The waits users feel").

- **first text**: from the first sample of speech to the first text shown (a live result whose
  text, committed or unstable tail, is not empty);
- **final**: from the end of the audio (Wyoming ``audio-stop``, the WebSocket's end message,
  ``finish()``) to the final text. The clips end at the stop, so no VAD hangover is in it; with
  a VAD that ends the utterance itself, its hangover comes on top and is reported apart.

Each bundled command is streamed as the Wyoming server does (2 s chunks) in ``FEED_S`` pieces on a
simulated clock: a piece arrives when its last sample has been spoken, and the stream works on it
from then (or from when it finished the work before) for the wall time ``feed_audio`` took; the
pieces that arrived while it worked go in one call, as the servers feed what is waiting (so a
preview is made at most once per call, on the newest audio); the final starts at the stop or
when the backlog is done. Three finals per clip:

- **stream**: the streamed text (the last partial chunk decoded after the stop);
- **pass**: a one-pass decode of the utterance after the stop (the Wyoming default until now);
- **verified**: the same pass with the streamed text as a draft checked in its prefill
  (qwen3asr.decoding.verify_draft): the same text, fewer decode steps;
- **previews**: verified, and a preview of the open chunk every ``PREVIEW_S`` seconds
  (``TranscribeOptions.partial_every``): first words before a chunk is complete;
- **first_words**: verified, and such previews only until the utterance shows text
  (``TranscribeOptions.first_words``, the caption surfaces' default).

The board figures come from the same runs' work (encoder graphs, prefill rows, decode steps) at
each SoC's unit costs (qwen3asr_tools.board). On RKLLM a draft needs the logits of every draft row
(a GET_LOGITS run, as the rk backend makes it; its rows are unverified on a board): the
prediction charges the head on those rows and, when the pass has ids past the confirmed ones, a
second run (prefill of the prompt, the kept ids and the next id, which the logits run gave, then
the rest decoded).

``--steps``: the cost of each streaming step against how long the speaker has been talking
(continuous speech, 0-60 s): it must stay flat.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import statistics
import time
from typing import Optional, Sequence

import numpy as np

from . import REPO_ROOT

log = logging.getLogger("bench_waits")

FEED_S = 0.1  # seconds of audio per feed (what a client sends at a time)
CHUNK_S = 2.0  # the Wyoming server's chunk
CLIPS = ("en_1.wav", "en_2.wav", "en_3.wav", "zh_1.wav", "zh_2.wav", "zh_3.wav")
MODES = ("stream", "pass", "verified", "previews", "first_words")
PREVIEW_S = 0.5  # the "previews" mode: the verified final, and a preview of the open chunk every this many seconds
# Qwen3-0.6B: the output head (151936 x 1024) per row against the rest of a decoder step
# (0.44 G non-embedding parameters): a draft row whose logits RKLLM returns costs this much more
# than a prefill row (assumed proportional to weights read).
HEAD_PER_ROW = 151936 * 1024 / 0.44e9


def speech_onset(pcm: np.ndarray) -> float:
    """Seconds to the first sample of speech: Silero VAD's first segment, without its padding."""
    from qwen3asr.vad import VADOptions, speech_segments

    segs = speech_segments(pcm, VADOptions(speech_pad_ms=0.0))
    return segs[0].start_s if segs else 0.0


@contextlib.contextmanager
def draft_mode(mode: str, forced: Optional[Sequence[int]] = None):
    """Final passes off ("stream"), without a draft ("pass"), with the stream's ("verified") or a
    ``forced`` draft (the random-weight model's, whose streamed ids mean nothing)."""
    from qwen3asr.streaming import final

    original = final.FinalPasses.draft
    if mode == "pass":
        final.FinalPasses.draft = lambda self, language, ids: []
    elif forced is not None:
        final.FinalPasses.draft = lambda self, language, ids: list(forced)
    try:
        yield
    finally:
        final.FinalPasses.draft = original


def live_run(engine, pcm: np.ndarray, mode: str, stream_tokens: Optional[int] = None,
             final_tokens: Optional[int] = None, forced=None) -> dict:
    """One clip streamed on the simulated clock; the waits, the final's breakdown and its work."""
    from qwen3asr.audio import SAMPLE_RATE
    from qwen3asr_tools.board.record import graph_log

    kw = {"max_new_tokens": stream_tokens} if stream_tokens else {}
    n, step = pcm.shape[0], int(FEED_S * SAMPLE_RATE)
    onset, end = speech_onset(pcm), n / SAMPLE_RATE
    with draft_mode(mode, forced), graph_log(engine) as graphs:
        if mode == "previews":
            kw["partial_every"] = PREVIEW_S
        elif mode == "first_words":
            kw["first_words"] = PREVIEW_S
        s = engine.create_stream(chunk_size=CHUNK_S, final_pass=mode != "stream", **kw)
        if final_tokens:
            s._finals.options = dataclasses.replace(s._finals.options, max_new_tokens=final_tokens)
        clock, first, first_work, feeds = 0.0, None, None, 0
        a = 0
        while a < n:
            start = max(min(n, a + step) / SAMPLE_RATE, clock)
            # all the pieces spoken by then go in one call, as the servers feed what is waiting
            b = n if start * SAMPLE_RATE >= n else max(a + step, int(start * SAMPLE_RATE) // step * step)
            t0 = time.perf_counter()
            r = s.feed_audio(pcm[a:b])
            clock = start + time.perf_counter() - t0
            a, feeds = b, feeds + 1
            if first is None and r.text.strip():
                first = clock - onset
                seen = s._partials.ids if s._partials.ids is not None else None
                first_work = {"at_s": b / SAMPLE_RATE, "preview": seen is not None,
                              "audio_s": (s._partials.upto - s._next) / SAMPLE_RATE if seen is not None else None,
                              "ids": len(seen) if seen is not None else None,
                              "prompt_rows": engine.prompt_rows(s.options)}
        queue = max(0.0, clock - end)
        before = len(graphs.calls)
        t0 = time.perf_counter()
        r = s.finish()
        work_s = time.perf_counter() - t0
        final_graphs = tuple(graphs.calls[before:])
    final = queue + work_s
    out = {"first_work": first_work if first is not None else None, "first_text_s": first if first is not None else end + final - onset, "final_s": final,
           "queue_s": queue, "feeds": feeds, "text": r.text, "audio_s": end, "onset_s": onset, "final_graphs": final_graphs,
           "chunks": [dataclasses.asdict(c) for c in r.chunks]}
    last = s._finals.last if mode != "stream" else None
    if last is not None:
        st = last.stats
        out.update(encoder_ms=st.encoder_ms, prefill_rows=st.prefill_tokens, prefill_ms=st.prefill_ms,
                   decode_steps=st.decode_tokens, decode_ms=st.decode_ms, verified=st.verified_tokens,
                   draft=st.draft_tokens, ids=list(last.token_ids))
    else:
        c = r.chunks[-1] if r.chunks else None
        out.update(encoder_ms=c.encoder_ms if c else 0.0, prefill_rows=c.prefill_tokens if c else 0,
                   prefill_ms=c.prefill_ms if c else 0.0, decode_steps=c.decode_tokens if c else 0,
                   decode_ms=c.decode_ms if c else 0.0, verified=0, draft=0)
    return out


def board_final(run: dict, stream_run: dict, mode: str, soc: str) -> dict:
    """Seconds from the stop to the final text on ``soc``, with its parts (encoder, prefill,
    decode, queue: the decoder's backlog of the chunks streamed before the stop)."""
    from qwen3asr_tools.board.accounting import Accounting, ChunkWork
    from qwen3asr_tools.board.costs import unit_costs
    from qwen3asr_tools.board.predict import predict

    costs = unit_costs(soc)
    chunks = [ChunkWork(start=c["start"], end=c["end"], ready=min(c["end"], stream_run["audio_s"]),
                        graphs=(("merged", c["encoder_seconds"] / max(1, c["encoder_calls"])),) * c["encoder_calls"],
                        prefill_tokens=c["prefill_tokens"], decode_tokens=c["decode_tokens"])
              for c in stream_run["chunks"]]
    end = stream_run["audio_s"]
    if mode == "stream":
        acc = Accounting(label="stream", audio_seconds=end, chunks=tuple(chunks), live=True, system_tokens=0)
        last = predict(acc, costs).per_chunk[-1]
        return {"final_s": last.latency_s, "encoder_s": last.encoder_ms / 1000, "prefill_s": last.prefill_ms / 1000,
                "decode_s": last.decode_ms / 1000,
                "queue_s": last.latency_s - (last.encoder_ms + last.prefill_ms + last.decode_ms + last.run_ms) / 1000}
    free = end
    before = chunks[:len(run["chunks"])]  # the chunks decoded before the stop (the rest is the pass's)
    if before:
        p = predict(Accounting(label="before", audio_seconds=end, chunks=tuple(before), live=True,
                               system_tokens=0), costs)
        free = max([end] + [c.ready + x.latency_s for c, x in zip(before, p.per_chunk)])
    enc = sum(costs.graph_ms(part, s) for part, s in run["final_graphs"]) / 1000
    rows, steps, draft, kept = run["prefill_rows"], run["decode_steps"], run["draft"], run["verified"]
    prefill = (rows + draft * HEAD_PER_ROW) / costs.prefill_tok_s
    runs = 1
    if draft and len(run.get("ids", ())) > kept:
        # RKLLM (RKLLMTextDecoder.generate): the logits run ends at the draft and gives the first
        # id past the kept ones; the rest take a GENERATE run on prompt + kept ids + that id, one
        # decode step fewer than the CPU's (none when the text ends after the kept ids)
        prefill += (rows - draft + kept + 1) / costs.prefill_tok_s
        steps = max(0, steps - 1)
        runs = 2
    decode = steps / costs.decode_tok_s
    overhead = runs * costs.decoder_run_ms / 1000
    return {"final_s": free - end + enc + prefill + decode + overhead, "encoder_s": enc, "prefill_s": prefill,
            "decode_s": decode, "queue_s": free - end}


def board_first(run: dict, stream_run: dict, soc: str) -> float:
    """Seconds from the speech onset to the first text on ``soc``: a preview's (its audio on the
    smallest graph that holds it, its prompt and audio rows, its ids decoded) or the first chunk's
    (predicted like every chunk), from when its audio was there."""
    from qwen3asr.encoder import TOKENS_PER_CHUNK
    from qwen3asr_tools.board.accounting import Accounting, ChunkWork
    from qwen3asr_tools.board.costs import unit_costs
    from qwen3asr_tools.board.predict import predict

    costs, w = unit_costs(soc), run["first_work"]
    if w and w["preview"]:
        rows = w["prompt_rows"] + int(TOKENS_PER_CHUNK * w["audio_s"]) + 1
        ms = costs.graph_ms("merged", max(CHUNK_S, w["audio_s"])) + rows / costs.prefill_tok_s * 1000 \
            + w["ids"] / costs.decode_tok_s * 1000 + costs.decoder_run_ms
        return w["at_s"] + ms / 1000 - run["onset_s"]
    c = stream_run["chunks"][0]
    acc = Accounting(label="first", audio_seconds=stream_run["audio_s"], live=True, system_tokens=0, chunks=(
        ChunkWork(start=c["start"], end=c["end"], ready=min(c["end"], stream_run["audio_s"]),
                  graphs=(("merged", c["encoder_seconds"] / max(1, c["encoder_calls"])),) * c["encoder_calls"],
                  prefill_tokens=c["prefill_tokens"], decode_tokens=c["decode_tokens"]),))
    return min(c["end"], stream_run["audio_s"]) + predict(acc, costs).per_chunk[0].latency_s - run["onset_s"]


def waits(engine, clips: Sequence[str], stream_tokens=None, final_tokens=None, oracle: Optional[dict] = None) -> dict:
    """Every clip in every mode: CPU waits measured, board waits predicted; per-mode medians."""
    from qwen3asr.audio import prepare_audio

    rows = []
    for clip in clips:
        pcm = prepare_audio(os.path.join(REPO_ROOT, "audio", clip))
        per = {}
        for mode in MODES:
            forced = oracle.get(clip) if (oracle and mode in ("verified", "previews", "first_words")) else None
            per[mode] = live_run(engine, pcm, mode, stream_tokens, final_tokens.get(clip) if final_tokens else None,
                                 forced)
        for mode in MODES:
            per[mode]["board"] = {soc: {**board_final(per[mode], per["stream"], mode, soc),
                                        "first_text_s": board_first(per[mode], per["stream"], soc)}
                                  for soc in ("rk3576", "rk3588")}
        rows.append({"clip": clip, **{m: {k: v for k, v in per[m].items() if k != "chunks"} for m in MODES}})
    med = {m: {"first_text_s": statistics.median(r[m]["first_text_s"] for r in rows),
               "final_s": statistics.median(r[m]["final_s"] for r in rows),
               **{soc: statistics.median(r[m]["board"][soc]["final_s"] for r in rows) for soc in ("rk3576", "rk3588")},
               **{f"{soc}_first": statistics.median(r[m]["board"][soc]["first_text_s"] for r in rows)
                  for soc in ("rk3576", "rk3588")}}
           for m in MODES}
    return {"rows": rows, "median": med}


@contextlib.contextmanager
def nothing_ahead():
    """Final passes without the work done while the piece is spoken (qwen3asr.streaming.ahead)."""
    from qwen3asr.streaming import final

    original = final.FinalPasses.advance
    final.FinalPasses.advance = lambda self, audio: None
    try:
        yield
    finally:
        final.FinalPasses.advance = original


def ahead_ratio(engine, clips: Sequence[str], rounds: int, stream_tokens=None, final_tokens=None,
                oracle: Optional[dict] = None) -> dict:
    """The verified final with and without its log-mel and conv stems computed ahead, interleaved
    ``rounds`` times per clip: final waits, encoder ms and calls, and the per-pair ratio."""
    from qwen3asr.audio import prepare_audio

    pairs = []
    for clip in clips:
        pcm = prepare_audio(os.path.join(REPO_ROOT, "audio", clip))
        tokens = final_tokens.get(clip) if final_tokens else None
        forced = oracle.get(clip) if oracle else None
        for _ in range(rounds):
            on = live_run(engine, pcm, "verified", stream_tokens, tokens, forced)
            with nothing_ahead():
                off = live_run(engine, pcm, "verified", stream_tokens, tokens, forced)
            if on["ids"] != off["ids"]:
                raise AssertionError(f"{clip}: the final pass's ids differ with the work done ahead")
            pairs.append({"clip": clip, "ahead": {k: on[k] for k in ("final_s", "encoder_ms", "prefill_ms", "decode_ms")},
                          "none": {k: off[k] for k in ("final_s", "encoder_ms", "prefill_ms", "decode_ms")},
                          "ahead_calls": len(on["final_graphs"]), "none_calls": len(off["final_graphs"])})
    med = lambda key, side: statistics.median(p[side][key] for p in pairs)  # noqa: E731
    return {"pairs": pairs, "rounds": rounds,
            "median": {side: {k: med(k, side) for k in ("final_s", "encoder_ms")} for side in ("ahead", "none")},
            "ratio_final": statistics.median(p["ahead"]["final_s"] / p["none"]["final_s"] for p in pairs),
            "ratio_encoder": statistics.median(p["ahead"]["encoder_ms"] / p["none"]["encoder_ms"] for p in pairs)}


def print_ahead(title: str, a: dict) -> None:
    print(f"\n{title}: the verified final with its front end computed ahead / without, {a['rounds']} rounds per "
          f"clip, interleaved: final {a['median']['ahead']['final_s']:.3f} / {a['median']['none']['final_s']:.3f} s "
          f"(per pair **{a['ratio_final']:.2f}x**), encoder {a['median']['ahead']['encoder_ms']:.0f} / "
          f"{a['median']['none']['encoder_ms']:.0f} ms ({a['ratio_encoder']:.2f}x); ids identical in every pair")


def step_costs(engine, seconds: float = 60.0, chunk_size: float = CHUNK_S, stream_tokens=None) -> dict:
    """Continuous speech streamed for ``seconds``: each chunk's compute (ms) by the time it starts;
    the mean of the first 5 s against the last 5 s."""
    from qwen3asr.audio import SAMPLE_RATE, prepare_audio
    from qwen3asr_tools.board.record import joined_speech

    speech = joined_speech(prepare_audio(os.path.join(REPO_ROOT, "audio", "long_mixed.wav")))
    reps = int(np.ceil(seconds * SAMPLE_RATE / speech.shape[0]))
    pcm = np.tile(speech, reps)[:int(seconds * SAMPLE_RATE)]
    kw = {"max_new_tokens": stream_tokens} if stream_tokens else {}
    s = engine.create_stream(chunk_size=chunk_size, pause_db=None, **kw)
    for a in range(0, pcm.shape[0], int(FEED_S * SAMPLE_RATE)):
        s.feed_audio(pcm[a:a + int(FEED_S * SAMPLE_RATE)])
    r = s.finish()
    steps = [(c.start, c.encoder_ms + c.prefill_ms + c.decode_ms, c.prefill_tokens) for c in r.chunks]
    early = [ms for t, ms, _ in steps if t < 5.0 + 1e-6]
    late = [ms for t, ms, _ in steps if t >= seconds - 5.0 - chunk_size]
    return {"steps": steps, "early_ms": statistics.mean(early), "late_ms": statistics.mean(late),
            "ratio": statistics.mean(late) / statistics.mean(early)}


def print_report(name: str, w: dict, steps: Optional[dict]) -> None:
    print(f"\n## {name}\n")
    print("| clip | audio s | onset s | " + " | ".join(f"{m}: first / final s (CPU)" for m in MODES)
          + " | verified ids / draft | RK3576 pass / verified | RK3588 pass / verified |")
    print("|---|---|---|" + "---|" * len(MODES) + "---|---|---|")
    for r in w["rows"]:
        v = r["verified"]
        print(f"| {r['clip']} | {r['stream']['audio_s']:.2f} | {r['stream']['onset_s']:.2f} | "
              + " | ".join(f"{r[m]['first_text_s']:.2f} / {r[m]['final_s']:.3f}" for m in MODES)
              + f" | {v['verified']} / {v['draft']} | "
              + " | ".join(f"{r['pass']['board'][soc]['final_s']:.2f} / {r['verified']['board'][soc]['final_s']:.2f}"
                           for soc in ("rk3576", "rk3588")) + " |")
    m = w["median"]
    print("| median | | | " + " | ".join(f"{m[x]['first_text_s']:.2f} / {m[x]['final_s']:.3f}" for x in MODES)
          + " | | " + " | ".join(f"{m['pass'][soc]:.2f} / {m['verified'][soc]:.2f}" for soc in ("rk3576", "rk3588"))
          + " |")
    print("\nPredicted medians on the boards, first text / final (s): " + "; ".join(
        f"{x}: " + ", ".join(f"{soc.upper()} {m[x][soc + '_first']:.2f} / {m[x][soc]:.2f}" for soc in ("rk3576", "rk3588"))
        for x in MODES))
    print("\nFinal wait on the CPU, verified / pass (median of per-clip ratios): "
          f"{statistics.median(r['verified']['final_s'] / r['pass']['final_s'] for r in w['rows']):.2f}; "
          f"verified / stream: {statistics.median(r['verified']['final_s'] / r['stream']['final_s'] for r in w['rows']):.2f}")
    print("\nBreakdown of the verified final (median over clips; CPU ms measured, board s predicted):")
    keys = ("encoder_ms", "prefill_rows", "prefill_ms", "decode_steps", "decode_ms", "queue_s")
    print("| | " + " | ".join(keys) + " |\n|---|" + "---|" * len(keys))
    for mode in ("pass", "verified"):
        print(f"| CPU {mode} | " + " | ".join(f"{statistics.median(r[mode][k] for r in w['rows']):.3g}" for k in keys)
              + " |")
    for soc in ("rk3576", "rk3588"):
        for mode in ("pass", "verified"):
            b = [r[mode]["board"][soc] for r in w["rows"]]
            print(f"| {soc} {mode} (s) | " + " | ".join(
                f"{statistics.median(x[k] for x in b):.3f}" for k in ("encoder_s", "prefill_s", "decode_s", "queue_s"))
                  + " |")
    if steps:
        print(f"\nStreaming step cost, continuous speech: first 5 s {steps['early_ms']:.0f} ms, last 5 s "
              f"{steps['late_ms']:.0f} ms: **{steps['ratio']:.2f}x**")
        print("start s: step ms (prefill rows): " + ", ".join(f"{t:.0f}: {ms:.0f} ({p})" for t, ms, p in steps["steps"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="bundle (default: the bundled demo model)")
    ap.add_argument("--random-model", default=None,
                    help="also a random-weight bundle (e.g. 0.6B-shaped): token counts fixed to the demo model's")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--encoder-form", default=None, choices=("merged", "split"),
                    help="encoder form of both engines (default: the engine's; split: final passes reuse the "
                         "conv stems computed while the speaker talks, qwen3asr.streaming.ahead)")
    ap.add_argument("--steps", type=float, default=60.0, help="seconds of continuous speech for the step costs (0: none)")
    ap.add_argument("--ahead-rounds", type=int, default=0,
                    help="with --encoder-form split: this many interleaved rounds per clip of the verified final "
                         "with and without its front end computed ahead (0: none)")
    ap.add_argument("--json", help="write everything here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from qwen3asr import Qwen3ASREngine

    report = {}
    form = {"encoder_form": args.encoder_form} if args.encoder_form else {}
    with Qwen3ASREngine(args.model, backend="onnx", threads=args.threads, **form) as demo:
        w = waits(demo, CLIPS)
        st = step_costs(demo, args.steps) if args.steps else None
        report["demo"] = {"waits": w, "steps": st}
        print_report(f"CPU, {os.path.basename(demo.bundle.path)} (real text), {args.threads} threads", w, st)
        if args.ahead_rounds:
            report["demo"]["ahead"] = ahead_ratio(demo, CLIPS, args.ahead_rounds)
            print_ahead("CPU, demo model", report["demo"]["ahead"])
    if args.random_model:
        # the demo model's token counts: each chunk run and each final pass generates what the real
        # text took (random weights never end a sequence); the draft confirms as many ids as the
        # demo model's stream did (the rest of the draft differs)
        tokens = {r["clip"]: len(r["pass"]["ids"]) + 1 for r in w["rows"]}
        kept = {r["clip"]: r["verified"]["verified"] for r in w["rows"]}
        with Qwen3ASREngine(args.random_model, backend="onnx", threads=args.threads, **form) as rnd:
            oracle = {}
            from qwen3asr.audio import prepare_audio

            for clip in CLIPS:
                pcm = prepare_audio(os.path.join(REPO_ROOT, "audio", clip))
                ids = live_run(rnd, pcm, "pass", 8, tokens[clip])["ids"]
                oracle[clip] = ids[:kept[clip]] + [(t + 1) % 1000 for t in ids[kept[clip]:]]
            w2 = waits(rnd, CLIPS, stream_tokens=8, final_tokens=tokens, oracle=oracle)
            st2 = step_costs(rnd, args.steps, stream_tokens=8) if args.steps else None
            if args.ahead_rounds:
                ah = ahead_ratio(rnd, CLIPS, args.ahead_rounds, stream_tokens=8, final_tokens=tokens, oracle=oracle)
        report["random"] = {"waits": w2, "steps": st2}
        if args.ahead_rounds:
            report["random"]["ahead"] = ah
            print_ahead("CPU, random-weight model", ah)
        print_report(f"CPU, {os.path.basename(os.path.normpath(args.random_model))} (random weights, token counts "
                     f"fixed), {args.threads} threads", w2, st2)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, default=list)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
