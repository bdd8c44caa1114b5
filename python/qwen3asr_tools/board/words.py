"""Word timestamps on the board: what the forced aligner adds to a transcription's time, and what
the ASR model and the aligner need in memory together, per SoC (docs/board.md section 8, "Word
timestamps and memory"; part of scripts/board_model.py's report).

Time: the runs of ``record``'s functions with ``word_timestamps=True`` (files as
``transcribe(word_timestamps=True)`` decodes them, streams with each committed segment aligned),
predicted with and without their alignments (``Accounting.without_words``: the ASR work of a
run is the same either way). Memory: ``budget.memory_budget`` for several choices of what
to load (``LoadChoice``), each also timed on the same runs with its encoder variants
(``with_sizes``: every graph runs on the smallest loaded variant that holds it).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import os
import statistics
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from . import budget as bb
from .accounting import Accounting
from .costs import (DYNAMIC_SHAPE_SCALE, DYNAMIC_SHAPE_SENSITIVITY, RKLLM_BENCHMARK, RKLLM_BENCHMARK_RELEASE,
                    RKLLM_MEMORY_MB, SOCS, UnitCosts, unit_costs)
from .predict import predict
from .record import record_one_pass

ALL_SIZES = (2, 3, 4, 5, 8)  # merged encoder variants of a bundle exported with the default durations
GOAL_RATIO = 2.0  # issue 24: word timestamps at most double the time of the transcription alone
CLIPS = ("en_1.wav", "en_2.wav", "en_3.wav", "zh_1.wav", "zh_2.wav", "zh_3.wav")  # the short bundled clips


def _remap(graphs, sizes: Optional[Sequence[int]], who: str):
    if sizes is None:
        return graphs
    out = []
    for part, s in graphs:
        fit = [v for v in sorted(sizes) if v >= s - 1e-9]
        if part == "frontend":
            out.append((part, s))
        elif not fit:
            raise ValueError(f"the run used a {s:g} s {who} encoder graph, but the largest loaded size is "
                             f"{max(sizes):g} s; keep 8 s (long audio chains at 8 s windows)")
        else:
            out.append((part, float(fit[0])))
    return tuple(out)


def with_sizes(acc: Accounting, asr_sizes: Optional[Sequence[int]] = None,
               aligner_sizes: Optional[Sequence[int]] = None) -> Accounting:
    """``acc`` as it runs with only these encoder variants loaded (None: as recorded): each merged or
    back-end graph on the smallest loaded size that holds it, as AudioEncoder.pick does. The
    recorded runs chain long audio at 8 s, so the sets must keep their largest recorded size."""
    return dataclasses.replace(
        acc, chunks=tuple(dataclasses.replace(c, graphs=_remap(c.graphs, asr_sizes, "ASR")) for c in acc.chunks),
        alignments=tuple(dataclasses.replace(a, graphs=_remap(a.graphs, aligner_sizes, "aligner"))
                         for a in acc.alignments))


@dataclasses.dataclass(frozen=True)
class Case:
    """Runs predicted together: with words, and the transcription alone that they replace."""

    label: str
    words: Tuple[Accounting, ...]  # with alignments
    alone: Tuple[Accounting, ...]  # what the same audio costs without word timestamps (our defaults)
    live: bool = False  # streams: caption latency applies

    def sized(self, asr_sizes, aligner_sizes) -> "Case":
        return dataclasses.replace(self, words=tuple(with_sizes(a, asr_sizes, aligner_sizes) for a in self.words),
                                   alone=tuple(with_sizes(a, asr_sizes) for a in self.alone))


def case_time(case: Case, costs: UnitCosts, overlap: bool = False) -> dict:
    """Predicted time of ``case``: RTF alone and with words, alignment s per audio s, their ratio;
    live, caption latency (median over the later chunks, max) with and without words and the
    words' own latency (segment audio complete -> its words)."""
    pw = [predict(a, costs, overlap) for a in case.words]
    pa = [predict(a, costs, overlap) for a in case.alone]
    audio = sum(a.audio_seconds for a in case.words)
    wall_w, wall_a = sum(p.wall_s for p in pw), sum(p.wall_s for p in pa)
    row = {"audio_s": audio, "rtf_alone": wall_a / audio, "rtf_words": wall_w / audio,
           "align_per_s": sum(p.align_s for p in pw) / audio, "ratio": wall_w / wall_a,
           "alignments": sum(len(p.per_align) for p in pw)}
    if case.live:
        row.update(latency_alone=(pa[0].latency_median_s, pa[0].latency_max_s),
                   latency_words=(pw[0].latency_median_s, pw[0].latency_max_s),
                   words_latency=(pw[0].words_latency_median_s, pw[0].words_latency_max_s))
    return row


@dataclasses.dataclass(frozen=True)
class LoadChoice:
    """What an rk engine with word timestamps loads."""

    label: str
    asr_sizes: Tuple[int, ...]  # merged ASR encoder sizes in use (s)
    aligner_sizes: Tuple[int, ...]  # merged aligner encoder sizes in use (s)
    # RKOptions.max_context, both RKLLM handles; None: the runtime's default (as converted, 4096 / 2048;
    # at most 1024 each on a board under backends.rk.backend.SMALL_BOARD_RAM: default_context)
    context: Optional[int] = None
    shapes: str = "dynamic"  # the encoders' .rknn kind: scripts/onnx2rknn.py --shapes (dynamic: its default)

    @property
    def today(self) -> bool:
        """Reachable with today's options: encoder_sizes and max_context apply to both models."""
        return self.asr_sizes == self.aligner_sizes

    @property
    def how(self) -> str:
        ctx = f", rk=RKOptions(max_context={self.context})" if self.context else ""
        kind = ("one dynamic-shape .rknn per encoder (onnx2rknn's default)" if self.shapes == "dynamic" else
                "one .rknn per size (onnx2rknn --shapes fixed)")
        if self.today:
            sizes = "" if self.asr_sizes == ALL_SIZES else f"encoder_sizes={list(self.asr_sizes)}"
            return kind + "; " + (", ".join(x for x in (sizes, ctx.lstrip(", ")) if x) or "library defaults")
        return (f"{kind}; ASR encoder_sizes={list(self.asr_sizes)}, the aligner's {list(self.aligner_sizes)}: needs "
                f"an aligner-only encoder_sizes option{ctx}")


CHOICES = (  # the choices printed in the report (the recommendation searches every combination)
    LoadChoice("defaults", ALL_SIZES, ALL_SIZES),
    LoadChoice("defaults, context 2048", ALL_SIZES, ALL_SIZES, 2048),
    LoadChoice("defaults, context 1024", ALL_SIZES, ALL_SIZES, 1024),
    LoadChoice("fixed shapes, all sizes", ALL_SIZES, ALL_SIZES, shapes="fixed"),
    LoadChoice("fixed shapes, sizes 4, 8", (4, 8), (4, 8), shapes="fixed"),
    LoadChoice("fixed shapes, sizes 8, context 2048", (8,), (8,), 2048, shapes="fixed"),
    LoadChoice("fixed shapes, ASR 8 + aligner 4, 8", (8,), (4, 8), shapes="fixed"),
)


def default_context(converted: int, board_mb: float) -> int:
    """The context the rk backend gives a handle converted for ``converted`` positions when
    max_context is not set, on a board of ``board_mb`` MB (qwen3asr.backends.rk.backend.resolve_rkllm)."""
    from qwen3asr.backends.rk.backend import SMALL_BOARD_CONTEXT, SMALL_BOARD_RAM

    return min(converted, SMALL_BOARD_CONTEXT) if board_mb * bb.MB < SMALL_BOARD_RAM else converted


def budgets(choice: LoadChoice, baseline_mb: float, embed_rows: int,
            board_mb: float = bb.BOARD_MB) -> Dict[str, bb.MemoryBudget]:
    """The memory budget of ``choice`` on each SoC."""
    out = {}
    published = f"Rockchip rknn-llm benchmark {RKLLM_BENCHMARK_RELEASE}, Qwen3-0.6B: " + ", ".join(
        f"{soc.upper()} {RKLLM_BENCHMARK[soc][0].upper()} {RKLLM_MEMORY_MB[soc]:g} MB" for soc in SOCS)
    for soc in SOCS:
        out[soc] = bb.memory_budget(
            soc, RKLLM_MEMORY_MB[soc], choice.asr_sizes, choice.aligner_sizes, baseline_mb, embed_rows,
            label=choice.label, board_mb=board_mb,
            asr_context=choice.context or default_context(bb.ASR_RKLLM_CONTEXT, board_mb),
            aligner_context=min(choice.context or default_context(bb.ALIGNER_RKLLM_CONTEXT, board_mb),
                                bb.ALIGNER_RKLLM_CONTEXT),
            shapes=choice.shapes, rkllm_source=published)
    return out


def evaluate(choice: LoadChoice, cases: Mapping[str, Case], baseline_mb: float, embed_rows: int,
             board_mb: float = bb.BOARD_MB) -> dict:
    """Per SoC: ``choice``'s memory (low, high MB), whether it fits, and the time of the ``cases``
    with its variants (streams with overlap, as the rk backend runs them)."""
    row = {"choice": dict(dataclasses.asdict(choice), today=choice.today, how=choice.how), "socs": {}}
    for soc, b in budgets(choice, baseline_mb, embed_rows, board_mb).items():
        costs = unit_costs(soc, dynamic_scale=DYNAMIC_SHAPE_SCALE if choice.shapes == "dynamic" else 1.0)
        times = {key: case_time(case.sized(choice.asr_sizes, choice.aligner_sizes), costs, overlap=case.live)
                 for key, case in cases.items()}
        row["socs"][soc] = {"low_mb": b.low_mb, "high_mb": b.high_mb, "available_mb": b.available_mb,
                            "fits": b.fits, "fits_low": b.low_mb <= b.available_mb, "times": times,
                            "items": [dataclasses.asdict(i) for i in b.items]}
    return row


def all_choices() -> List[LoadChoice]:
    """Every set of sizes that keeps 8 s (long audio chains at 8 s) for each model, both contexts:
    with fixed-shape models (every pair of sets), and with dynamic-shape ones (the same set for both)."""
    subsets = [tuple(sorted(set(c) | {8})) for n in range(5) for c in itertools.combinations((2, 3, 4, 5), n)]
    label = lambda a, b, ctx, kind: (f"{kind} shapes, ASR {', '.join(map(str, a))} + aligner "  # noqa: E731
                                     f"{', '.join(map(str, b))}" + (f", context {ctx}" if ctx else ""))
    return [LoadChoice(label(a, b, ctx, "fixed"), a, b, ctx, "fixed") for a in subsets for b in subsets
            for ctx in (None, 2048)] + [LoadChoice(label(a, a, ctx, "dynamic"), a, a, ctx) for a in subsets
                                        for ctx in (None, 2048)]


def meets_goal(soc_row: dict, keys: Sequence[str]) -> bool:
    """Whether word timestamps at most double the time of the ``keys`` runs (one SoC's row)."""
    return all(soc_row["times"][k]["ratio"] <= GOAL_RATIO for k in keys)


def recommend(rows: Sequence[dict], file_keys: Sequence[str], stream_key: str) -> Dict[str, dict]:
    """Per SoC, among ``rows`` (evaluate) that fit the board at the low estimate: those that meet
    the goal for files, the fastest live stream (RTF with words on ``stream_key``); if none meets
    it, the smallest file ratio; ties go to the choice that fits at the high estimate, then to the
    smaller one. Separately for today's options ("today") and for any choice of variants ("any":
    an aligner-only encoder_sizes option would be needed)."""
    out = {}
    for soc in SOCS:
        def safer(r):
            x = r["socs"][soc]
            return (not x["fits"], x["high_mb"])

        pick = {}
        for scope, pool in (("today", [r for r in rows if r["choice"]["today"]]), ("any", list(rows))):
            fit = [r for r in pool if r["socs"][soc]["fits_low"]]
            goal = [r for r in fit if meets_goal(r["socs"][soc], file_keys)]
            if goal:
                best = min(goal, key=lambda r: (r["socs"][soc]["times"][stream_key]["rtf_words"],) + safer(r))
            elif fit:
                best = min(fit, key=lambda r: (max(r["socs"][soc]["times"][k]["ratio"] for k in file_keys),)
                           + safer(r))
            else:
                best = None
            pick[scope] = None if best is None else {
                "label": best["choice"]["label"], "how": best["choice"]["how"], "goal": bool(goal),
                "low_mb": best["socs"][soc]["low_mb"], "high_mb": best["socs"][soc]["high_mb"],
                "fits_high": best["socs"][soc]["fits"], "row": best}
        out[soc] = pick
    return out


def graphs_used(accs: Sequence[Accounting]) -> Tuple[Dict[str, int], Dict[str, int]]:
    """(ASR, aligner) encoder calls by graph ("merged 4 s": count) over ``accs``."""
    asr, al = collections.Counter(), collections.Counter()
    for a in accs:
        for c in a.chunks:
            asr.update(f"{p} {s:g} s" for p, s in c.graphs)
        for w in a.alignments:
            al.update(f"{p} {s:g} s" for p, s in w.graphs)
    return dict(sorted(asr.items())), dict(sorted(al.items()))


def alignment_summary(acc: Accounting) -> str:
    al = acc.alignments
    if not al:
        return f"{acc.label}: no alignments"
    secs = [a.end - a.start for a in al]
    _, graphs = graphs_used([acc])
    g = ", ".join(f"{v} x {k}" for k, v in graphs.items())
    return (f"{acc.label}: {len(al)} alignments of {statistics.mean(secs):.1f} s of audio on average (max "
            f"{max(secs):.1f}), {sum(a.words for a in al)} words ({sum(a.words for a in al) / acc.audio_seconds:.2f} "
            f"per audio s), prefill {statistics.mean(a.positions for a in al):.0f} positions on average (max "
            f"{max(a.positions for a in al)}), aligner encoder calls {g}")


def flop_report() -> dict:
    """The compute ratio of the two encoders and its parts (budget)."""
    return {
        "params": {"asr": bb.encoder_params(bb.ASR_AUDIO), "aligner": bb.encoder_params(bb.ALIGNER_AUDIO)},
        "gmacs_8s": {p: (bb.part_macs(bb.ASR_AUDIO, p) / 1e9, bb.part_macs(bb.ALIGNER_AUDIO, p) / 1e9)
                     for p in ("merged", "frontend", "backend")},
        "ratio": {s: bb.encoder_flop_ratio(s) for s in ALL_SIZES},
        "transformer_ratio": bb.transformer_flop_ratio(), "stem_share_asr": bb.stem_share(bb.ASR_AUDIO),
        "param_ratio": bb.encoder_params(bb.ALIGNER_AUDIO) / bb.encoder_params(bb.ASR_AUDIO),
    }


def clip_runs(engine, root: str) -> List[Accounting]:
    """The short bundled clips, each transcribed in one pass with its words (as transcribe() does)."""
    from qwen3asr.audio import prepare_audio

    return [record_one_pass(engine, prepare_audio(os.path.join(root, c)), f"file, one pass, {c}",
                            word_timestamps=True)[0] for c in CLIPS]


def build(name: str, file_words: Accounting, one_pass: Accounting, stream_words: Accounting,
          joined_words: Accounting, clips: Sequence[Accounting], baseline_mb: float, embed_rows: int,
          aligner: str) -> dict:
    """The report's word-timestamp section from the recorded runs of clip ``name`` (see
    report.build_report): the file with words (VAD-first), its one pass alone, the streams
    with words, the short clips with words; the measured Python baseline (MB) and the aligner's
    distinct embedding rows."""
    cases = {
        "file": Case(f"file {name}: VAD-first + words vs one pass alone", (file_words,), (one_pass,)),
        "file_vad": Case(f"file {name}: VAD-first + words vs VAD-first alone", (file_words,),
                         (file_words.without_words(),)),
        "clips": Case(f"{len(clips)} short clips: one pass + words vs one pass", tuple(clips),
                      tuple(c.without_words() for c in clips)),
        "stream": Case(stream_words.label, (stream_words,), (stream_words.without_words(),), live=True),
        "joined": Case(joined_words.label, (joined_words,), (joined_words.without_words(),), live=True),
    }
    file_keys = ("file", "clips")
    time = []
    for key, case in cases.items():
        for soc in SOCS:
            for ov in ((False, True) if case.live else (False,)):
                time.append({"case": key, "label": case.label, "soc": soc, "overlap": ov,
                             **case_time(case, unit_costs(soc), ov)})
    upper = {soc: dataclasses.replace(unit_costs(soc), aligner_scale=(
        ("merged", bb.transformer_flop_ratio()), ("frontend", bb.part_flop_ratio("frontend")),
        ("backend", bb.part_flop_ratio("backend")))) for soc in SOCS}
    sensitivity = {
        "transformer_ratio": {soc: {k: case_time(cases[k], c)["ratio"] for k in file_keys} for soc, c in upper.items()},
        "rtf_fit": {k: case_time(cases[k], unit_costs("rk3576", prefill="rtf-fit"))["ratio"] for k in file_keys},
        "head_1_gflops": {soc: {k: case_time(cases[k], dataclasses.replace(unit_costs(soc), head_gflops=1.0))
                                ["ratio"] for k in file_keys} for soc in SOCS},
        "dynamic_slower": {soc: dict({k: case_time(cases[k], c)["ratio"] for k in file_keys},
                                     joined_rtf=case_time(cases["joined"], c, overlap=True)["rtf_words"])
                           for soc, c in ((soc, unit_costs(soc, dynamic_scale=DYNAMIC_SHAPE_SENSITIVITY))
                                          for soc in SOCS)},
    }
    timed = {k: cases[k] for k in ("file", "clips", "joined")}
    rows = [evaluate(ch, timed, baseline_mb, embed_rows) for ch in CHOICES]
    rec = recommend([evaluate(ch, timed, baseline_mb, embed_rows) for ch in all_choices()], file_keys, "joined")
    big = evaluate(CHOICES[0], timed, baseline_mb, embed_rows, board_mb=2 * bb.BOARD_MB)
    used = {  # what each policy runs: ASR graphs of the transcription alone, aligner graphs with words
        "asr": {"file, one pass": graphs_used([one_pass])[0], "file, VAD-first": graphs_used([file_words])[0],
                "short clips, one pass": graphs_used(clips)[0], stream_words.label: graphs_used([stream_words])[0],
                joined_words.label: graphs_used([joined_words])[0]},
        "aligner": {"file, VAD-first segments": graphs_used([file_words])[1],
                    "short clips": graphs_used(clips)[1], stream_words.label: graphs_used([stream_words])[1],
                    joined_words.label: graphs_used([joined_words])[1]}}
    return {
        "aligner": aligner, "flops": flop_report(),
        "aligner_ms": {soc: {s: unit_costs(soc).aligner_graph_ms("merged", s) for s in ALL_SIZES}
                       for soc in SOCS},
        "cases": {k: c.label for k, c in cases.items()}, "time": time, "sensitivity": sensitivity,
        "graphs_used": used,
        "summaries": [alignment_summary(a) for a in (file_words, stream_words, joined_words)]
        + [alignment_summary(dataclasses.replace(clips[0], label=f"{len(clips)} short clips", alignments=tuple(
            w for c in clips for w in c.alignments), audio_seconds=sum(c.audio_seconds for c in clips)))],
        "memory": {"baseline_mb": baseline_mb, "embed_rows": embed_rows, "board_mb": bb.BOARD_MB, "os_mb": bb.OS_MB,
                   "choices": rows, "defaults_8gb": {soc: {k: big["socs"][soc][k] for k in
                                                           ("low_mb", "high_mb", "available_mb", "fits", "fits_low")}
                                                     for soc in SOCS}},
        "recommendation": rec,
        "goal_met": {soc: all(t["ratio"] <= GOAL_RATIO for t in time if t["soc"] == soc and t["case"] in file_keys)
                     for soc in SOCS},
    }


def _pair(x: Tuple[Optional[float], Optional[float]]) -> str:
    return " / ".join("-" if v is None else f"{v:.2f}" for v in x)


def print_section(w: Optional[dict]) -> None:
    """The report's word-timestamp and memory section (markdown)."""
    print("\n## Word timestamps (the forced aligner) and memory with both models\n")
    if w is None:
        print("No aligner: run with --aligner DIR (docs/board.md section 8 says how to get a random one for the "
              "counts).")
        return
    f = w["flops"]
    print(f"Aligner bundle used for the counts: {w['aligner']}\n")
    print("| encoder graph (8 s) | ASR 0.6B GMAC | aligner GMAC | ratio |")
    print("|---|---|---|---|")
    for p, (a, b) in f["gmacs_8s"].items():
        print(f"| {p}{' (one 1 s chunk)' if p == 'frontend' else ''} | {a:.2f} | {b:.2f} | {b / a:.3f} |")
    print("\nmerged ratio by graph size: " + ", ".join(f"{s:g} s {r:.4f}" for s, r in f["ratio"].items())
          + f"; without the conv stem ({100 * f['stem_share_asr']:.0f} % of the ASR graph's MACs) "
            f"{f['transformer_ratio']:.3f}; parameters {f['params']['aligner'] / 1e6:.1f} M / "
            f"{f['params']['asr'] / 1e6:.1f} M = {f['param_ratio']:.3f}")
    print("aligner encoder ms per merged graph (2/3/4/5/8 s): " + "; ".join(
        f"{soc} " + " / ".join(f"{ms:.0f}" for ms in v.values()) for soc, v in w["aligner_ms"].items()) + "\n")
    print("| run | SoC | overlap | RTF alone | RTF with words | alignment s per audio s | ratio | goal <= 2 "
          "| caption latency median / max s, alone | with words | words latency median / max s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for t in w["time"]:
        lat = t.get("latency_alone")
        print(f"| {t['label']} | {t['soc']} | {'yes' if t['overlap'] else 'no'} | {t['rtf_alone']:.3f} "
              f"| {t['rtf_words']:.3f} | {t['align_per_s']:.3f} | {t['ratio']:.2f} "
              f"| {'yes' if t['ratio'] <= GOAL_RATIO else 'no'} | {_pair(lat) if lat else '-'} "
              f"| {_pair(t['latency_words']) if lat else '-'} | {_pair(t['words_latency']) if lat else '-'} |")
    sens = w["sensitivity"]
    print("\nfile ratios (long file / short clips) if the aligner encoder cost the transformer-only ratio: "
          + "; ".join(f"{soc} {v['file']:.2f} / {v['clips']:.2f}" for soc, v in sens["transformer_ratio"].items())
          + f"; RK3576 with the RTF-fitted prefill {sens['rtf_fit']['file']:.2f} / {sens['rtf_fit']['clips']:.2f}; "
          + "head at 1 GFLOP/s: " + "; ".join(f"{soc} {v['file']:.2f} / {v['clips']:.2f}"
                                              for soc, v in sens["head_1_gflops"].items()))
    print(f"if the dynamic-shape encoders ran x{DYNAMIC_SHAPE_SENSITIVITY:g} slower than fixed shapes (assumed "
          f"x{DYNAMIC_SHAPE_SCALE:g}; unmeasured): file ratios (long file / short clips) and continuous stream RTF "
          "with words: " + "; ".join(f"{soc} {v['file']:.2f} / {v['clips']:.2f}, RTF {v['joined_rtf']:.3f}"
                                      for soc, v in sens["dynamic_slower"].items()))
    print("goal met for files (ratio <= 2): " + ", ".join(f"{soc} {'yes' if ok else 'no'}"
                                                         for soc, ok in w["goal_met"].items()) + "\n")
    for kind, what in (("asr", "ASR encoder graphs run"), ("aligner", "aligner encoder graphs run")):
        print(f"- {what}: " + "; ".join(f"{k}: " + ", ".join(f"{n} x {g}" for g, n in v.items())
                                        for k, v in w["graphs_used"][kind].items()))
    for s in w["summaries"]:
        print("-", s)
    m = w["memory"]
    print(f"\n### Memory on a 4 GB board (MB = 10^6 bytes; {m['board_mb']:.0f} MB RAM, {m['os_mb']:.0f} kept for "
          "the OS; "
          f"Python baseline {m['baseline_mb']:.0f} MB measured here; {m['embed_rows']} distinct embedding rows "
          f"touched by the aligner in these runs)\n")
    print("| choice | SoC | total MB low-high | fits: low / high | file ratio | clips ratio "
          "| continuous stream, overlap: RTF with words | its caption latency median s | how |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in m["choices"]:
        ch = row["choice"]
        for soc, x in row["socs"].items():
            t = x["times"]
            print(f"| {ch['label']} | {soc} | {x['low_mb']:.0f}-{x['high_mb']:.0f} "
                  f"| {'yes' if x['fits_low'] else 'no'} / {'yes' if x['fits'] else 'no'} "
                  f"| {t['file']['ratio']:.2f} | {t['clips']['ratio']:.2f} | {t['joined']['rtf_words']:.3f} "
                  f"| {t['joined']['latency_words'][0]:.2f} | {ch['how']} |")
    big = m["defaults_8gb"]
    print("\ndefaults on an 8 GB board: " + "; ".join(
        f"{soc} {x['low_mb']:.0f}-{x['high_mb']:.0f} of {x['available_mb']:.0f} MB (fits: low "
        f"{'yes' if x['fits_low'] else 'no'}"
        f", high {'yes' if x['fits'] else 'no'})" for soc, x in big.items()))
    print("\n**Recommendation for a 4 GB board** (every combination of variants that keeps 8 s, both contexts; fits at "
          "the low estimate; then the goal for files; then the fastest live stream):\n")
    for soc, pick in w["recommendation"].items():
        for scope in ("today", "any"):
            p = pick[scope]
            what = "with today's options" if scope == "today" else "with an aligner-only encoder_sizes option"
            if p is None:
                print(f"- {soc}, {what}: nothing fits")
                continue
            t = p["row"]["socs"][soc]["times"]
            print(f"- {soc}, {what}: **{p['label']}** ({p['how']}): {p['low_mb']:.0f}-{p['high_mb']:.0f} MB "
                  f"(high estimate {'fits' if p['fits_high'] else 'does not fit'}); word timestamps "
                  f"x{t['file']['ratio']:.2f} "
                  f"(long file) / x{t['clips']['ratio']:.2f} (short clips): goal {'met' if p['goal'] else 'missed'}; "
                  f"continuous stream RTF {t['joined']['rtf_words']:.3f}")
    fixed = next(r for r in m["choices"] if r["choice"]["shapes"] == "fixed" and r["choice"]["asr_sizes"] == ALL_SIZES)
    print(f"- {fixed['choice']['label']} ({fixed['choice']['how']}): " + "; ".join(
        f"{soc} {x['low_mb']:.0f}-{x['high_mb']:.0f} MB (fits: low {'yes' if x['fits_low'] else 'no'}, high "
        f"{'yes' if x['fits'] else 'no'})" for soc, x in fixed["socs"].items()))
    print("\nDefaults: scripts/onnx2rknn.py's dynamic shapes (one .rknn per encoder for every size), all five sizes, "
          "the RKLLM contexts as converted.")
    shown = set()
    for soc, pick in w["recommendation"].items():
        for scope in ("today", "any"):
            p = pick[scope]
            if p is not None and p["label"] not in shown:
                shown.add(p["label"])
                print(f"\n{p['label']}:\n")
                print(_items_table(p["row"]))
    print("\ndefaults:\n")
    print(_items_table(m["choices"][0]))


def _items_table(row: dict) -> str:
    socs = list(row["socs"])
    lines = ["| item | " + " | ".join(f"{s} MB" for s in socs) + " | source |", "|" + "---|" * (len(socs) + 2)]
    for i, it in enumerate(row["socs"][socs[0]]["items"]):
        cells = []
        for s in socs:
            x = row["socs"][s]["items"][i]
            cells.append(f"{x['low_mb']:.0f}" if abs(x["high_mb"] - x["low_mb"]) < 0.5 else
                         f"{x['low_mb']:.0f}-{x['high_mb']:.0f}")
        lines.append(f"| {it['name']} | " + " | ".join(cells) + f" | {it['source']} |")
    lines.append("| total | " + " | ".join(f"{row['socs'][s]['low_mb']:.0f}-{row['socs'][s]['high_mb']:.0f}"
                                          for s in socs) + " | |")
    return "\n".join(lines)


__all__ = ["ALL_SIZES", "CHOICES", "Case", "GOAL_RATIO", "LoadChoice", "all_choices", "budgets", "build", "case_time",
           "evaluate", "graphs_used", "meets_goal", "print_section", "recommend", "with_sizes"]
