"""An official Qwen3-ASR checkpoint as the GGUF file that CrispASR's ``qwen3asr`` loader reads.

Used by bench_peers only (the peer benchmark): the ``crispasr`` wheel ships the runtime and no
converter, so this module writes the file itself, from the layout the loader asks for (the
``qwen3asr.*`` keys and tensor names it looks up), reading the checkpoint with our own
safetensors reader (qwen3asr_tools.checkpoint).

Storage types follow CrispASR's published 4-bit files: the text decoder's matrices (embedding
included) Q4_K, the audio encoder's linear matrices Q8_0, convolution kernels F16, norms,
biases and the mel tables F32. The quantisation is ggml's own (``ggml_quantize_chunk`` of the
libggml-base that the wheel ships, through ctypes), so the bytes are what CrispASR's own tools
would store. The ``gguf`` package (PyPI) writes the container.

Tensor names (official -> GGUF):

- ``thinker.audio_tower.conv2d{1,2,3}`` -> ``audio.conv.{1,2,3}``; ``conv_out``, ``ln_post``,
  ``proj1``, ``proj2`` -> ``audio.<same>``;
- ``thinker.audio_tower.layers.I.{self_attn_layer_norm, self_attn.{q,k,v,out}_proj,
  final_layer_norm, fc1, fc2}`` -> ``audio.blk.I.{attn_norm, attn_{q,k,v,out}, ffn_norm, ffn_up,
  ffn_down}``;
- ``thinker.model.embed_tokens`` -> ``token_embd``, ``thinker.model.norm`` -> ``output_norm``,
  ``thinker.lm_head`` (or the embedding when tied) -> ``output``;
- ``thinker.model.layers.I.{input_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
  post_attention_layernorm, mlp.{gate,up,down}_proj}`` -> ``blk.I.{attn_norm, attn_{q,k,v,output},
  attn_{q,k}_norm, ffn_norm, ffn_{gate,up,down}}``.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
from typing import Optional

import numpy as np

from qwen3asr.audio import SAMPLE_RATE
from qwen3asr.mel import HOP_LENGTH, N_FFT, _hann, mel_filters

from .checkpoint import open_weights, read_config

ARCH = "qwen3asr"
EOS_TOKEN_ID = 151645  # <|im_end|>
PAD_TOKEN_ID = 151643  # <|endoftext|>

_AUDIO_TOP = {"conv2d1": "conv.1", "conv2d2": "conv.2", "conv2d3": "conv.3", "conv_out": "conv_out",
              "ln_post": "ln_post", "proj1": "proj1", "proj2": "proj2"}
_AUDIO_LAYER = {"self_attn_layer_norm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                "self_attn.v_proj": "attn_v", "self_attn.out_proj": "attn_out", "final_layer_norm": "ffn_norm",
                "fc1": "ffn_up", "fc2": "ffn_down"}
_TEXT_LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
               "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm",
               "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
_AUDIO_LAYER_RE = re.compile(r"thinker\.audio_tower\.layers\.(\d+)\.(.+)\.(weight|bias)$")
_TEXT_LAYER_RE = re.compile(r"thinker\.model\.layers\.(\d+)\.(.+)\.(weight|bias)$")
_AUDIO_TOP_RE = re.compile(r"thinker\.audio_tower\.([a-z0-9_]+)\.(weight|bias)$")


def gguf_name(official: str) -> Optional[str]:
    """The GGUF tensor name of an official tensor name (None: not stored, e.g. rotary tables)."""
    m = _AUDIO_LAYER_RE.match(official)
    if m and m.group(2) in _AUDIO_LAYER:
        return f"audio.blk.{m.group(1)}.{_AUDIO_LAYER[m.group(2)]}.{m.group(3)}"
    m = _TEXT_LAYER_RE.match(official)
    if m and m.group(2) in _TEXT_LAYER:
        return f"blk.{m.group(1)}.{_TEXT_LAYER[m.group(2)]}.{m.group(3)}"
    m = _AUDIO_TOP_RE.match(official)
    if m and m.group(1) in _AUDIO_TOP:
        return f"audio.{_AUDIO_TOP[m.group(1)]}.{m.group(2)}"
    return {"thinker.model.embed_tokens.weight": "token_embd.weight", "thinker.model.norm.weight": "output_norm.weight",
            "thinker.lm_head.weight": "output.weight"}.get(official)


class GgmlQuantizer:
    """ggml's row quantisers from a libggml-base shared library (ctypes)."""

    def __init__(self, lib_path: str):
        self.lib = ctypes.CDLL(lib_path)
        self.lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
        self.lib.ggml_row_size.restype = ctypes.c_size_t
        self.lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                                 ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        self.lib.ggml_quantize_chunk.restype = ctypes.c_size_t

    def quantize(self, x: np.ndarray, qtype: int) -> np.ndarray:
        """``(rows, n)`` float -> ``(rows, row_bytes)`` uint8 of ggml type ``qtype``."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        rows, n = x.shape
        row_bytes = self.lib.ggml_row_size(qtype, n)
        out = np.empty((rows, row_bytes), np.uint8)
        got = self.lib.ggml_quantize_chunk(qtype, x.ctypes.data, out.ctypes.data, 0, rows, n, None)
        if got != out.nbytes:
            raise RuntimeError(f"ggml_quantize_chunk wrote {got} bytes, expected {out.nbytes}")
        return out


def crispasr_ggml_lib() -> str:
    """libggml-base.so of the installed crispasr package (ImportError if crispasr is missing)."""
    import crispasr

    path = os.path.join(os.path.dirname(crispasr.__file__), "libggml-base.so")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} missing: the crispasr wheel for this platform ships it")
    return path


def _tokens(ckpt_dir: str, vocab_size: int) -> list[str]:
    """Token strings by id: vocab.json plus the added tokens of tokenizer_config.json, holes filled."""
    with open(os.path.join(ckpt_dir, "vocab.json"), encoding="utf-8") as f:
        by_id = {i: t for t, i in json.load(f).items()}
    cfg_path = os.path.join(ckpt_dir, "tokenizer_config.json")
    if os.path.isfile(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            for i, tok in json.load(f).get("added_tokens_decoder", {}).items():
                by_id[int(i)] = tok["content"]
    return [by_id.get(i, f"[PAD{i}]") for i in range(vocab_size)]


def _merges(ckpt_dir: str) -> list[str]:
    with open(os.path.join(ckpt_dir, "merges.txt"), encoding="utf-8") as f:
        return [ln.rstrip("\n") for ln in f if ln.strip() and not ln.startswith("#")]


def storage_type(name: str, shape: tuple) -> str:
    """'F32', 'F16', 'Q8_0' or 'Q4_K' for a GGUF tensor of this (official) shape (see the module
    docstring); a row length that the type's block does not divide falls back to the next wider
    type (Q4_K: 256 values a block, Q8_0: 32; only the tiny test shapes need it)."""
    if len(shape) < 2 or name.endswith(".bias") or "norm" in name or "ln_post" in name:
        return "F32"
    if len(shape) > 2:
        return "F16"  # convolution kernels
    kind = "Q8_0" if name.startswith("audio.") else "Q4_K"
    if kind == "Q4_K" and shape[-1] % 256:
        kind = "Q8_0"
    return kind if shape[-1] % 32 == 0 else "F16"


def write(ckpt_dir: str, out_path: str, ggml_lib: Optional[str] = None) -> None:
    """Write ``out_path`` from the official checkpoint ``ckpt_dir``."""
    import gguf

    cfg = read_config(ckpt_dir)
    if cfg.aligner is not None:
        raise ValueError(f"{ckpt_dir} is a forced aligner, not an ASR checkpoint")
    a, t, raw = cfg.audio, cfg.text, cfg.raw.get("thinker_config", cfg.raw)
    quant = GgmlQuantizer(ggml_lib or crispasr_ggml_lib())
    w = gguf.GGUFWriter(out_path + ".part", arch=ARCH)
    u32 = {"sample_rate": SAMPLE_RATE, "n_mels": a.num_mel_bins, "n_fft": N_FFT, "win_length": N_FFT,
           "hop_length": HOP_LENGTH,
           "audio.n_layers": a.encoder_layers, "audio.d_model": a.d_model, "audio.n_heads": a.encoder_attention_heads,
           "audio.head_dim": a.d_model // a.encoder_attention_heads, "audio.ff_dim": a.encoder_ffn_dim,
           "audio.conv_channels": a.downsample_hidden_size, "audio.proj_dim": a.output_dim,
           "audio.max_source_pos": a.max_source_positions, "llm.n_layers": t.num_hidden_layers,
           "llm.d_model": t.hidden_size, "llm.n_heads": t.num_attention_heads, "llm.n_kv_heads": t.num_key_value_heads,
           "llm.head_dim": t.head_dim, "llm.ff_dim": t.intermediate_size, "llm.vocab_size": t.vocab_size,
           "llm.max_pos": t.max_position_embeddings, "audio_start_token_id": cfg.audio_start_token_id,
           "audio_end_token_id": raw.get("audio_end_token_id", cfg.audio_start_token_id + 1),
           "audio_pad_token_id": cfg.audio_token_id, "eos_token_id": EOS_TOKEN_ID, "pad_token_id": PAD_TOKEN_ID}
    for key, value in u32.items():
        w.add_uint32(f"{ARCH}.{key}", int(value))
    w.add_float32(f"{ARCH}.llm.rope_theta", float(t.rope_theta))
    w.add_float32(f"{ARCH}.llm.rms_norm_eps", float(t.rms_norm_eps))
    w.add_tokenizer_model("gpt2")
    w.add_token_list(_tokens(ckpt_dir, t.vocab_size))
    w.add_token_merges(_merges(ckpt_dir))
    w.add_tensor("audio.mel_filters", np.ascontiguousarray(mel_filters(a.num_mel_bins).T, np.float32))
    w.add_tensor("audio.mel_window", np.asarray(_hann(N_FFT), np.float32))
    st = open_weights(ckpt_dir)
    names = {n: gguf_name(n) for n in st.names()}
    if "thinker.lm_head.weight" not in names:  # tied head: the embedding serves as the output matrix
        names["thinker.model.embed_tokens.weight#output"] = "output.weight"
    for official, name in sorted(names.items(), key=lambda kv: kv[1] or ""):
        if name is None:
            continue
        x = st.get(official.split("#")[0])
        kind = storage_type(name, x.shape)
        if kind == "F32":
            w.add_tensor(name, x.astype(np.float32))
        elif kind == "F16":
            w.add_tensor(name, x.astype(np.float16))
        else:
            qtype = getattr(gguf.GGMLQuantizationType, kind)
            w.add_tensor(name, quant.quantize(x, int(qtype)), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(out_path + ".part", out_path)


def main(argv=None) -> int:
    import argparse
    import sys

    ap = argparse.ArgumentParser(description="Write CrispASR's qwen3asr GGUF (Q4_K decoder, Q8_0 encoder) "
                                             "from an official Qwen3-ASR checkpoint.")
    ap.add_argument("checkpoint", help="official checkpoint directory (config.json, *.safetensors, vocab.json, ...)")
    ap.add_argument("out", help="GGUF file to write")
    args = ap.parse_args(argv)
    try:
        write(args.checkpoint, args.out)
    except (ValueError, OSError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
