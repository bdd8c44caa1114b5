#!/usr/bin/env python3
"""Our forced aligner against the official Qwen3-ForcedAligner on the same input.

The official ``Qwen3ForcedAligner.align()`` runs on the checkpoint (random weights are fine);
ours runs on the bundle exported from it. Compared: the time-class logits at every
``<timestamp>`` slot (cosine, max abs difference, argmax agreement) and the word items.

    python scripts/compare_aligner.py --checkpoint ALIGNER_CKPT --bundle ALIGNER_BUNDLE \
        --audio audio/en_1.wav --text "open the back door" --language English --json report.json

Each ``--decoder`` dtype of the bundle gets its own row (fp32 is the exactness check; int8 and
int4 show what weight quantisation moves).
"""

from __future__ import annotations

import argparse
import json
import math
import logging
import sys

import numpy as np

log = logging.getLogger("compare_aligner")


def slot_metrics(ours: np.ndarray, ref: np.ndarray) -> dict:
    """Per-slot cosine, max abs difference and argmax agreement of ``(n_slots, classes)`` logits."""
    a, b = ours.astype(np.float64), ref.astype(np.float64)
    if a.shape != b.shape:
        raise ValueError(f"slot logits differ in shape: ours {a.shape}, official {b.shape}")
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-30)
    return {"slots": int(a.shape[0]), "min_cosine": float(cos.min()) if cos.size else 1.0,
            "max_abs": float(np.abs(a - b).max()) if a.size else 0.0,
            "argmax_agreement": float((a.argmax(1) == b.argmax(1)).mean()) if a.size else 1.0}


def compare(checkpoint: str, bundle: str, audio, text: str, language: str, decoder_dtypes=("fp32",),
            encoder_form: str = "merged", threads=None) -> dict:
    from qwen3asr.aligner import ForcedAligner
    from qwen3asr.audio import prepare_audio
    from qwen3asr.backends import BackendOptions

    from .official_ref import official_align, official_aligner

    pcm = prepare_audio(audio)
    official = official_align(official_aligner(checkpoint), pcm, text, language)
    rows = []
    for dtype in decoder_dtypes:
        with ForcedAligner(bundle, backend="onnx", options=BackendOptions(
                encoder_form=encoder_form, decoder_dtype=dtype, threads=threads)) as ours:
            layout, logits = ours.slot_logits(pcm, text, language)
            words = ours.align(pcm, text, language)
        row = {"decoder": dtype, "encoder_form": encoder_form, **slot_metrics(logits, official.slot_logits)}
        end = math.floor(pcm.shape[0] / 16) / 1000  # ours are clipped to the audio (whole ms); the official can pass its end
        row["items_equal"] = ([(w.word, w.start, w.end) for w in words] ==
                              [(t, min(a, end), min(b, end)) for t, a, b in official.items])
        row["words"] = len(layout.words)
        rows.append(row)
        log.info("%s: min cosine %.7f, argmax agreement %.4f, items equal %s", dtype, row["min_cosine"],
                 row["argmax_agreement"], row["items_equal"])
    return {"checkpoint": checkpoint, "bundle": bundle, "text": text, "language": language,
            "audio_seconds": pcm.shape[0] / 16000, "official_items": [list(i) for i in official.items],
            "rows": rows, "argmax_agreement": rows[0]["argmax_agreement"], "min_cosine": rows[0]["min_cosine"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="official Qwen3-ForcedAligner checkpoint directory")
    ap.add_argument("--bundle", required=True, help="the aligner bundle exported from it (scripts/export_onnx.py)")
    ap.add_argument("--audio", required=True, help="audio file")
    ap.add_argument("--text", required=True, help="the transcript to align")
    ap.add_argument("--language", required=True, help="its language (name or code)")
    ap.add_argument("--decoder", default="fp32", help="bundle decoder dtypes to compare, comma-separated "
                                                     "(default %(default)s; e.g. fp32,int8,int4)")
    ap.add_argument("--encoder-form", default="merged", choices=("merged", "split"))
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", help="write the summary here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        report = compare(args.checkpoint, args.bundle, args.audio, args.text, args.language,
                         tuple(d.strip() for d in args.decoder.split(",") if d.strip()), args.encoder_form,
                         args.threads)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(report, indent=2, ensure_ascii=False)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
