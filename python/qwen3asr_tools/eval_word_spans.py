#!/usr/bin/env python3
"""Word spans fitted to the speech against the aligner's raw times, on synthetic speech.

    python scripts/eval_word_spans.py [--aligner models/default-aligner] [--clips 120] [--seed 4242] \
        [--json out.json]

Clips of the held-out test plan (``make_dataset.plan_split("test", ...)``: held-out voices and
speeds, 85 % with noise at 10-30 dB SNR, 0.1-0.6 s of the same noise before and after the speech)
are rendered and aligned with their labels, each as one segment through
``qwen3asr.aligner.segments.align_segments`` with ``word_spans`` "raw" and "speech". Two sets:

- **demo**: the clips as make_dataset renders them (continuous speech between two pads);
- **paused**: the same clips cut at a third of their word boundaries (at least one), with
  0.3-1.5 s of the clip's own leading pad (its noise or silence) put in each cut.

Each word's times are compared with libespeak-ng's (espeak_align: a word runs from its event to
the next word's, so a short pause espeak-ng makes itself stays inside the word before it). Per
set: mean |start shift| and |end shift| (ms), how much of the words' spans lies in silence (the
pads and the inserted pauses: share of all span time, and ms per word), and the segments
flagged as collapsed. Needs espeak-ng and sox (scripts/apt-packages.txt).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import REPO_ROOT as ROOT

GAP_SECONDS = (0.3, 1.5)  # pauses put into the paused set
GAP_SHARE = 3  # a pause at one word boundary in this many (at least one per clip)


@dataclass(frozen=True)
class Case:
    """One aligned input: its audio, label and language, the reference word times and where the
    silence is (seconds)."""
    name: str
    language: str
    text: str
    pcm: np.ndarray
    ref: Tuple[Tuple[float, float], ...]
    silence: Tuple[Tuple[float, float], ...]


@dataclass(frozen=True)
class Figures:
    """One set's figures for one kind of spans."""
    inputs: int
    words: int
    start_ms: float  # mean |start - reference start|
    end_ms: float  # mean |end - reference end|
    silence_share: float  # share of the words' span time inside silence
    silence_ms: float  # mean silence inside one word's span
    zero_length: int  # words with end == start
    flagged: int  # segments flagged as collapsed


def render(n: int, seed: int, tmp: str) -> List[Case]:
    """The speech clips among the first ``n`` of the test plan for ``seed``, rendered into ``tmp``."""
    from qwen3asr.audio import prepare_audio

    from . import make_dataset as md
    from .train_aligner import clip_units

    md.make_noise_pool(tmp)
    out = []
    for spec in md.plan_split("test", n, seed):
        if spec.language == "None":
            continue
        md.render_clip(spec, tmp, tmp)
        cw = clip_units(spec)
        pcm = prepare_audio(os.path.join(tmp, spec.name))
        ref = tuple(zip(cw.starts, cw.ends))
        dur = pcm.shape[0] / 16000
        out.append(Case(spec.name, spec.language, spec.text, pcm, ref,
                        ((0.0, ref[0][0]), (ref[-1][1], dur))))
    return out


def with_pauses(case: Case, rng: random.Random) -> Case:
    """``case`` with 0.3-1.5 s of its own leading pad put at a third of its word boundaries."""
    sr = 16000
    n = len(case.ref)
    if n < 2:
        return case
    cuts = sorted(rng.sample(range(1, n), max(1, (n - 1) // GAP_SHARE)))
    pad = case.pcm[:max(1, int(case.ref[0][0] * sr) - sr // 50)]  # the leading pad, 20 ms short of the speech
    parts, ref, silence, shift, last = [], list(case.ref), [case.silence[0]], 0.0, 0
    for k in cuts:
        at = int(round(case.ref[k][0] * sr))
        gap = rng.uniform(*GAP_SECONDS)
        g = int(round(gap * sr))
        parts += [case.pcm[last:at], np.resize(pad, g)]
        silence.append((case.ref[k][0] + shift, case.ref[k][0] + shift + g / sr))
        shift += g / sr
        for i in range(k, n):
            ref[i] = (case.ref[i][0] + shift, case.ref[i][1] + shift)
        last = at
    parts.append(case.pcm[last:])
    tail = (case.silence[-1][0] + shift, case.silence[-1][1] + shift)
    return Case(case.name, case.language, case.text, np.concatenate(parts).astype(np.float32), tuple(ref),
                tuple(silence) + (tail,))


def align(aligner, case: Case, spans: str):
    """(words, flag) of ``case`` as one segment through align_segments."""
    from qwen3asr.aligner.segments import align_segments
    from qwen3asr.results import Segment

    seg = Segment(0.0, case.pcm.shape[0] / 16000, case.text, case.language)
    (out,) = align_segments(aligner, [seg], lambda s: (case.pcm, 0.0), language=case.language, spans=spans)
    return out.words, out.words_flag


def in_silence(a: float, b: float, silence: Sequence[Tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in silence)


def figures(aligned: Sequence[Tuple[Case, tuple, Optional[str]]]) -> Figures:
    """The figures of ``aligned`` inputs: (case, its words, its flag)."""
    starts, ends, span, quiet, zero, flagged = [], [], 0.0, 0.0, 0, 0
    for c, got, flag in aligned:
        flagged += flag is not None
        for w, (rs, re_) in zip(got, c.ref):
            starts.append(abs(w.start - rs) * 1000)
            ends.append(abs(w.end - re_) * 1000)
            span += w.end - w.start
            quiet += in_silence(w.start, w.end, c.silence)
            zero += w.end == w.start
    return Figures(len(aligned), len(starts), round(float(np.mean(starts)), 1), round(float(np.mean(ends)), 1),
                   round(quiet / span, 4) if span else 0.0, round(quiet / len(starts) * 1000, 1), zero, flagged)


def evaluate(aligner, cases: Sequence[Case], seed: int) -> Dict[str, Dict[str, Figures]]:
    """{"<set> <language>": {"raw": Figures, "speech": Figures}} for the demo and paused sets."""
    rng = random.Random(f"pauses/{seed}")
    sets = {"demo": list(cases), "paused": [with_pauses(c, rng) for c in cases]}
    out: Dict[str, Dict[str, Figures]] = {}
    for name, cs in sets.items():
        by_spans = {}
        for spans in ("raw", "speech"):
            by_spans[spans] = []
            for c in cs:
                got, flag = align(aligner, c, spans)
                if len(got) != len(c.ref):
                    raise RuntimeError(f"{c.name}: {len(got)} words aligned, the reference has {len(c.ref)}")
                by_spans[spans].append((c, got, flag))
        for lang in sorted({c.language for c in cs}) + ["all"]:
            out[f"{name} {lang}"] = {s: figures([x for x in v if lang in ("all", x[0].language)])
                                     for s, v in by_spans.items()}
    return out


def table(results: Dict[str, Dict[str, Figures]]) -> str:
    lines = ["| set | spans | inputs | words | start (ms) | end (ms) | span time in silence | silence per word (ms) "
             "| zero-length | flagged |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, by in results.items():
        for spans, f in by.items():
            lines.append(f"| {name} | {spans} | {f.inputs} | {f.words} | {f.start_ms:.1f} | {f.end_ms:.1f} | "
                         f"{100 * f.silence_share:.1f} % | {f.silence_ms:.1f} | {f.zero_length} | {f.flagged} |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--aligner", default=os.path.join(ROOT, "models", "default-aligner"), help="aligner bundle")
    ap.add_argument("--clips", type=int, default=120, help="entries of the test plan (about 92 %% are speech)")
    ap.add_argument("--seed", type=int, default=4242, help="test plan seed (4242: no committed run used it)")
    ap.add_argument("--decoder-dtype", default="auto", choices=["auto", "fp32", "int8"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args(argv)
    if args.clips < 1:
        ap.error("--clips must be >= 1")
    from qwen3asr import Qwen3ASRError
    from qwen3asr.aligner import ForcedAligner
    from qwen3asr.backends import BackendOptions

    try:
        aligner = ForcedAligner(args.aligner, backend="onnx",
                                options=BackendOptions(threads=args.threads, decoder_dtype=args.decoder_dtype))
    except (Qwen3ASRError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with aligner, tempfile.TemporaryDirectory(prefix="word-spans-") as tmp:
        cases = render(args.clips, args.seed, tmp)
        results = evaluate(aligner, cases, args.seed)
    print(f"{args.aligner}, test plan seed {args.seed} ({len(cases)} speech clips):")
    print(table(results))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"aligner": args.aligner, "seed": args.seed, "clips": len(cases),
                       "results": {k: {s: asdict(f) for s, f in v.items()} for k, v in results.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
