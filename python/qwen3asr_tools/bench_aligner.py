#!/usr/bin/env python3
"""What word timestamps add to a transcription on the CPU, in one process, runs interleaved.

    python scripts/bench_aligner.py --asr-preset 0.6b --aligner-preset fa-0.6b --threads 2 --runs 5

Both models are random-weight checkpoints of the real shapes (Qwen3-ASR-0.6B and
Qwen3-ForcedAligner-0.6B: the aligner's encoder is the 1.7B-sized one), built with the official
code into build/ and exported by the project's exporter when missing. Random weights cost what
real ones do, but their text is noise: so the transcription decodes exactly as many tokens as
the clip's real transcript has (end of sequence ignored), and the aligner aligns that real
transcript (by default the bundled demo model's reading of the clip).

Timed per run, in turn: the transcription alone (``engine.transcribe``: mel, encoder, prefill,
decode; fallback decoding off, since random weights always run to the token budget), then the alignment of the same clip and text (``ForcedAligner.align``: mel, the
aligner's encoder, one prefill through its scorer). Reported: medians (min-max), the ratio
(transcription + alignment) / transcription, and the peak RSS with both models loaded.

``--spans speech,checked`` (any of TranscribeOptions.word_spans) also times, in each run after
the alignment, ``engine.align`` with each of those word spans (the engine's aligner is the same
bundle), and reports each against the transcription and against the first of them. On random
weights the ASR's readings are noise: "checked" costs its scoring (an encoder pass and prefill
per piece, the candidate texts) and each piece's greedy reading, which rarely ends there and runs
until the loop guard or its token cap stops it (qwen3asr.aligner.checked), more than a real
model's; where the noise moves a boundary, the pieces are aligned again; then "checked" aligns
each piece again alone in four shifted passes (qwen3asr.aligner.shifted).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import sys
import time
from typing import Optional

log = logging.getLogger("bench_aligner")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def random_bundle(preset: str, dtype: str) -> str:
    """The bundle of a random checkpoint of ``preset`` (ASR or aligner), built under build/ when
    missing, as a real model is exported: every default encoder duration (merged), ``dtype``
    decoder."""
    from . import export_onnx
    from .bench import preset_checkpoint

    checkpoint = preset_checkpoint(preset)
    bundle = os.path.join(ROOT, "build", f"bundle-{preset}-{dtype}-all")
    if not os.path.isfile(os.path.join(bundle, "model.json")):
        log.info("exporting %s to %s", checkpoint, bundle)
        export_onnx.export(checkpoint, bundle, forms=("merged",), decoder_dtypes=(dtype,))
    return bundle


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _cell(xs) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def bench(asr_bundle: str, al_bundle: str, audio: str, seconds: float, text: Optional[str], language: str,
          runs: int, warmup: int, threads: int, dtype: str, spans: tuple = ()) -> dict:
    import math

    from qwen3asr import Qwen3ASREngine, prepare_audio
    from qwen3asr.aligner import ForcedAligner
    from qwen3asr.backends import BackendOptions

    pcm = prepare_audio(audio)[:int(round(seconds * 16000))]
    if text is None:  # the bundled demo model's reading of the clip: a real transcript's length
        with Qwen3ASREngine(os.path.join(ROOT, "models", "default"), backend="onnx", threads=threads) as demo:
            text = demo.transcribe(pcm, language=language).text
    rss0 = _peak_rss_mb()
    engine = Qwen3ASREngine(asr_bundle, backend="onnx", threads=threads, decoder_dtype=dtype,
                            aligner=al_bundle if spans else None)
    tokens = len(engine.tokenizer.encode(text)) + 1  # the transcript and its end
    # with --spans the engine's own aligner (same bundle, threads and dtype) times the bare
    # alignment too: a second copy would double the aligner's memory in the peak reported
    aligner = engine.aligner if spans else ForcedAligner(al_bundle, backend="onnx",
                                                          options=BackendOptions(threads=threads, decoder_dtype=dtype))
    words = len(aligner.align(pcm, text, language))
    asr_ms, al_ms, decoded = [], [], []
    spans_ms = {s: [] for s in spans}
    for i in range(warmup + runs):
        t0 = time.perf_counter()
        # fallback off: random weights run to max_new_tokens, which would otherwise count as a cut
        # run and be decoded again (the time of a real model's single pass is what is compared)
        r = engine.transcribe(pcm, language=language, max_new_tokens=tokens, one_pass=True, fallback=False)
        t1 = time.perf_counter()
        aligner.align(pcm, text, language)
        t2 = time.perf_counter()
        for s in spans:
            t3 = time.perf_counter()
            engine.align(pcm, text, language, word_spans=s)
            if i >= warmup:
                spans_ms[s].append((time.perf_counter() - t3) * 1000)
        time.sleep(0.1)  # let spinning threads settle before the next timed run
        if i >= warmup:
            asr_ms.append((t1 - t0) * 1000)
            al_ms.append((t2 - t1) * 1000)
            decoded.append(r.stats.decode_tokens)
        log.info("run %d: transcription %.0f ms (%d tokens), alignment %.0f ms", i, (t1 - t0) * 1000,
                 r.stats.decode_tokens, (t2 - t1) * 1000)
    ratios = [(a + b) / a for a, b in zip(asr_ms, al_ms)]
    report = {
        "audio": audio, "seconds": pcm.shape[0] / 16000, "text": text, "words": words, "tokens": tokens,
        "decoded_tokens": decoded, "threads": threads, "decoder_dtype": dtype, "runs": runs,
        "transcription_ms": _cell(asr_ms), "alignment_ms": _cell(al_ms),
        "ratio_with_words": _cell(ratios),
        "peak_rss_mb": {"before_models": rss0, "both_loaded_and_run": _peak_rss_mb()},
        "aligner_positions": int(math.ceil(pcm.shape[0] / 160 / 100 * 13)) + 2 + 3 * words,
        "spans_ms": {s: _cell(v) for s, v in spans_ms.items()},
        "spans_to_first": {s: _cell([x / y for x, y in zip(v, spans_ms[spans[0]])]) for s, v in spans_ms.items()},
    }
    if not spans:
        aligner.close()
    engine.close()  # and its aligner
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--asr-preset", default="0.6b", help="random ASR checkpoint preset (default %(default)s)")
    ap.add_argument("--aligner-preset", default="fa-0.6b", help="random aligner preset (default %(default)s)")
    ap.add_argument("--asr-bundle", default=None, help="an ASR bundle instead of the preset's")
    ap.add_argument("--aligner-bundle", default=None, help="an aligner bundle instead of the preset's")
    ap.add_argument("--audio", default=os.path.join(ROOT, "audio", "long_mixed.wav"))
    ap.add_argument("--seconds", type=float, default=10.0, help="length of the clip (default %(default)s)")
    ap.add_argument("--text", default=None, help="the transcript to align (default: the demo model's)")
    ap.add_argument("--language", default="English")
    ap.add_argument("--decoder", default="int8", choices=("fp32", "int8", "int4"),
                    help="decoder weights of both models (default %(default)s)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--spans", default="", help="also time engine.align with these word spans, comma-separated "
                                                "(e.g. speech,checked)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        from qwen3asr.options import WORD_SPANS

        spans = tuple(s for s in args.spans.split(",") if s)
        if args.runs < 1 or args.warmup < 0 or not 1 <= args.seconds <= 60:
            raise ValueError("--runs >= 1, --warmup >= 0 and --seconds in 1..60 are required")
        if any(s not in WORD_SPANS for s in spans):
            raise ValueError(f"--spans takes {', '.join(WORD_SPANS)} (got {args.spans!r})")
        asr = args.asr_bundle or random_bundle(args.asr_preset, args.decoder)
        al = args.aligner_bundle or random_bundle(args.aligner_preset, args.decoder)
        report = bench(asr, al, args.audio, args.seconds, args.text, args.language, args.runs, args.warmup,
                       args.threads, args.decoder, spans)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    t, a, r = report["transcription_ms"], report["alignment_ms"], report["ratio_with_words"]
    print(f"{report['seconds']:.1f} s clip, {report['words']} words, {report['tokens']} tokens decoded, "
          f"{args.threads} threads, {args.decoder} decoders, {args.runs} runs")
    print("| | median ms | min-max |\n|---|---|---|")
    print(f"| transcription | {t['median']:.0f} | {t['min']:.0f}-{t['max']:.0f} |")
    print(f"| alignment | {a['median']:.0f} | {a['min']:.0f}-{a['max']:.0f} |")
    print(f"| (transcription + alignment) / transcription | {r['median']:.2f}x | {r['min']:.2f}-{r['max']:.2f}x |")
    for s, c in report["spans_ms"].items():
        q, k = report["spans_to_first"][s], c["median"] / t["median"]
        print(f"| engine.align, {s} spans | {c['median']:.0f} | {c['min']:.0f}-{c['max']:.0f} | x{k:.2f} of the "
              f"transcription, x{q['median']:.2f} ({q['min']:.2f}-{q['max']:.2f}) of {spans[0]} |")
    print(f"peak RSS with both models loaded and run: {report['peak_rss_mb']['both_loaded_and_run']:.0f} MB")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
