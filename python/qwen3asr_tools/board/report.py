"""The report of scripts/board_model.py: every run and prediction of docs/board.md "Cost model".

``build_report`` runs the engine on the CPU backend (calibration at the reference design's
settings, our defaults for files and streams, a grid of streaming settings on continuous speech,
and the ``words`` and ``finals`` sections) and predicts each run on both SoCs; ``print_report``
prints it as markdown. ``prediction_table`` is the table format bench_board.py prints its
measurements in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Dict, Iterable, List, Optional

from .. import REPO_ROOT
from . import budget as bb
from . import finals as finals_section
from . import words as words_section
from .accounting import Accounting, compact_prompt
from .calibrate import (PUBLISHED_LATENCY_S, PUBLISHED_RTF, fit_prefill_rate, fit_prefill_to_latency,
                        published_target, rate_needed)
from .costs import FITTED, SOCS, UnitCosts, unit_costs
from .predict import Prediction, predict
from .record import align_log, joined_speech, record_file, record_one_pass, record_stream

OTHERS = (  # published end-to-end RTF of other designs, for the comparison table
    ("reference design (RK3576, 4 s chunks, memory 2)", {"rk3576": "0.57"}),
    ("rkvoice-stream (RKNN 2/4/15 s buckets + RKLLM)", {"rk3576": "0.36-0.44", "rk3588": "0.23-0.34"}),
)


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
    made with word timestamps and the report gains the "words" section (``words``); without,
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
            clips = words_section.clip_runs(engine, os.path.join(REPO_ROOT, "audio"))
            r["words"] = words_section.build(name, with_words[0], one_pass, *with_words[1:], clips,
                                             bb.import_rss_mb(), len(every.rows), engine.aligner_dir)
        else:
            r["words"] = None
    final_runs = finals_section.runs(engine, os.path.join(REPO_ROOT, "audio"))
    r["finals"] = finals_section.build(final_runs)
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
                        + [one_pass] + with_words + clips + grid_accs + [a for _, *pair in final_runs for a in pair]}
    r["summaries"] = [accounting_summary(a) for a in list(calib.values()) + list(calib_joined.values()) + ours
                      + grid_accs]
    return r


def print_report(r: dict) -> None:
    """The report of ``build_report`` as markdown, on stdout."""
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
    words_section.print_section(r.get("words"))
    finals_section.print_section(r.get("finals"))
