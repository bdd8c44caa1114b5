#!/usr/bin/env python3
"""Build a random-weight Qwen3-ASR checkpoint in the official layout.

The model is the official ``Qwen3ASRForConditionalGeneration`` (PyPI ``qwen-asr``) built
from a config with the values of a real checkpoint (see docs/tokenizer.md and
the project reference notes on Qwen3-ASR, section 1), seeded, with every parameter perturbed so
that LayerNorm/RMSNorm weights are not 1 and biases are not 0. Saved with
``save_pretrained`` plus the files a real checkpoint carries: generation_config.json,
preprocessor_config.json (WhisperFeatureExtractor) and the tokenizer files.

Presets: tiny-a, tiny-b (small, different widths/heads/layers/GQA ratios, for tests),
tiny-odd (small, no width a multiple of 32), 0.6b and 1.7b (real shapes).

Qwen3-ForcedAligner presets (``ALIGNER_PRESETS``): fa-tiny-a, fa-tiny-b, fa-tiny-odd (the tiny
shapes with 50, 63 and 37 time classes) and fa-0.6b (the real aligner's shapes, 5000 classes).
The aligner is the same model class with thinker ``model_type`` "qwen3_forced_aligner": its
head is an untied ``Linear(hidden, classify_num)``, its vocabulary 152064 rows, and the config
carries ``timestamp_token_id`` 151705 and ``timestamp_segment_time`` 80 at the top level.
``save_pretrained`` writes the thinker's class ``model_type`` ("qwen3_asr_thinker") into
config.json, which would reload with a vocabulary-sized head; ``make_checkpoint`` writes the
aligner's type back. Its tokenizer files have ``<timestamp>`` at 151705.

Usage: python scripts/make_random_checkpoint.py --preset tiny-a --out DIR [--seed N]
           [--dtype bfloat16|float32]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Union

from qwen3asr.aligner.words import ALIGNER_LANGUAGES
from qwen3asr.languages import SUPPORTED_LANGUAGES

from .make_tokenizer_files import TIMESTAMP_TOKEN_ID, write_json, write_tokenizer_files
from .official_ref import FEATURE_EXTRACTOR_SETTINGS, official_modules

logger = logging.getLogger(__name__)

VOCAB_SIZE = 151936
AUDIO_TOKEN_ID = 151676  # <|audio_pad|>
AUDIO_START_TOKEN_ID = 151669  # <|audio_start|>
AUDIO_END_TOKEN_ID = 151670  # <|audio_end|>
EOS_TOKEN_IDS = (151645, 151643)  # <|im_end|>, <|endoftext|>
PAD_TOKEN_ID = 151643

# Official token ids of the real checkpoints' config.json (thinker_config).
TOKEN_IDS: Dict[str, int] = {
    "<|audio_pad|>": AUDIO_TOKEN_ID,
    "<|audio_start|>": AUDIO_START_TOKEN_ID,
    "<|audio_end|>": AUDIO_END_TOKEN_ID,
    "user": 872,
}


@dataclass(frozen=True)
class Preset:
    """Model shape. Audio head_dim = audio_d_model / audio_heads; text head_dim explicit."""

    audio_d_model: int
    audio_layers: int
    audio_heads: int
    audio_ffn: int
    downsample_hidden: int  # conv stem channels
    hidden: int  # text hidden size (= audio output_dim)
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    mrope_section: tuple  # sums to head_dim // 2


PRESETS: Dict[str, Preset] = {
    "tiny-a": Preset(64, 2, 4, 128, 32, 96, 2, 4, 2, 32, 192, (6, 5, 5)),
    "tiny-b": Preset(96, 3, 6, 160, 48, 128, 3, 8, 2, 16, 256, (4, 2, 2)),
    # no width a multiple of 32 (hidden 112, heads*head_dim 80, intermediate 200, audio 72/152):
    # the int8/int4 blocks must be padded (tests/test_export_widths.py)
    "tiny-odd": Preset(72, 2, 4, 152, 24, 112, 2, 5, 1, 16, 200, (4, 2, 2)),
    "0.6b": Preset(896, 18, 14, 3584, 480, 1024, 28, 16, 8, 128, 3072, (24, 20, 20)),
    "1.7b": Preset(1024, 24, 16, 4096, 480, 2048, 28, 16, 8, 128, 6144, (24, 20, 20)),
}
DTYPES = ("bfloat16", "float32")

ALIGNER_MODEL_TYPE = "qwen3_forced_aligner"  # thinker_config.model_type of the real aligner
ALIGNER_VOCAB_SIZE = 152064  # the aligner's embedding rows (the ASR models': 151936)
ALIGNER_MAX_POSITIONS = 8192  # max_position_embeddings of the real aligner's text config
TIMESTAMP_SEGMENT_TIME = 80  # milliseconds per time class


@dataclass(frozen=True)
class AlignerPreset:
    """A Qwen3-ForcedAligner: a model shape and the number of time classes of its head."""

    shape: Preset
    classify_num: int  # head rows: class k means k x TIMESTAMP_SEGMENT_TIME ms


ALIGNER_PRESETS: Dict[str, AlignerPreset] = {
    "fa-tiny-a": AlignerPreset(PRESETS["tiny-a"], 50),
    "fa-tiny-b": AlignerPreset(PRESETS["tiny-b"], 63),
    "fa-tiny-odd": AlignerPreset(PRESETS["tiny-odd"], 37),
    # Qwen3-ForcedAligner-0.6B: the 1.7B ASR encoder's trunk with output_dim 1024, a Qwen3-0.6B
    # text model, 5000 classes (400 s)
    "fa-0.6b": AlignerPreset(Preset(1024, 24, 16, 4096, 480, 1024, 28, 16, 8, 128, 3072, (24, 20, 20)), 5000),
}


def config_dict(preset: Union[str, Preset], vocab_size: int = VOCAB_SIZE,
                token_ids: Optional[Dict[str, int]] = None) -> dict:
    """The checkpoint's config.json content (before transformers adds its bookkeeping keys).

    preset: a name of ``PRESETS`` or a ``Preset``; vocab_size: embedding rows; token_ids:
    ids of "<|audio_pad|>", "<|audio_start|>", "<|audio_end|>" and "user" (default: the
    real checkpoint's ``TOKEN_IDS``; a model with its own tokenizer passes its ids).
    """
    if isinstance(preset, Preset):
        p, label = preset, "model"
    elif preset in PRESETS:
        p, label = PRESETS[preset], preset
    else:
        raise ValueError(f"unknown preset {preset!r}; accepted: {', '.join(PRESETS)}")
    ids = dict(TOKEN_IDS if token_ids is None else token_ids)
    missing = sorted(set(TOKEN_IDS) - set(ids))
    if missing:
        raise ValueError(f"token_ids lacks {missing}; give the ids of {', '.join(TOKEN_IDS)}")
    if sum(p.mrope_section) != p.head_dim // 2:
        raise ValueError(f"{label}: mrope_section {p.mrope_section} must sum to head_dim/2 = {p.head_dim // 2}")
    audio = {
        "num_mel_bins": 128,
        "d_model": p.audio_d_model,
        "encoder_layers": p.audio_layers,
        "encoder_attention_heads": p.audio_heads,
        "encoder_ffn_dim": p.audio_ffn,
        "downsample_hidden_size": p.downsample_hidden,
        "output_dim": p.hidden,
        "n_window": 50,
        "n_window_infer": 800,
        "conv_chunksize": 500,
        "max_source_positions": 1500,
        "activation_function": "gelu",
        "scale_embedding": False,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "initializer_range": 0.02,
    }
    text = {
        "vocab_size": vocab_size,
        "hidden_size": p.hidden,
        "intermediate_size": p.intermediate,
        "num_hidden_layers": p.layers,
        "num_attention_heads": p.heads,
        "num_key_value_heads": p.kv_heads,
        "head_dim": p.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 65536,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": {
            "interleaved": True,
            "mrope_interleaved": True,
            "mrope_section": list(p.mrope_section),
            "rope_type": "default",
            "type": "default",
        },
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": True,
        "use_cache": True,
        "initializer_range": 0.02,
    }
    thinker = {
        "audio_config": audio,
        "text_config": text,
        "audio_token_id": ids["<|audio_pad|>"],
        "audio_start_token_id": ids["<|audio_start|>"],
        "audio_end_token_id": ids["<|audio_end|>"],
        "user_token_id": ids["user"],
        "initializer_range": 0.02,
        "tie_word_embeddings": True,
    }
    return {
        "architectures": ["Qwen3ASRForConditionalGeneration"],
        "model_type": "qwen3_asr",
        "thinker_config": thinker,
        "support_languages": list(SUPPORTED_LANGUAGES),
        "tie_word_embeddings": True,
    }


def aligner_config_dict(preset: Union[str, AlignerPreset]) -> dict:
    """config.json content of a Qwen3-ForcedAligner (the values of the real one's config.json
    where the preset does not set them)."""
    if isinstance(preset, AlignerPreset):
        p = preset
    elif preset in ALIGNER_PRESETS:
        p = ALIGNER_PRESETS[preset]
    else:
        raise ValueError(f"unknown aligner preset {preset!r}; accepted: {', '.join(ALIGNER_PRESETS)}")
    if p.classify_num < 2:
        raise ValueError(f"classify_num must be >= 2, got {p.classify_num}")
    cfg = config_dict(p.shape, vocab_size=ALIGNER_VOCAB_SIZE)
    thinker = cfg["thinker_config"]
    thinker["model_type"] = ALIGNER_MODEL_TYPE
    thinker["classify_num"] = p.classify_num
    thinker["tie_word_embeddings"] = False
    thinker["text_config"]["tie_word_embeddings"] = False
    thinker["text_config"]["max_position_embeddings"] = ALIGNER_MAX_POSITIONS
    cfg["tie_word_embeddings"] = False
    cfg["timestamp_token_id"] = TIMESTAMP_TOKEN_ID
    cfg["timestamp_segment_time"] = TIMESTAMP_SEGMENT_TIME
    cfg["support_languages"] = list(ALIGNER_LANGUAGES)
    return cfg


def is_aligner_preset(preset: str) -> bool:
    return preset in ALIGNER_PRESETS


def restore_aligner_type(ckpt_dir: str) -> None:
    """Write thinker_config.model_type "qwen3_forced_aligner" back into a saved aligner's config.json.

    ``save_pretrained`` writes the thinker config class's own model_type; reloading that
    would build a vocabulary-sized head and fail on the saved (classify_num, hidden) one.
    """
    path = os.path.join(ckpt_dir, "config.json")
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    thinker = cfg["thinker_config"]
    missing = [k for k in ("timestamp_token_id", "timestamp_segment_time") if k not in cfg]
    if "classify_num" not in thinker:
        missing.append("thinker_config.classify_num")
    if missing:
        raise RuntimeError(f"{path}: save_pretrained dropped {missing}; the aligner cannot be reloaded")
    thinker["model_type"] = ALIGNER_MODEL_TYPE
    write_json(path, cfg)


def _perturb(model, seed: int) -> None:
    """Seeded weights: default init, then every parameter gets a small seeded offset.

    Norm weights become 1 + N(0, 0.1), biases N(0, 0.05), other tensors
    w + N(0, 0.2 * std(w) or 0.02). Tied tensors are perturbed once.
    """
    import torch

    gen = torch.Generator().manual_seed(seed + 1)
    seen = set()
    with torch.no_grad():
        for name, param in model.named_parameters(remove_duplicate=True):
            if id(param) in seen:
                continue
            seen.add(id(param))
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
            is_norm = "norm" in name or "ln_post" in name
            if name.endswith("bias"):
                param.copy_((param.float() + 0.05 * noise).to(param.dtype))
            elif is_norm:
                param.copy_((1.0 + 0.1 * noise).to(param.dtype))
            else:
                std = float(param.float().std()) if param.numel() > 1 else 0.0
                scale = 0.2 * std if std > 0 else 0.02
                param.copy_((param.float() + scale * noise).to(param.dtype))


def build_model(preset: str, seed: int = 0):
    """The official model for ``preset`` (ASR or aligner) with seeded, perturbed float32 weights."""
    import torch

    mods = official_modules()
    config = mods.Qwen3ASRConfig(**(aligner_config_dict(preset) if is_aligner_preset(preset) else config_dict(preset)))
    torch.manual_seed(seed)
    model = mods.Qwen3ASRForConditionalGeneration(config)
    model.to(torch.float32)
    _perturb(model, seed)
    model.eval()
    return model


def write_side_files(out_dir: str, dtype: str, provenance: dict, eos_token_ids: Sequence[int],
                     pad_token_id: int, max_new_tokens: int) -> None:
    """Complete a ``save_pretrained`` directory as a real checkpoint is laid out.

    config.json gets ``dtype`` (the storage dtype of model.safetensors) and the
    ``provenance`` keys (how the weights were made); generation_config.json (greedy) and
    preprocessor_config.json (WhisperFeatureExtractor) are written. Tokenizer files are
    the caller's.
    """
    cfg_path = os.path.join(out_dir, "config.json")
    with open(cfg_path, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["dtype"] = dtype
    cfg.update(provenance)
    write_json(cfg_path, cfg)
    write_json(
        os.path.join(out_dir, "generation_config.json"),
        {
            "do_sample": False,
            "eos_token_id": list(eos_token_ids),
            "pad_token_id": pad_token_id,
            "max_new_tokens": max_new_tokens,
        },
    )
    fe = FEATURE_EXTRACTOR_SETTINGS
    n_samples = fe["chunk_length"] * fe["sampling_rate"]
    write_json(
        os.path.join(out_dir, "preprocessor_config.json"),
        dict(fe, feature_extractor_type="WhisperFeatureExtractor", n_samples=n_samples,
             nb_max_frames=n_samples // fe["hop_length"], processor_class="Qwen3ASRProcessor"),
    )


def make_checkpoint(preset: str, out_dir: str, seed: int = 0, dtype: str = "float32") -> str:
    """Write a complete checkpoint directory; returns ``out_dir``.

    preset: a name of ``PRESETS`` (ASR model) or ``ALIGNER_PRESETS`` (forced aligner).
    dtype: storage dtype of model.safetensors ("bfloat16" like the real checkpoints, or
    "float32").
    """
    import torch

    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; accepted: {', '.join(DTYPES)}")
    model = build_model(preset, seed)
    if dtype == "bfloat16":
        model.to(torch.bfloat16)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    # Keep config.json's dtype honest and the checkpoint self-describing.
    write_side_files(out_dir, dtype, {"qwen3asr_random": {"preset": preset, "seed": seed}},
                     EOS_TOKEN_IDS, PAD_TOKEN_ID, max_new_tokens=512)
    aligner = is_aligner_preset(preset)
    if aligner:
        restore_aligner_type(out_dir)
    write_tokenizer_files(out_dir, aligner=aligner)
    logger.info("wrote %s checkpoint (seed %d, %s) to %s", preset, seed, dtype, out_dir)
    return out_dir


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS) + sorted(ALIGNER_PRESETS))
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="float32", choices=DTYPES)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    make_checkpoint(args.preset, args.out, args.seed, args.dtype)
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
