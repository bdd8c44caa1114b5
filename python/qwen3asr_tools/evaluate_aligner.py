#!/usr/bin/env python3
"""Mean word-time shift of a forced-aligner bundle on a synthetic split, per language.

    python scripts/evaluate_aligner.py --aligner models/default-aligner --data build/aligner/data \
        [--split test] [--concat 4] [--decoder-dtype fp32] [--json out.json]

Every speech clip of the split is aligned with its label through the engine's public API
(``Qwen3ASREngine.align``, language given), and each word's start and end are compared with
the times libespeak-ng reports for that word when it renders the clip (espeak_align, the
reference the demo aligner was trained on). The shift is the mean of |predicted - reference|
in milliseconds over all words, for starts and ends apart (Qwen's "accumulated average shift"
is the mean of both). ``--concat K`` also aligns the split's clips of one language joined K at
a time (consecutive in the manifest, at most ``MAX_JOINED_SECONDS``) as one input, the
multi-utterance case. Needs the split's manifest made by scripts/make_dataset.py with the same
seed (``dataset.json``): the reference replays its plan.

``--paused N`` also aligns the first N examples of paused_speech's set of the split (words and
utterances with gaps of 0-1.5 s, isolated words, silence before and after, noise, joined inputs
up to 55 s; ``test``: held-out texts and voice variants, ``dev``: dev texts, to choose settings
on), made in memory from libespeak-ng with the seed: the same split, N and seed give the same
plan (the audio can differ by a few samples with what the process rendered before,
docs/aligner.md). Its rows are per kind of example ("paused words", "paused isolated", "paused
joined") and over all of them ("paused"). ``--no-split`` skips the make_dataset split (then
``--data`` is not needed).

``--spans`` picks the times compared: "speech" (the default: what ``engine.align`` gives, the
default word spans), "raw" (the official times), "checked" (the default's with the words at
pauses checked by the ASR model, qwen3asr.aligner.checked) or "true-pieces", the ceiling of the default's
pieces: each word given to the piece that holds it in the reference (``aligned``), which tells
the aligner model's share of the shift from the share of the pieces' assignment.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

from qwen3asr.options import WORD_SPANS

from . import REPO_ROOT as ROOT
from . import textgen

MAX_JOINED_SECONDS = 55.0  # joined inputs stay under the aligner's 60 s pass
SPANS = WORD_SPANS + ("true-pieces",)  # the library's word spans, and the ceiling of the pieces


@dataclass(frozen=True)
class Shift:
    """Mean shift of one language (or all) on one kind of input."""
    language: str
    inputs: int            # aligned inputs (clips or joined groups)
    words: int
    start_ms: float        # mean |predicted start - reference start|
    end_ms: float
    mean_ms: float         # mean of both (AAS)
    within_80ms: float     # share of word boundaries within one class (80 ms) of the reference
    bias_ms: float         # mean of predicted - reference, starts and ends (> 0: late)
    # Least-squares slope of predicted against reference times (starts and ends, seconds into the
    # input): 1 for an aligner that keeps time; 1.04 for one that reads the index of the audio
    # token (13 per second) as the class (12.5 per second).
    time_scale: float


@dataclass(frozen=True)
class Item:
    """One aligned input: its reference and predicted (start, end) per word, seconds."""
    language: str
    clips: tuple           # file names of the clips, joined in this order
    words: tuple
    ref: tuple             # ((start, end), ...)
    pred: tuple


def reference(data: str, split: str) -> List[dict]:
    """The split's speech clips with their aligner words and espeak-ng times (in manifest order)."""
    from . import make_dataset
    from .train_aligner import clip_units
    from .train_tiny import read_manifest

    with open(os.path.join(data, "dataset.json"), encoding="utf-8") as f:
        meta = json.load(f)
    n = int(meta["counts"][split])
    rows = read_manifest(os.path.join(data, split))
    out = []
    for spec, row in zip(make_dataset.plan_split(split, n, int(meta["seed"])), rows):
        if (spec.name, spec.text) != (row["audio"], row["text"]):
            raise ValueError(f"{data}/{split} does not match make_dataset's plan at {row['audio']} (another seed?)")
        if spec.language == "None":
            continue
        cw = clip_units(spec)
        out.append({"audio": os.path.join(data, split, row["audio"]), "name": row["audio"], "text": row["text"],
                    "language": row["language"], "words": cw.words, "ref": tuple(zip(cw.starts, cw.ends))})
    return out


def groups(clips: Sequence[dict], k: int) -> List[List[dict]]:
    """Consecutive clips of one language, k at a time (fewer when MAX_JOINED_SECONDS is reached)."""
    import soundfile as sf

    out = []
    for lang in sorted({c["language"] for c in clips}):
        cur, secs = [], 0.0
        for c in (c for c in clips if c["language"] == lang):
            d = sf.info(c["audio"]).duration
            if cur and (len(cur) == k or secs + d > MAX_JOINED_SECONDS):
                out.append(cur)
                cur, secs = [], 0.0
            cur.append(c)
            secs += d
        if len(cur) > 1:
            out.append(cur)
    return out


def aligned(engine, pcm: np.ndarray, text: str, language: str, words: Sequence[str],
            ref: Sequence[tuple], spans: str = "speech") -> list:
    """The Words of ``text`` over ``pcm`` ((n,) float32, 16 kHz). ``spans`` "speech", "raw", "checked":
    ``engine.align`` with those word spans. "true-pieces": the input cut at its pauses as the
    default spans cut it (refine.pieces_at_pauses), each of ``words`` (the aligner's units of
    ``text``) given to the piece holding the middle of its ``ref`` (start, end), each piece
    aligned alone with its words, then snapped to the speech: what the default would give if it
    put every word in its right piece (docs/aligner.md, "the ceiling of the pieces")."""
    if spans != "true-pieces":
        return list(engine.align(pcm, text, language=language, sample_rate=16000, word_spans=spans))
    from qwen3asr.aligner import refine
    from qwen3asr.aligner.shifted import for_spans
    from qwen3asr.results import Word

    al = for_spans(engine.aligner, "speech")  # its times between the bins, as "speech" reads them
    levels = refine.Levels.of(pcm, 0.0)
    pieces = refine.pieces_at_pauses(levels)
    if len(pieces) < 2:
        got = al.align(pcm, text, language)
    else:  # refine.realign shares words by their start: the reference's middles stand in for it
        middles = [Word(w, (s + e) / 2, (s + e) / 2) for w, (s, e) in zip(words, ref)]
        again = refine.realign(al, pcm, middles, language, levels, pieces,
                               refine.share_words(middles, levels, pieces, "time"))
        if again is None:
            raise RuntimeError(f"a piece's alignment did not give back its words {list(words)}")
        got = again[0]
    return list(refine.snap(got, levels, al.segment_ms / 1000.0))


def align_group(engine, group: Sequence[dict], spans: str = "speech") -> Item:
    """Align the joined audio of ``group`` with the joined text (its words are the parts' words)."""
    from qwen3asr.audio import SAMPLE_RATE, prepare_audio

    pcm, words, ref, t = [], [], [], 0.0
    for c in group:
        x = prepare_audio(c["audio"])
        pcm.append(x)
        words += c["words"]
        ref += [(a + t, b + t) for a, b in c["ref"]]
        t += x.shape[0] / SAMPLE_RATE
    sep = "" if group[0]["language"] == "Chinese" else " "
    got = aligned(engine, np.concatenate(pcm), sep.join(c["text"] for c in group), group[0]["language"], words, ref,
                  spans)
    if [w.word for w in got] != list(words):
        raise RuntimeError(f"the aligner's words {[w.word for w in got]} are not the reference's {words}")
    return Item(group[0]["language"], tuple(c["name"] for c in group), tuple(words), tuple(ref),
                tuple((w.start, w.end) for w in got))


def summarise(items: Sequence[Item]) -> List[Shift]:
    """Per language and over all."""
    out = []
    for lang in sorted({i.language for i in items}) + ["all"]:
        sel = [i for i in items if lang in ("all", i.language)]
        ref = np.array([r for i in sel for r in i.ref], np.float64).reshape(-1, 2)
        pred = np.array([p for i in sel for p in i.pred], np.float64).reshape(-1, 2)
        signed = (pred - ref) * 1000.0
        d = np.abs(signed)
        x, y = ref.ravel(), pred.ravel()
        scale = float(np.polyfit(x, y, 1)[0]) if x.size >= 2 and np.ptp(x) > 0 else float("nan")
        out.append(Shift(lang, len(sel), int(d.shape[0]), round(float(d[:, 0].mean()), 1),
                         round(float(d[:, 1].mean()), 1), round(float(d.mean()), 1),
                         round(float((d <= 80.0).mean()), 3), round(float(signed.mean()), 1), round(scale, 4)))
    return out


def align_paused(engine, ex, spans: str = "speech") -> Item:
    """Align one paused_speech.Example (16 kHz audio, its text) against its exact word times."""
    from . import paused_speech

    words, starts, ends = paused_speech.aligner_units(ex)
    got = aligned(engine, ex.audio, ex.text, ex.language, words, tuple(zip(starts, ends)), spans)
    if [w.word for w in got] != list(words):
        raise RuntimeError(f"the aligner's words {[w.word for w in got]} are not the reference's {words}")
    return Item(ex.language, (ex.kind,), words, tuple(zip(starts, ends)), tuple((w.start, w.end) for w in got))


def evaluate(engine, clips: Sequence[dict], concat: int = 0, paused: Sequence = (),
             spans: str = "speech") -> Dict[str, List[Shift]]:
    """{"single": shifts, "joined K": shifts (with concat >= 2), "paused ...": shifts (with paused
    examples)} over ``clips`` (from ``reference``) and ``paused`` (paused_speech.Example), the
    times ``spans`` (SPANS, ``aligned``)."""
    results = {}
    if clips:
        results["single"] = summarise([align_group(engine, [c], spans) for c in clips])
    if clips and concat >= 2:
        results[f"joined {concat}"] = summarise([align_group(engine, g, spans) for g in groups(clips, concat)])
    if paused:
        items = [align_paused(engine, ex, spans) for ex in paused]
        for kind in ("words", "isolated", "joined"):
            sel = [i for i in items if i.clips == (kind,)]
            if sel:
                results[f"paused {kind}"] = summarise(sel)
        results["paused"] = summarise(items)
    return results


def table(results: Dict[str, List[Shift]]) -> str:
    lines = ["| input | language | inputs | words | start (ms) | end (ms) | mean (ms) | within 80 ms | bias (ms) "
             "| time scale |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for kind, shifts in results.items():
        for s in shifts:
            lines.append(f"| {kind} | {s.language} | {s.inputs} | {s.words} | {s.start_ms:.1f} | {s.end_ms:.1f} | "
                         f"{s.mean_ms:.1f} | {100 * s.within_80ms:.1f} % | {s.bias_ms:+.1f} | {s.time_scale:.3f} |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--aligner", default=os.path.join(ROOT, "models", "default-aligner"), help="aligner bundle")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default"),
                    help="ASR bundle the engine is opened with (the aligner does not use it: languages are given)")
    ap.add_argument("--data", default=os.path.join(ROOT, "build", "aligner", "data"),
                    help="dataset directory made by scripts/make_dataset.py (dataset.json, SPLIT/manifest.jsonl)")
    ap.add_argument("--split", default="test", choices=textgen.SPLITS,
                    help="the make_dataset split, and the paused_speech set of --paused")
    ap.add_argument("--limit", type=int, default=None, help="only the first N speech clips")
    ap.add_argument("--concat", type=int, default=0, help="also align clips joined K at a time (K >= 2)")
    ap.add_argument("--paused", type=int, default=0, help="also align N paused-speech examples of --split")
    ap.add_argument("--seed", type=int, default=0, help="seed of the paused-speech examples")
    ap.add_argument("--no-split", action="store_true", help="skip the make_dataset split (only --paused)")
    ap.add_argument("--spans", default="speech", choices=SPANS,
                    help="the times compared: the default word spans, the official (raw) ones, or the default's "
                         "pieces with every word in its reference piece (the ceiling of the pieces)")
    ap.add_argument("--decoder-dtype", default="auto", choices=["auto", "fp32", "int8"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None, help="write the shifts here")
    args = ap.parse_args(argv)
    if args.concat == 1 or args.concat < 0:
        ap.error("--concat must be 0 (none) or >= 2")
    if args.limit is not None and args.limit < 1:
        ap.error("--limit must be >= 1")
    from qwen3asr import Qwen3ASREngine, Qwen3ASRError

    if args.no_split and args.paused < 1:
        ap.error("--no-split needs --paused N")
    try:
        clips = [] if args.no_split else reference(args.data, args.split)[:args.limit]
    except (OSError, KeyError, ValueError) as exc:
        print(f"error: {args.data}: {exc}", file=sys.stderr)
        return 2
    paused = []
    if args.paused > 0:
        from . import paused_speech

        paused = paused_speech.make_set(args.split, args.paused, args.seed, jobs=min(2, args.threads))
    try:
        with Qwen3ASREngine(args.model, backend="onnx", aligner=args.aligner, decoder_dtype=args.decoder_dtype,
                            threads=args.threads) as engine:
            results = evaluate(engine, clips, args.concat, paused, args.spans)
    except Qwen3ASRError as exc:  # a model or aligner directory that is not a bundle, an uncovered language
        print(f"error: {exc}", file=sys.stderr)
        return 2
    what = [f"{args.data}/{args.split} ({len(clips)} speech clips)"] if clips else []
    what += [f"{len(paused)} paused-speech examples of {args.split} (seed {args.seed})"] if paused else []
    print(f"{args.aligner} on {' and '.join(what)}, decoder {args.decoder_dtype}, {args.spans} spans:")
    print(table(results))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"aligner": args.aligner, "split": args.split, "decoder_dtype": args.decoder_dtype,
                       "spans": args.spans,
                       "paused": len(paused), "seed": args.seed,
                       "results": {k: [asdict(s) for s in v] for k, v in results.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
