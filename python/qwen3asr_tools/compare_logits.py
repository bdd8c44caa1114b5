#!/usr/bin/env python3
"""Teacher-forced comparison of our backend against the official PyTorch Qwen3-ASR.

The official model generates greedily (the teacher); our backend is fed the teacher's
tokens one by one through its KV cache, and the logits of every step are compared:
max abs, mean abs, RMSE, mean relative error, cosine and argmax agreement.

    python scripts/compare_logits.py --checkpoint Qwen3-ASR-0.6B --bundle models/qwen3-asr-0.6b \
        --audio audio/en_demo.wav --max-new-tokens 64 --json report.json

Encoder attention: the official transformers code attends over the whole clip when run
without flash-attention (CPU), while its flash-attention and vLLM paths attend inside
8 s windows, as the model was trained. ``--official-attention windowed`` (default) gives
the official layers the official block-diagonal window mask so both agree on audio
longer than 8 s; for 8 s or less the two are identical.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

import numpy as np


log = logging.getLogger("compare_logits")


def window_official_encoder(model) -> None:
    """Give each official audio-encoder layer the official windowed attention mask."""
    tower = model.thinker.audio_tower
    for layer in tower.layers:
        fwd = layer.forward

        def windowed(hidden_states, cu_seqlens, attention_mask=None, _fwd=fwd, **kw):
            mask = tower._prepare_attention_mask(hidden_states, cu_seqlens)
            return _fwd(hidden_states, cu_seqlens, attention_mask=mask, **kw)

        layer.forward = windowed


def step_metrics(ours: np.ndarray, ref: np.ndarray) -> dict:
    d = ours.astype(np.float64) - ref.astype(np.float64)
    cos = float(np.dot(ours, ref) / (np.linalg.norm(ours) * np.linalg.norm(ref) + 1e-30))
    return {"max_abs": float(np.abs(d).max()), "mean_abs": float(np.abs(d).mean()),
            "rmse": float(np.sqrt((d ** 2).mean())),
            "mean_rel": float(np.abs(d).mean() / (np.abs(ref).mean() + 1e-30)),
            "cosine": cos, "argmax_ours": int(ours.argmax()), "argmax_ref": int(ref.argmax()),
            "argmax_agree": bool(ours.argmax() == ref.argmax())}


def compare(checkpoint: str, bundle: str, audio, max_new_tokens: int = 32, language=None, context: str = "",
            decoder_dtype: str = "fp32", encoder_form: str = "merged", official_attention: str = "windowed",
            ignore_eos: bool = False, teacher_mode: str = "greedy", seed: int = 0) -> dict:
    import torch

    from .official_ref import load_official_model
    from qwen3asr import Qwen3ASREngine
    from qwen3asr.audio import prepare_audio

    engine = Qwen3ASREngine(bundle, backend="onnx", decoder_dtype=decoder_dtype, encoder_form=encoder_form)
    pcm = prepare_audio(audio)
    model = load_official_model(checkpoint, dtype=torch.float32)
    if official_attention == "windowed":
        window_official_encoder(model)
    elif official_attention != "as-is":
        raise ValueError("official_attention must be 'windowed' or 'as-is'")
    # our prompt, features and embeddings
    from qwen3asr.decoding import DecodingOptions

    gen_opts = DecodingOptions(max_new_tokens=max_new_tokens + 1)
    gen, req = engine.start(pcm, language=language, context=context, options=gen_opts)
    prompt = req.prompt
    mel = engine.features(pcm)
    ids = torch.tensor(np.asarray(prompt.ids, dtype=np.int64))[None]
    feats = torch.from_numpy(mel)[None]
    fmask = torch.ones(1, mel.shape[1], dtype=torch.long)
    eos = list(engine.tokenizer.eos_ids)
    with torch.no_grad():
        kw = {"suppress_tokens": eos} if ignore_eos else {}
        if teacher_mode == "sample":
            # random-weight checkpoints collapse into one repeated token under greedy search;
            # a sampled teacher exercises varied tokens and positions (still teacher forcing)
            torch.manual_seed(seed)
            kw.update(do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
        elif teacher_mode == "greedy":
            kw.update(do_sample=False)
        else:
            raise ValueError("teacher must be 'greedy' or 'sample'")
        out = model.thinker.generate(input_ids=ids, input_features=feats, feature_attention_mask=fmask,
                                     attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                     eos_token_id=eos, pad_token_id=eos[0], **kw)
        seq = out.sequences if hasattr(out, "sequences") else out
        teacher = [int(t) for t in seq[0, ids.shape[1]:].tolist()]
        full = torch.cat([ids, torch.tensor([teacher], dtype=torch.long)], dim=1)
        ref_logits = model.thinker(input_ids=full, input_features=feats,
                                   feature_attention_mask=fmask).logits[0].float().numpy()
    ref_logits = ref_logits[ids.shape[1] - 1: ids.shape[1] - 1 + len(teacher)]
    ours = [gen.next_logits]
    for tok in teacher[:-1]:
        ours.append(gen.feed(tok))
    steps = [dict(step=i, token=teacher[i], **step_metrics(o, r)) for i, (o, r) in enumerate(zip(ours, ref_logits))]
    summary = {
        "steps": len(steps),
        "argmax_agreement": float(np.mean([s["argmax_agree"] for s in steps])) if steps else float("nan"),
        "min_cosine": float(min(s["cosine"] for s in steps)) if steps else float("nan"),
        "mean_cosine": float(np.mean([s["cosine"] for s in steps])) if steps else float("nan"),
        "max_abs": float(max(s["max_abs"] for s in steps)) if steps else float("nan"),
        "teacher_text": engine.tokenizer.decode(teacher),
        "teacher": teacher_mode, "decoder_dtype": decoder_dtype, "encoder_form": encoder_form, "official_attention": official_attention,
        "prompt_tokens": len(prompt), "audio_tokens": prompt.n_audio,
    }
    return {"summary": summary, "steps": steps, "teacher_tokens": teacher}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="official checkpoint directory")
    ap.add_argument("--bundle", required=True, help="bundle exported from it by scripts/export_onnx.py")
    ap.add_argument("--audio", required=True, help="audio file")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--language", default=None)
    ap.add_argument("--context", default="")
    ap.add_argument("--decoder-dtype", default="fp32", choices=["fp32", "int8", "int4"])
    ap.add_argument("--encoder-form", default="merged", choices=["merged", "split"])
    ap.add_argument("--official-attention", default="windowed", choices=["windowed", "as-is"])
    ap.add_argument("--ignore-eos", action="store_true",
                    help="teacher never stops at end-of-sequence (for random-weight checkpoints)")
    ap.add_argument("--teacher", default="greedy", choices=["greedy", "sample"],
                    help="how the official model makes the teacher tokens (sample: for random weights)")
    ap.add_argument("--seed", type=int, default=0, help="seed of --teacher sample")
    ap.add_argument("--json", default=None, help="write the full per-step report here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        report = compare(args.checkpoint, args.bundle, args.audio, args.max_new_tokens, args.language, args.context,
                         args.decoder_dtype, args.encoder_form, args.official_attention, args.ignore_eos, args.teacher, args.seed)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    s = report["summary"]
    print(f"{s['steps']} steps  argmax agreement {s['argmax_agreement']:.4f}  min cosine {s['min_cosine']:.7f}  "
          f"mean cosine {s['mean_cosine']:.7f}  max abs {s['max_abs']:.3g}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
