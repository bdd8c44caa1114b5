"""Read an official Qwen3-ASR checkpoint directory without torch.

The checkpoint holds ``config.json`` and ``model.safetensors`` (or shards listed in
``model.safetensors.index.json``) with bf16, fp16 or fp32 tensors named
``thinker.audio_tower.*``, ``thinker.model.*`` and ``thinker.lm_head.weight``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct

import numpy as np

from qwen3asr.bundle import bf16_to_f32

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I64": np.int64, "I32": np.int32}


class CheckpointError(ValueError):
    pass


class SafeTensors:
    """Memory-mapped tensors of one or more .safetensors files; values returned as float32."""

    def __init__(self, files: list[str]):
        self._index: dict[str, tuple[str, str, tuple[int, ...], int, int]] = {}
        for path in files:
            with open(path, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(n))
            base = 8 + n
            for name, meta in header.items():
                if name == "__metadata__":
                    continue
                start, end = meta["data_offsets"]
                self._index[name] = (path, meta["dtype"], tuple(meta["shape"]), base + start, base + end)
        self._maps: dict[str, np.memmap] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def names(self) -> list[str]:
        return list(self._index)

    def dtype_of(self, name: str) -> str:
        return self._index[name][1]

    def raw(self, name: str) -> np.ndarray:
        """The stored array (bf16 as uint16)."""
        if name not in self._index:
            raise CheckpointError(f"tensor {name!r} missing from the checkpoint; is this an official Qwen3-ASR checkpoint?")
        path, dtype, shape, start, end = self._index[name]
        if dtype not in _DTYPES:
            raise CheckpointError(f"tensor {name} has unsupported dtype {dtype}")
        mm = self._maps.get(path)
        if mm is None:
            mm = self._maps[path] = np.memmap(path, dtype=np.uint8, mode="r")
        return mm[start:end].view(_DTYPES[dtype]).reshape(shape)

    def get(self, name: str) -> np.ndarray:
        """Tensor as float32 (a copy)."""
        arr = self.raw(name)
        if self.dtype_of(name) == "BF16":
            return bf16_to_f32(arr)
        return arr.astype(np.float32)


@dataclasses.dataclass(frozen=True)
class AudioConfig:
    num_mel_bins: int
    d_model: int
    encoder_layers: int
    encoder_attention_heads: int
    encoder_ffn_dim: int
    output_dim: int
    n_window: int  # half a conv chunk, in mel frames (chunk = 2 * n_window)
    n_window_infer: int  # attention window in mel frames
    downsample_hidden_size: int
    max_source_positions: int
    activation_function: str


@dataclasses.dataclass(frozen=True)
class TextConfig:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rope_theta: float
    rms_norm_eps: float
    tie_word_embeddings: bool
    hidden_act: str
    max_position_embeddings: int


@dataclasses.dataclass(frozen=True)
class AlignerConfig:
    """What makes a checkpoint Qwen3-ForcedAligner (thinker model_type "qwen3_forced_aligner"): its
    head classifies each ``<timestamp>`` slot into ``classify_num`` time bins of
    ``timestamp_segment_time`` ms."""

    classify_num: int
    timestamp_token_id: int
    timestamp_segment_time: float  # ms per class
    support_languages: tuple


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    audio: AudioConfig
    text: TextConfig
    audio_token_id: int
    audio_start_token_id: int
    raw: dict
    aligner: AlignerConfig | None = None  # set for a forced-aligner checkpoint

    @property
    def head_rows(self) -> int:
        """Rows of the output head: the vocabulary, or an aligner's time classes."""
        return self.aligner.classify_num if self.aligner else self.text.vocab_size


def _pick(d: dict, cls):
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in d]
    if missing:
        raise CheckpointError(f"config.json lacks {', '.join(missing)} for {cls.__name__}")
    return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls)})


def read_config(ckpt_dir: str) -> ModelConfig:
    path = os.path.join(ckpt_dir, "config.json")
    if not os.path.isfile(path):
        raise CheckpointError(f"{ckpt_dir} has no config.json; pass the official checkpoint directory")
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    thinker = raw.get("thinker_config", raw)
    audio = dict(thinker["audio_config"])
    text = dict(thinker["text_config"])
    text.setdefault("head_dim", text["hidden_size"] // text["num_attention_heads"])
    text.setdefault("tie_word_embeddings", raw.get("tie_word_embeddings", False))
    text.setdefault("hidden_act", "silu")
    audio.setdefault("activation_function", "gelu")
    rope = text.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) not in ("default", "mrope"):
        raise CheckpointError(f"unsupported rope_scaling {rope}; only default/MRoPE with equal axes is supported")
    return ModelConfig(
        audio=_pick(audio, AudioConfig),
        text=_pick(text, TextConfig),
        audio_token_id=int(thinker.get("audio_token_id")),
        audio_start_token_id=int(thinker.get("audio_start_token_id")),
        raw=raw,
        aligner=_aligner_config(raw, thinker),
    )


def _aligner_config(raw: dict, thinker: dict) -> AlignerConfig | None:
    """The aligner settings of a forced-aligner checkpoint (None for an ASR one). The official
    config carries them as extra keys: ``classify_num`` in the thinker config, the timestamp
    token and bin length at the top level (either place is accepted)."""
    if "forced_aligner" not in str(thinker.get("model_type", "")):
        return None

    def find(key):
        for d in (thinker, raw):
            if key in d:
                return d[key]
        raise CheckpointError(f"config.json of a forced aligner lacks {key}")

    n, tid, seg = find("classify_num"), find("timestamp_token_id"), find("timestamp_segment_time")
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise CheckpointError(f"classify_num must be an integer >= 2, got {n!r}")
    if isinstance(seg, bool) or not isinstance(seg, (int, float)) or not seg > 0:
        raise CheckpointError(f"timestamp_segment_time must be a positive number of ms, got {seg!r}")
    langs = raw.get("support_languages") or thinker.get("support_languages") or ()
    return AlignerConfig(int(n), int(tid), float(seg), tuple(str(x) for x in langs))


def open_weights(ckpt_dir: str) -> SafeTensors:
    index = os.path.join(ckpt_dir, "model.safetensors.index.json")
    single = os.path.join(ckpt_dir, "model.safetensors")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        return SafeTensors([os.path.join(ckpt_dir, p) for p in files])
    if os.path.isfile(single):
        return SafeTensors([single])
    raise CheckpointError(f"{ckpt_dir} has neither model.safetensors nor model.safetensors.index.json")
