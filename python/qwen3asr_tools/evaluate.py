#!/usr/bin/env python3
"""Evaluate a model bundle (and optionally the official PyTorch model) on a dataset manifest.

    python scripts/evaluate.py --manifest build/tiny/data/test/manifest.jsonl --model models/default \
        [--official build/tiny/checkpoint] [--json build/tiny/eval_test.json] [--limit N]

Metrics, over the clips of the manifest (see docs/dataset.md for its fields):
- English WER and Mandarin CER (jiwer, corpus level: total edits / total reference words or
  characters). Hypothesis = the transcript text whatever language the model named.
- Language identification: share of speech clips whose detected language is the reference.
- No-speech detection: share of noise/silence clips (language "None") for which the model
  answers ``language None`` (no language, empty text).
- Exact-match share per language.

With --official CHECKPOINT the official Qwen3ASRForConditionalGeneration (transformers,
float32, greedy) transcribes the same 16 kHz waveforms, and every clip where its
(language, text) differs from the bundle's is listed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import List, Optional, Sequence

from . import REPO_ROOT as ROOT


@dataclass(frozen=True)
class ClipResult:
    audio: str            # file name relative to the manifest
    ref_language: str     # "English", "Chinese" or "None"
    ref_text: str
    language: str         # detected language name, "None" for no speech
    text: str             # transcript
    raw: str              # decoded output incl. the language prefix
    finish_reason: str = "eos"  # how the (last) decoder run ended ("repetition": the loop guard)
    loops: int = 0        # decoder runs the loop guard stopped
    fallback_tries: int = 0  # decoder runs made again with fallback settings


@dataclass(frozen=True)
class Scores:
    n_english: int
    n_chinese: int
    n_none: int
    wer_english: float        # fraction (0.05 = 5 %)
    cer_chinese: float
    exact_english: float
    exact_chinese: float
    language_id: float        # over speech clips
    no_speech: float          # over noise/silence clips


def read_manifest(path: str, limit: Optional[int]) -> List[dict]:
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return rows[:limit] if limit else rows


def score(results: Sequence[ClipResult]) -> Scores:
    import jiwer

    en = [r for r in results if r.ref_language == "English"]
    zh = [r for r in results if r.ref_language == "Chinese"]
    none = [r for r in results if r.ref_language == "None"]
    speech = en + zh

    def rate(fn, rows, prep):
        if not rows:
            return float("nan")
        # jiwer rejects empty hypotheses inside a list only when the reference is empty too;
        # references of speech clips are never empty.
        return float(fn([prep(r.ref_text) for r in rows], [prep(r.text) for r in rows]))

    def frac(n, d):
        return n / d if d else float("nan")

    return Scores(
        n_english=len(en), n_chinese=len(zh), n_none=len(none),
        wer_english=rate(jiwer.wer, en, lambda s: " ".join(s.split()) or "<empty>"),
        cer_chinese=rate(jiwer.cer, zh, lambda s: "".join(s.split()) or "<empty>"),
        exact_english=frac(sum(r.text == r.ref_text for r in en), len(en)),
        exact_chinese=frac(sum(r.text == r.ref_text for r in zh), len(zh)),
        language_id=frac(sum(r.language == r.ref_language for r in speech), len(speech)),
        no_speech=frac(sum(r.language == "None" and r.text == "" for r in none), len(none)),
    )


def run_bundle(rows, base: str, model: str, decoder_dtype: str, threads: Optional[int],
               memory: str = "default") -> List[ClipResult]:
    from qwen3asr import Qwen3ASREngine

    engine = Qwen3ASREngine(model, backend="onnx", decoder_dtype=decoder_dtype, threads=threads, memory=memory)
    out = []
    for r in rows:
        t = engine.transcribe(os.path.join(base, r["audio"]))
        out.append(ClipResult(r["audio"], r["language"], r["text"], t.language or "None", t.text, t.raw_text,
                              t.finish_reason, t.stats.loops, t.stats.fallback_tries))
    return out


def run_official(rows, base: str, ckpt: str) -> List[ClipResult]:
    import numpy as np
    import torch

    from .official_ref import (load_official_model, official_features, official_input_ids, official_modules,
                               official_processor, official_text_utils)
    from qwen3asr.audio import prepare_audio

    # The official processor's own audio-token count, so this side shares nothing with ours.
    n_audio_tokens = official_modules().processing._get_feat_extract_output_lengths

    model = load_official_model(ckpt)
    proc = official_processor(ckpt)
    utils = official_text_utils()
    gen_cfg = json.load(open(os.path.join(ckpt, "generation_config.json"), encoding="utf-8"))
    out = []
    for r in rows:
        wav = prepare_audio(os.path.join(base, r["audio"]))
        mel = official_features(ckpt, wav)
        ids = torch.tensor([official_input_ids(proc, int(n_audio_tokens(mel.shape[1])))])
        with torch.no_grad():
            res = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 input_features=torch.from_numpy(np.ascontiguousarray(mel))[None],
                                 feature_attention_mask=torch.ones((1, mel.shape[1]), dtype=torch.long),
                                 max_new_tokens=256, eos_token_id=gen_cfg["eos_token_id"],
                                 pad_token_id=gen_cfg["pad_token_id"], do_sample=False)
        raw = proc.batch_decode(res.sequences[:, ids.shape[1]:], skip_special_tokens=True)[0]
        lang, text = utils.parse_asr_output(raw)
        out.append(ClipResult(r["audio"], r["language"], r["text"], lang or "None", text, raw))
    return out


def table(name: str, s: Scores) -> str:
    def pct(x):
        return f"{100 * x:6.2f} %"

    lines = [f"{name}",
             f"  English WER      {pct(s.wer_english)}   ({s.n_english} clips, exact {pct(s.exact_english)})",
             f"  Mandarin CER     {pct(s.cer_chinese)}   ({s.n_chinese} clips, exact {pct(s.exact_chinese)})",
             f"  language ID      {pct(s.language_id)}   ({s.n_english + s.n_chinese} speech clips)",
             f"  no speech found  {pct(s.no_speech)}   ({s.n_none} noise/silence clips)"]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", required=True, help="manifest.jsonl of a split made by scripts/make_dataset.py")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default"), help="bundle directory")
    ap.add_argument("--decoder-dtype", default="auto", choices=["auto", "fp32", "int8", "int4"])
    ap.add_argument("--memory", default="default", choices=["default", "lean"],
                    help="the engine's memory profile (lean: int4 decoder first; docs/benchmarks.md)")
    ap.add_argument("--official", default=None, metavar="CHECKPOINT",
                    help="also run the official PyTorch model from this checkpoint directory and compare")
    ap.add_argument("--no-bundle", action="store_true", help="only the official model (needs --official)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N clips")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None, help="write scores and per-clip results here")
    args = ap.parse_args(argv)
    if not os.path.isfile(args.manifest):
        print(f"error: manifest not found: {args.manifest}", file=sys.stderr)
        return 2
    rows = read_manifest(args.manifest, args.limit)
    base = os.path.dirname(args.manifest)
    if args.no_bundle and not args.official:
        print("error: --no-bundle needs --official CHECKPOINT", file=sys.stderr)
        return 2
    t0 = time.time()
    report = {"manifest": args.manifest, "n_clips": len(rows)}
    ours, errors = [], []
    if not args.no_bundle:
        ours = run_bundle(rows, base, args.model, args.decoder_dtype, args.threads, args.memory)
        s_ours = score(ours)
        report.update(model=args.model, decoder_dtype=args.decoder_dtype, memory=args.memory,
                      bundle={"scores": asdict(s_ours), "seconds": round(time.time() - t0, 1)})
        print(table(f"bundle {args.model} (decoder {args.decoder_dtype}, memory {args.memory}), {len(rows)} clips",
                    s_ours))
        errors = [asdict(r) for r in ours if (r.language, r.text) != (r.ref_language, r.ref_text)]
        report["bundle"]["errors"] = errors
        guarded = [r for r in ours if r.loops or r.fallback_tries or r.finish_reason != "eos"]
        print(f"  loop guard       {sum(r.loops for r in ours)} runs stopped, "
              f"{sum(r.fallback_tries for r in ours)} fallback tries, "
              f"{sum(r.finish_reason != 'eos' for r in ours)} clips not ended by the model"
              + "".join(f"\n    {r.audio}: {r.finish_reason}, {r.loops} loops, {r.fallback_tries} tries, {r.text!r}"
                        for r in guarded[:10]))
        report["bundle"]["guarded"] = [asdict(r) for r in guarded]
    if args.official:
        t1 = time.time()
        off = run_official(rows, base, args.official)
        s_off = score(off)
        print(table(f"official PyTorch model {args.official}, {len(rows)} clips", s_off))
        report["official"] = {"scores": asdict(s_off), "seconds": round(time.time() - t1, 1)}
        if ours:
            diffs = [{"audio": a.audio, "bundle": [a.language, a.text], "official": [b.language, b.text]}
                     for a, b in zip(ours, off) if (a.language, a.text) != (b.language, b.text)]
            print(f"transcript differences bundle vs official: {len(diffs)} of {len(rows)} clips")
            for d in diffs[:20]:
                print(f"  {d['audio']}: bundle {d['bundle']!r} official {d['official']!r}")
            report["official"]["differences"] = diffs
        else:
            errors = [asdict(r) for r in off if (r.language, r.text) != (r.ref_language, r.ref_text)]
            report["official"]["errors"] = errors
    print(f"{len(errors)} clips differ from the reference; first ones:")
    for e in errors[:10]:
        print(f"  {e['audio']}: ref {e['ref_language']} {e['ref_text']!r} got {e['language']} {e['text']!r}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, ensure_ascii=False, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
