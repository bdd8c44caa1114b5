"""An official checkpoint directory rebuilt from a bundle: the official model class with the
bundle's own weights (its fp32 encoder and decoder graphs and its embedding table).

For bundles whose checkpoint is not at hand, such as the committed trained default model, so
the official-model comparisons (tests/test_numerics.py, scripts/compare_logits.py,
scripts/evaluate.py --official) can run on trained weights: random weights attend almost
uniformly, which hides errors in masks, windows and positions that trained ones expose.

    python -m qwen3asr_tools.bundle_checkpoint models/default build/default-ckpt

Needs the bundle's fp32 decoder and a merged encoder graph. The weights are the graphs' float32
values under the official names (onnx_graphs' names inverted, fused matrices split again);
the rotary sections (``mrope_section``), which the bundle does not record, are set to a split of
head_dim / 2 that gives the same rotation for text-only positions (all three position ids equal).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

import numpy as np

from qwen3asr.bundle import Bundle, bf16_to_f32

from .make_random_checkpoint import Preset, config_dict, write_side_files
from .official_ref import official_modules

# onnx_graphs' names of the official layer modules (encoder layers, then decoder layers)
AUDIO_LAYER = {"self_attn_layer_norm": "ln1", "final_layer_norm": "ln2", "self_attn.q_proj": "q",
               "self_attn.k_proj": "k", "self_attn.v_proj": "v", "self_attn.out_proj": "o", "fc1": "fc1", "fc2": "fc2"}
TEXT_LAYER = {"input_layernorm": "in_norm", "self_attn.q_norm": "q_norm", "self_attn.k_norm": "k_norm",
              "self_attn.o_proj": "o", "post_attention_layernorm": "post_norm", "mlp.down_proj": "down"}


def _initializers(path: str) -> dict:
    import onnx
    from onnx import numpy_helper

    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def _preset(bundle: Bundle) -> Preset:
    a, t = bundle.audio_config, bundle.text_config
    half = t["head_dim"] // 2
    return Preset(audio_d_model=a["d_model"], audio_layers=a["encoder_layers"], audio_heads=a["encoder_attention_heads"],
                  audio_ffn=a["encoder_ffn_dim"], downsample_hidden=a["downsample_hidden_size"],
                  hidden=t["hidden_size"], layers=t["num_hidden_layers"], heads=t["num_attention_heads"],
                  kv_heads=t["num_key_value_heads"], head_dim=t["head_dim"], intermediate=t["intermediate_size"],
                  mrope_section=(half - 2 * (half // 3), half // 3, half // 3))


def official_state(bundle: Bundle, model) -> dict:
    """``model``'s state dict (official names) filled from ``bundle``'s graphs; every parameter
    must be found (KeyError otherwise) with the official shape (ValueError otherwise)."""
    import torch

    merged = [v for v in bundle.manifest["encoder"]["variants"] if v.get("part") == "merged"]
    if not merged:
        raise ValueError(f"{bundle.path} has no merged encoder graph to read the encoder weights from")
    if "fp32" not in bundle.decoder_dtypes():
        raise ValueError(f"{bundle.path} has no fp32 decoder to read the text weights from")
    enc = _initializers(os.path.join(bundle.path, merged[0]["file"]))
    dec = _initializers(bundle.decoder_path("fp32"))
    t = bundle.text_config
    q_w, kv_w = t["num_attention_heads"] * t["head_dim"], t["num_key_value_heads"] * t["head_dim"]
    meta = bundle.manifest["embed_tokens"]
    emb = np.load(os.path.join(bundle.path, meta["file"]))
    emb = bf16_to_f32(emb) if meta["dtype"] == "bfloat16" else emb.astype(np.float32)

    def lookup(key: str) -> np.ndarray:
        if key.startswith("thinker.audio_tower."):
            part, kind = key[len("thinker.audio_tower."):].rsplit(".", 1)
            if part.startswith("layers."):
                _, i, sub = part.split(".", 2)
                part = f"l{i}.{AUDIO_LAYER[sub]}"
            linear = kind == "weight" and not part.startswith("conv2d") and not part.split(".")[-1].startswith("ln")
            return enc[f"{part}.weight_t"].T if linear else enc[f"{part}.{kind}"]
        if key in ("thinker.model.embed_tokens.weight", "thinker.lm_head.weight"):
            return emb
        if key == "thinker.model.norm.weight":
            return dec["final_norm.weight"]
        _, _, _, i, sub = key.split(".", 4)  # thinker.model.layers.<i>.<sub>
        sub = sub[:-len(".weight")]
        if sub in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
            qkv = dec[f"l{i}.qkv.weight_t"]
            cols = {"q": slice(0, q_w), "k": slice(q_w, q_w + kv_w), "v": slice(q_w + kv_w, q_w + 2 * kv_w)}
            return qkv[:, cols[sub.split(".")[1][0]]].T
        if sub in ("mlp.gate_proj", "mlp.up_proj"):
            gu = dec[f"l{i}.gate_up.weight_t"]
            n = t["intermediate_size"]
            return (gu[:, :n] if sub == "mlp.gate_proj" else gu[:, n:]).T
        name = f"l{i}.{TEXT_LAYER[sub]}"
        return dec[f"{name}.weight_t"].T if sub in ("self_attn.o_proj", "mlp.down_proj") else dec[f"{name}.weight"]

    state = {}
    for key, param in model.state_dict().items():
        if key.endswith("positional_embedding.positional_embedding"):
            continue  # built by the tower itself
        arr = np.array(lookup(key), dtype=np.float32, order="C")  # a writable copy
        if arr.shape != tuple(param.shape):
            raise ValueError(f"{key}: the bundle holds {arr.shape}, the official model expects {tuple(param.shape)}")
        state[key] = torch.from_numpy(arr)
    return state


def checkpoint_from_bundle(bundle_dir: str, out_dir: str) -> str:
    """Write an official checkpoint directory (config.json, model.safetensors fp32, tokenizer and
    side files) holding ``bundle_dir``'s weights; returns ``out_dir``."""
    from qwen3asr.tokenizer import Tokenizer

    bundle = Bundle.load(bundle_dir)
    bundle.require_float_encoder("rebuilding the checkpoint")
    mods = official_modules()
    tok = Tokenizer.from_dir(bundle.path)
    ids = {n: tok.token_id(n) for n in ("<|audio_pad|>", "<|audio_start|>", "<|audio_end|>", "user")}
    cfg = config_dict(_preset(bundle), vocab_size=int(bundle.text_config["vocab_size"]), token_ids=ids)
    model = mods.Qwen3ASRForConditionalGeneration(mods.Qwen3ASRConfig(**cfg))
    model.load_state_dict(official_state(bundle, model), strict=False)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    specials = bundle.special_tokens
    write_side_files(out_dir, "float32", {"qwen3asr_from_bundle": os.path.basename(os.path.normpath(bundle_dir))},
                     sorted(bundle.eos_token_ids), specials["<|endoftext|>"], max_new_tokens=512)
    for name in os.listdir(bundle.path):
        if name.endswith(".json") and name not in ("model.json", "generation_config.json",
                                                   "preprocessor_config.json") or name == "merges.txt":
            shutil.copyfile(os.path.join(bundle.path, name), os.path.join(out_dir, name))
    return out_dir


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundle", help="bundle directory (with an fp32 decoder and a merged encoder graph)")
    ap.add_argument("out", help="checkpoint directory to write")
    args = ap.parse_args(argv)
    try:
        checkpoint_from_bundle(args.bundle, args.out)
    except (ValueError, KeyError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
