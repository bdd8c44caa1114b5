#!/usr/bin/env python3
"""Convert an official Qwen3-ASR checkpoint directory into a model bundle for qwen3asr.

    python scripts/export_onnx.py --checkpoint Qwen3-ASR-0.6B --out models/qwen3-asr-0.6b

The bundle holds:
  encoder/merged_{N}s.onnx      one graph per fixed duration (default 2,3,4,5,8 s)
  encoder/frontend.onnx         split form: conv stem of one 100-frame chunk
  encoder/backend_{N}s.onnx     split form: transformer of N seconds of tokens
  decoder/decoder_{fp32,int8,int4}.onnx (+ .data)   KV-cache decoder for ONNX Runtime
  embed_tokens.npy              the token embedding table the host embeds prompts with
  vocab.json, merges.txt, tokenizer_config.json, ...   tokenizer files
  token_table.npz               every token's bytes and the fixed prompts' ids (a load without BPE)
  model.json                    manifest: config, special ids, variants, dtypes, checksums

A Qwen3-ForcedAligner checkpoint (thinker model_type "qwen3_forced_aligner") gives an aligner
bundle (``"kind": "aligner"``): the same encoder graphs, its decoder graphs score ``<timestamp>``
slots (the head has ``classify_num`` time classes instead of the vocabulary), and
aligner_head.npy / aligner_norm.npy hold the head and the final norm for backends that apply
them on the host.

``--memory lean`` (CPU bundles for small machines and one-shot runs; docs/benchmarks.md "Lean
profile"): every encoder linear stored as weight-only int8 (MatMulNBits, about a quarter of the
fp32 bytes; the RKNN converter needs the default fp32 encoder), and every decoder's weights in
``decoder_<dtype>.onnx.data`` at page-aligned offsets, which ONNX Runtime memory-maps instead of
reading them into the graph's protobuf and copying them again.

Needs numpy and onnx only (no torch). Every encoder graph uses opset 17 (RKNN takes <= 19).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import sys
import time

import numpy as np

from qwen3asr.backends import MEMORY_PROFILES  # the engine's memory profiles, one list
from qwen3asr.bundle import BUNDLE_FORMAT, sha256_file
from qwen3asr.encoder import CHUNK_FRAMES, TOKENS_PER_CHUNK
from qwen3asr.prompt import fixed_prompt_texts
from qwen3asr.token_table import write_token_table

from . import checkpoint as ckpt
from . import onnx_graphs as graphs

EXPORTER_VERSION = "1.0.0"
DEFAULT_DURATIONS = (2, 3, 4, 5, 8)
TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json", "tokenizer.json", "chat_template.json",
                   "preprocessor_config.json", "generation_config.json", "special_tokens_map.json")
SPECIAL_NAMES = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|audio_end|>",
                 "<|audio_pad|>", "<asr_text>")
ALIGNER_SPECIAL_NAMES = ("<timestamp>",)  # the slot token of a forced aligner's input
LARGE_MODEL_BYTES = 1_800_000_000  # protobuf limit is 2 GiB: store weights beside larger graphs

log = logging.getLogger("export_onnx")


def save_model(model, path: str) -> list[str]:
    """Save an ONNX model; weights go to ``path + '.data'`` when the graph is large."""
    import onnx

    os.makedirs(os.path.dirname(path), exist_ok=True)
    size = sum(t.ByteSize() for t in model.graph.initializer)
    if size > LARGE_MODEL_BYTES or path.endswith("decoder_fp32.onnx"):
        data = os.path.basename(path) + ".data"
        if os.path.exists(path + ".data"):
            os.remove(path + ".data")
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=data, size_threshold=1024)
        return [path, path + ".data"]
    onnx.save_model(model, path)
    return [path]


class SharedWeights:
    """One weights file shared by several ONNX graphs (the fixed-size encoder variants hold the
    same tensors): each distinct tensor is stored once and every graph points at it."""

    ALIGN = 4096  # page-aligned offsets let ONNX Runtime memory-map the tensors
    MIN_BYTES = 1024  # smaller tensors stay inside the graph

    def __init__(self, path: str):
        self.path = path
        self.location = os.path.basename(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._f = open(path, "wb")
        self._index: dict[tuple[str, str], tuple[int, int]] = {}

    def externalize(self, model) -> None:
        from onnx import TensorProto, external_data_helper

        for t in model.graph.initializer:
            raw = t.raw_data
            if len(raw) < self.MIN_BYTES:
                continue
            key = (t.name, hashlib.sha1(raw).hexdigest())
            if key not in self._index:
                pos = self._f.tell()
                pad = (-pos) % self.ALIGN
                self._f.write(b"\0" * pad)
                self._index[key] = (pos + pad, len(raw))
                self._f.write(raw)
            offset, length = self._index[key]
            external_data_helper.set_external_data(t, self.location, offset, length)
            t.data_location = TensorProto.EXTERNAL
            t.ClearField("raw_data")

    def close(self) -> None:
        self._f.close()


def save_aligned(model, path: str) -> list[str]:
    """Save an ONNX model with its weights in ``path + '.data'`` at page-aligned offsets (ONNX
    Runtime memory-maps such external data on the CPU)."""
    import onnx

    shared = SharedWeights(path + ".data")
    try:
        shared.externalize(model)
    finally:
        shared.close()
    onnx.save_model(model, path)
    return [path, path + ".data"]


def save_encoder(model, path: str, shared: SharedWeights) -> list[str]:
    import onnx

    shared.externalize(model)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.save_model(model, path)
    return [path]


def default_quant_block(bits: int, text_cfg) -> int:
    """int8: 128-weight blocks when every matmul input width is a multiple of 128 (about 20% faster
    than 32 at the same argmax agreement, docs/benchmarks.md), else 32. int4: 64, with its block
    scales searched (the export does that for every int4 decoder): 13 % faster per decode step than 32, and on the
    0.6B-shaped checkpoint the same logit cosine to the official model as 32 with absmax scales
    (docs/benchmarks.md); 128 loses more. Any width works with any block: a width that is not a
    multiple is padded up to whole blocks with zero weights (onnx_graphs.quantize_blockwise)."""
    widths = (text_cfg.hidden_size, text_cfg.num_attention_heads * text_cfg.head_dim, text_cfg.intermediate_size)
    if bits == 8 and all(w % 128 == 0 for w in widths):
        return 128
    if bits == 4:
        return 64
    return 32


def special_token_ids(ckpt_dir: str, names=SPECIAL_NAMES) -> dict[str, int]:
    """Special ids ``names`` resolved by name from the checkpoint's tokenizer files."""
    ids: dict[str, int] = {}
    cfg_path = os.path.join(ckpt_dir, "tokenizer_config.json")
    if os.path.isfile(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            for tid, meta in json.load(f).get("added_tokens_decoder", {}).items():
                ids[meta["content"]] = int(tid)
    tok_json = os.path.join(ckpt_dir, "tokenizer.json")
    if os.path.isfile(tok_json):
        with open(tok_json, encoding="utf-8") as f:
            for meta in json.load(f).get("added_tokens", []):
                ids.setdefault(meta["content"], int(meta["id"]))
    missing = [n for n in names if n not in ids]
    if missing:
        vocab = os.path.join(ckpt_dir, "vocab.json")
        if os.path.isfile(vocab):
            with open(vocab, encoding="utf-8") as f:
                v = json.load(f)
            for n in missing:
                if n in v:
                    ids[n] = int(v[n])
        missing = [n for n in names if n not in ids]
    if missing:
        raise ckpt.CheckpointError(
            f"tokenizer files of {ckpt_dir} do not define {', '.join(missing)}; is this a Qwen3-ASR checkpoint?")
    return {n: ids[n] for n in names}


def export(ckpt_dir: str, out_dir: str, durations=DEFAULT_DURATIONS, forms=("merged", "split"),
           decoder_dtypes=("fp32", "int8"), quant_block: int | None = None, memory: str = "default") -> dict:
    """Write the bundle of ``ckpt_dir`` into ``out_dir``; returns its manifest. ``memory``:
    "default" (fp32 encoder, the RKNN converter's input) or "lean" (see the module docstring)."""
    if memory not in MEMORY_PROFILES:
        raise ValueError(f"memory must be one of {', '.join(MEMORY_PROFILES)} (got {memory!r})")
    lean = memory == "lean"
    enc_bits = 8 if lean else None
    t_start = time.time()
    cfg = ckpt.read_config(ckpt_dir)
    W = ckpt.open_weights(ckpt_dir)
    al = cfg.aligner  # a Qwen3-ForcedAligner checkpoint: an aligner bundle
    specials = special_token_ids(ckpt_dir, SPECIAL_NAMES + (ALIGNER_SPECIAL_NAMES if al else ()))
    if al and specials["<timestamp>"] != al.timestamp_token_id:
        raise ckpt.CheckpointError(f"config timestamp_token_id {al.timestamp_token_id} != tokenizer's <timestamp> "
                                   f"{specials['<timestamp>']}")
    if specials["<|audio_pad|>"] != cfg.audio_token_id:
        raise ckpt.CheckpointError(
            f"config audio_token_id {cfg.audio_token_id} != tokenizer's <|audio_pad|> {specials['<|audio_pad|>']}")
    a, t = cfg.audio, cfg.text
    if a.n_window * 2 != CHUNK_FRAMES:
        raise ckpt.CheckpointError(f"n_window={a.n_window}: only 50 (100-frame chunks) is supported")
    if t.head_dim % 16:
        raise ckpt.CheckpointError(
            f"text head_dim {t.head_dim} is not a multiple of 16: ONNX Runtime's GroupQueryAttention, which the "
            f"decoder graph uses, rejects it at run time (the official 0.6B/1.7B use 128)")
    window_tokens = TOKENS_PER_CHUNK * (a.n_window_infer // (2 * a.n_window))
    os.makedirs(out_dir, exist_ok=True)
    files: list[str] = []
    variants = []
    for form in forms:
        if form not in ("merged", "split"):
            raise ValueError(f"unknown encoder form {form!r}; use merged and/or split")
    if quant_block is not None:
        graphs.check_quant_block(quant_block)
    shared = SharedWeights(os.path.join(out_dir, "encoder", "weights.bin"))
    if "split" in forms:
        log.info("encoder front end (split form)")
        path = os.path.join(out_dir, "encoder", "frontend.onnx")
        files += save_encoder(graphs.encoder_frontend(W, a, enc_bits), path, shared)
        variants.append({"form": "split", "part": "frontend", "seconds": 1, "n_chunks": 1, "tokens": TOKENS_PER_CHUNK,
                         "file": "encoder/frontend.onnx"})
    for d in sorted(set(int(x) for x in durations)):
        if d < 1:
            raise ValueError(f"encoder durations are whole seconds >= 1, got {d}")
        for form in forms:
            name = f"merged_{d}s.onnx" if form == "merged" else f"backend_{d}s.onnx"
            log.info("encoder %s %d s", form, d)
            model = (graphs.encoder_merged(W, a, d, enc_bits) if form == "merged"
                     else graphs.encoder_backend(W, a, d, enc_bits))
            files += save_encoder(model, os.path.join(out_dir, "encoder", name), shared)
            variants.append({"form": form, "part": "merged" if form == "merged" else "backend", "seconds": d,
                             "n_chunks": d, "tokens": TOKENS_PER_CHUNK * d, "file": f"encoder/{name}"})
    shared.close()
    files.append(shared.path)
    dec_variants = []
    for dt in decoder_dtypes:
        bits = {"fp32": None, "int8": 8, "int4": 4}.get(dt, "bad")
        if bits == "bad":
            raise ValueError(f"unknown decoder dtype {dt!r}; use fp32, int8 or int4")
        log.info("decoder %s", dt)
        path = os.path.join(out_dir, "decoder", f"decoder_{dt}.onnx")
        block = quant_block or default_quant_block(bits, t) if bits else None
        search = bits == 4  # int4 block scales by least squared error (onnx_graphs.quantize_blockwise)
        model = graphs.decoder(W, cfg, bits=bits, block_size=block or 32, scale_search=search)
        files += save_aligned(model, path) if lean else save_model(model, path)
        entry = {"dtype": dt, "file": f"decoder/decoder_{dt}.onnx"}
        if bits:
            entry["quantization"] = {"scheme": "weight-only symmetric block-wise (MatMulNBits)", "bits": bits,
                                     "block_size": block, "scales": "least-squares search" if search else "absmax"}
        dec_variants.append(entry)
    # the host's embedding table, kept in the checkpoint's precision (bf16 stored as uint16 bits)
    emb_name = "thinker.model.embed_tokens.weight"
    raw = W.raw(emb_name)
    emb_dtype = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[W.dtype_of(emb_name)]
    np.save(os.path.join(out_dir, "embed_tokens.npy"), np.ascontiguousarray(raw))
    files.append(os.path.join(out_dir, "embed_tokens.npy"))
    aligner = None
    if al:  # the head and the final norm for backends that score slots on the host (RKLLM hidden states)
        head = W.raw("thinker.lm_head.weight")
        head_dtype = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[W.dtype_of("thinker.lm_head.weight")]
        np.save(os.path.join(out_dir, "aligner_head.npy"), np.ascontiguousarray(head))
        np.save(os.path.join(out_dir, "aligner_norm.npy"), W.get("thinker.model.norm.weight"))
        files += [os.path.join(out_dir, "aligner_head.npy"), os.path.join(out_dir, "aligner_norm.npy")]
        aligner = {"classify_num": al.classify_num, "timestamp_token_id": al.timestamp_token_id,
                   "timestamp_segment_ms": al.timestamp_segment_time, "languages": list(al.support_languages),
                   "head": {"file": "aligner_head.npy", "dtype": head_dtype, "shape": list(head.shape)},
                   "norm": {"file": "aligner_norm.npy", "eps": t.rms_norm_eps}}
    for name in TOKENIZER_FILES:
        src = os.path.join(ckpt_dir, name)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(out_dir, name))
            files.append(os.path.join(out_dir, name))
    # every token's bytes and the fixed prompt texts' ids: a load without BPE (qwen3asr.tokenizer)
    files.append(write_token_table(out_dir, [] if al else fixed_prompt_texts()))
    eos = [specials["<|im_end|>"], specials["<|endoftext|>"]]
    manifest = {
        "format": BUNDLE_FORMAT,
        "kind": "aligner" if al else "asr",
        "exporter_version": EXPORTER_VERSION,
        "created_unix": int(time.time()),
        "memory": memory,
        "source": {"checkpoint_name": os.path.basename(os.path.normpath(ckpt_dir)),
                   "config_sha256": sha256_file(os.path.join(ckpt_dir, "config.json"))},
        "config": {"audio": vars(a), "text": vars(t), "audio_token_id": cfg.audio_token_id,
                   "audio_start_token_id": cfg.audio_start_token_id,
                   "support_languages": cfg.raw.get("support_languages")},
        "mel": {"sample_rate": 16000, "n_fft": 400, "hop_length": 160, "n_mels": a.num_mel_bins},
        "special_tokens": specials,
        "eos_token_ids": eos,
        "encoder": {"chunk_frames": CHUNK_FRAMES, "tokens_per_chunk": TOKENS_PER_CHUNK, "window_tokens": window_tokens,
                    "opset": graphs.OPSET, "dtype": "int8" if lean else "float32",
                    "weights_file": "encoder/weights.bin",
                    "inputs": {"merged": ["mel", "conv_mask1", "conv_mask2", "attn_bias"],
                               "frontend": ["mel", "conv_mask1", "conv_mask2"], "backend": ["hidden", "attn_bias"]},
                    "variants": variants},
        "decoder": {"variants": dec_variants, "max_context": graphs.DECODER_MAX_POSITIONS},
        "embed_tokens": {"file": "embed_tokens.npy", "dtype": emb_dtype, "shape": list(raw.shape)},
        "files": {},
    }
    if aligner:
        manifest["aligner"] = aligner
    for path in files:
        manifest["files"][os.path.relpath(path, out_dir).replace(os.sep, "/")] = sha256_file(path)
    with open(os.path.join(out_dir, "model.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
    log.info("bundle written to %s in %.1f s", out_dir, time.time() - t_start)
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="official checkpoint directory (config.json, model.safetensors, tokenizer files)")
    ap.add_argument("--out", required=True, help="bundle directory to write")
    ap.add_argument("--durations", default=",".join(map(str, DEFAULT_DURATIONS)),
                    help="encoder variant durations in whole seconds, comma-separated (default %(default)s; add e.g. 16,30 for longer)")
    ap.add_argument("--forms", default="merged,split", help="encoder forms: merged, split or both (default %(default)s)")
    ap.add_argument("--decoder", default="fp32,int8", help="decoder dtypes: fp32, int8, int4 (default %(default)s)")
    ap.add_argument("--quant-block", type=int, default=None,
                    help="block size of int8/int4 weight quantisation, a power of 2 >= 16 (default: int8 128 "
                         "where every width is a multiple of 128, else 32; int4 64; widths that are not a "
                         "multiple are zero-padded to whole blocks)")
    ap.add_argument("--memory", default="default", choices=MEMORY_PROFILES,
                    help="lean: int8 encoder weights (CPU only: the RKNN converter takes the default) and "
                         "memory-mapped decoder weights, for small machines and one-shot runs "
                         "(docs/benchmarks.md \"Lean profile\"; default %(default)s)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        durations = [int(x) for x in args.durations.split(",") if x.strip()]
        export(args.checkpoint, args.out, durations, tuple(x.strip() for x in args.forms.split(",") if x.strip()),
               tuple(x.strip() for x in args.decoder.split(",") if x.strip()), args.quant_block, args.memory)
    except (ckpt.CheckpointError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
