#!/usr/bin/env python3
"""Convert the Qwen3-ASR decoder for the RKLLM runtime (RK3576 / RK3588), on an x86_64 PC.

    python scripts/export_rkllm.py --checkpoint Qwen3-ASR-0.6B --out build/rkllm-0.6b \
        --bundle models/qwen3-asr-0.6b --calib-audio audio/*.wav --target rk3576

Three steps:

(a) ``OUT/hf``: the thinker's text model as a plain ``Qwen3ForCausalLM`` directory
    (``model_type "qwen3"``, default RoPE with the checkpoint's ``rope_theta``, tied
    embeddings, ``thinker.model.*`` renamed to ``model.*``, tokenizer files). Positions of
    the Qwen3-ASR prompt are equal on the three MRoPE axes, so plain RoPE is exact, and the
    runtime must not see a multimodal model type (docs/board.md, troubleshooting).
(b) ``OUT/calib``: a calibration set of real decoder inputs: for each audio file, the
    prompt embedded by the host, with the audio encoder's output (ONNX Runtime on the bundle)
    spliced over the audio pads, exactly what the board feeds ``rkllm_run``. Two formats:
    ``inputs.json`` (toolkit 1.2.x: ``[{"input_embed": (1, T, H) list, "target": str}]``)
    and ``llm_inputs.json`` + ``llm_inputs/sample_N`` pickles (the 1.3.0 multimodal example:
    ``[{"sample": path, "token_nums": T}]``, each pickle a dict with ``inputs_embeds``
    (1, T, H) torch float32 and ``attention_mask``). The target text is the transcription
    our engine produces for that audio.
(c) where rkllm-toolkit imports (``from rkllm.api import RKLLM``; Rockchip's GitHub releases,
    not PyPI): ``load_huggingface``, ``build`` (w4a16_g128 on rk3576, w8a8 on rk3588) and
    ``export_rkllm`` to ``BUNDLE/rk/decoder_<target>_<quant>.rkllm``, every return code
    checked, and the file recorded in the bundle manifest under
    ``{"rk": {"rkllm": {target: {"file", "quant", "sha256", "max_context"}}}}``.

The toolkit wants numpy < 2 and its own transformers; (a) and (b) run in the project's
venv. Typical split: ``--skip-build`` in the project venv, then in the toolkit venv
``--dataset OUT/calib/inputs.json`` (no calibration run, no onnxruntime needed there).

A Qwen3-ForcedAligner checkpoint (thinker model_type "qwen3_forced_aligner") is converted the
same way for word timestamps on the board, with two differences:

- (a) its head is a ``classify_num x hidden`` (5000 x 1024) time-class head, not a vocabulary
  head. It is NOT written: the runtime needs a vocabulary-sized ``lm_head`` to build the model
  (it generates one token even in hidden-state mode), so the directory ties ``lm_head`` to the
  embeddings (``tie_word_embeddings: true``, no extra weights; the one token's logits are
  ignored). The board runs the model in ``RKLLM_INFER_GET_LAST_HIDDEN_LAYER`` mode and applies
  the real head (the bundle's ``aligner_head.npy``, and the final norm when the runtime's rows
  are taken before it) to the slot rows on the host (qwen3asr.backends.rk.aligner).
- (b) a calibration input is an alignment: the audio and its transcript, laid out with the
  ``<timestamp>`` slots and embedded as the board does (``ForcedAligner.prepare`` on the
  bundle's ONNX encoder). ``--calib-transcripts`` names each file's text and language, in the
  format of audio/transcripts.json (``{"clips": [{"file", "text", "language"}]}``, matched by
  file name); the target is the transcript.
  The ``.rkllm`` goes to ``BUNDLE/rk/decoder_<target>_<quant>.rkllm`` of the aligner bundle and
  ``rk.rkllm.<target>`` of its manifest, as for an ASR bundle.

Exit codes: 0 done, 2 bad input or a failed step, 3 (a)+(b) written but rkllm-toolkit is
not installed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import struct
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from . import checkpoint as ckpt

log = logging.getLogger("export_rkllm")

TARGETS = ("rk3576", "rk3588")
NPU_CORES = {"rk3576": 2, "rk3588": 3}
DEFAULT_QUANT = {"rk3576": "w4a16_g128", "rk3588": "w8a8"}
QUANTS = ("w4a16_g128", "w8a8")
QUANT_ALGORITHM = {"w4a16_g128": "grq", "w8a8": "normal"}  # Rockchip's advice per dtype
MAX_CONTEXT_LIMIT = 16384  # largest context the 1.2+ runtime accepts
CALIB_FORMATS = ("1.2", "1.3")
# files of the tokenizer the toolkit packs into the .rkllm (chat_template.json is the
# audio template of the processor: replaced by a plain ChatML template, see below)
TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer.json", "special_tokens_map.json")
# The runtime's template is cleared at run time (rkllm_set_chat_template(h, "", "", "")) and
# the host builds the whole prompt; this only keeps the toolkit's template parser on known ground.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TOOLKIT_HINT = (
    "rkllm-toolkit is not installed in this Python. It is not on PyPI (the PyPI package named "
    "'rkllm' is someone else's): download rkllm_toolkit-<version>-cp3XX-cp3XX-linux_x86_64.whl from "
    "https://github.com/airockchip/rknn-llm (folder rkllm-toolkit/packages/ of a release tag, 1.2.1 or "
    "newer, matching the librkllmrt.so on the board) and install it with `pip install <wheel>` into a "
    "separate x86_64 Python 3.9-3.12 venv (it pins numpy<2 and its own torch/transformers). Then rerun "
    "this script there with --dataset OUT/calib/inputs.json (see docs/board.md)."
)
_STDTYPES = {"BF16": 2, "F16": 2, "F32": 4}


class ExportError(RuntimeError):
    """A step of the export failed; the message says which and what to do."""


class ToolkitMissing(ExportError):
    """rkllm-toolkit cannot be imported (the message says where to get it)."""


# ------------------------------------------------------------------ (a) HF directory

def _text_config_raw(raw: dict) -> dict:
    thinker = raw.get("thinker_config", raw)
    if "text_config" not in thinker:
        raise ExportError("config.json has no thinker_config.text_config: not a Qwen3-ASR checkpoint")
    return thinker["text_config"]


def qwen3_config(ckpt_dir: str, specials: dict[str, int]) -> dict:
    """The ``config.json`` of the plain Qwen3ForCausalLM, from the checkpoint's text config.

    Every architecture field is copied from the official text config (never from class
    defaults); RoPE becomes the default type with the same ``rope_theta`` (the MRoPE
    sections are dropped: Qwen3-ASR positions are equal on all three axes). A forced
    aligner's ``lm_head`` is tied to its embeddings (its time-class head stays on the host).
    """
    cfg = ckpt.read_config(ckpt_dir)
    t = cfg.text
    text_raw = _text_config_raw(cfg.raw)
    rope = text_raw.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise ExportError(f"text rope_scaling {rope} is not default RoPE/MRoPE; cannot map it to plain Qwen3")
    if text_raw.get("attention_bias", False):
        raise ExportError("the checkpoint's text attention has biases (attention_bias true); Qwen3-ASR has none")
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": t.vocab_size,
        "hidden_size": t.hidden_size,
        "intermediate_size": t.intermediate_size,
        "num_hidden_layers": t.num_hidden_layers,
        "num_attention_heads": t.num_attention_heads,
        "num_key_value_heads": t.num_key_value_heads,
        "head_dim": t.head_dim,
        "hidden_act": t.hidden_act,
        "max_position_embeddings": t.max_position_embeddings,
        "rms_norm_eps": t.rms_norm_eps,
        "rope_theta": t.rope_theta,
        "rope_scaling": None,
        "tie_word_embeddings": True if cfg.aligner else bool(t.tie_word_embeddings),
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": t.num_hidden_layers,
        "layer_types": ["full_attention"] * t.num_hidden_layers,
        "initializer_range": text_raw.get("initializer_range", 0.02),
        "use_cache": True,
        "bos_token_id": specials["<|endoftext|>"],
        "eos_token_id": specials["<|im_end|>"],
        "pad_token_id": specials["<|endoftext|>"],
        "torch_dtype": {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}.get(
            ckpt.open_weights(ckpt_dir).dtype_of("thinker.model.embed_tokens.weight"), "float32"),
    }


def text_weight_names(weights: ckpt.SafeTensors, tied: bool, keep_head: bool = True) -> list[tuple[str, str]]:
    """``(checkpoint name, Qwen3ForCausalLM name)`` pairs of the text model (``keep_head=False``:
    without ``thinker.lm_head.weight``, a forced aligner's time-class head)."""
    pairs = [(n, "model." + n[len("thinker.model."):]) for n in sorted(weights.names())
             if n.startswith("thinker.model.")]
    if not pairs:
        raise ExportError("the checkpoint has no thinker.model.* tensors: not a Qwen3-ASR checkpoint")
    if keep_head and "thinker.lm_head.weight" in weights:
        pairs.append(("thinker.lm_head.weight", "lm_head.weight"))
    elif not tied:
        raise ExportError("the checkpoint has no thinker.lm_head.weight and does not tie embeddings")
    return pairs


def write_safetensors(path: str, weights: ckpt.SafeTensors, pairs: Sequence[tuple[str, str]]) -> None:
    """Copy tensors byte for byte (bf16 stays bf16) into one .safetensors file, renamed."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for src, dst in pairs:
        dtype = weights.dtype_of(src)
        if dtype not in _STDTYPES:
            raise ExportError(f"tensor {src} has dtype {dtype}; expected BF16, F16 or F32")
        raw = weights.raw(src)
        header[dst] = {"dtype": dtype, "shape": list(raw.shape), "data_offsets": [offset, offset + raw.nbytes]}
        offset += raw.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for src, _ in pairs:
            f.write(np.ascontiguousarray(weights.raw(src)).tobytes())
    os.replace(tmp, path)


def write_hf_dir(ckpt_dir: str, out_dir: str) -> dict:
    """Write the plain Qwen3ForCausalLM directory; returns its config dict."""
    from . import export_onnx

    specials = export_onnx.special_token_ids(ckpt_dir)
    config = qwen3_config(ckpt_dir, specials)
    weights = ckpt.open_weights(ckpt_dir)
    os.makedirs(out_dir, exist_ok=True)
    aligner = ckpt.read_config(ckpt_dir).aligner
    pairs = text_weight_names(weights, config["tie_word_embeddings"], keep_head=aligner is None)
    if aligner is not None:
        log.info("forced aligner: its %d-class time head stays on the host (the bundle's aligner_head.npy); the "
                 "model's lm_head is tied to the %d-row embeddings, which only the one token the runtime generates "
                 "uses", aligner.classify_num, config["vocab_size"])
    elif config["tie_word_embeddings"] and "thinker.lm_head.weight" in weights:
        lm, emb = weights.raw("thinker.lm_head.weight"), weights.raw("thinker.model.embed_tokens.weight")
        if lm.shape != emb.shape or not np.array_equal(lm, emb):
            log.warning("tie_word_embeddings is true but lm_head differs from embed_tokens; transformers (and the "
                        "official model) use embed_tokens, so does the exported model")
    log.info("writing %d text tensors to %s", len(pairs), out_dir)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), weights, pairs)
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    gen = {"do_sample": False, "bos_token_id": specials["<|endoftext|>"],
           "eos_token_id": [specials["<|im_end|>"], specials["<|endoftext|>"]],
           "pad_token_id": specials["<|endoftext|>"]}
    with open(os.path.join(out_dir, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump(gen, f, indent=2)
    for name in TOKENIZER_FILES:
        src = os.path.join(ckpt_dir, name)
        if os.path.isfile(src):
            shutil.copyfile(src, os.path.join(out_dir, name))
    tok_cfg_path = os.path.join(ckpt_dir, "tokenizer_config.json")
    if not os.path.isfile(tok_cfg_path):
        raise ExportError(f"{ckpt_dir} has no tokenizer_config.json")
    with open(tok_cfg_path, encoding="utf-8") as f:
        tok_cfg = json.load(f)
    tok_cfg.pop("processor_class", None)  # the text model has no processor
    tok_cfg["chat_template"] = CHATML_TEMPLATE
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tok_cfg, f, indent=2, ensure_ascii=False)
    return config


# --------------------------------------------------------------- (b) calibration set

@dataclass(frozen=True)
class CalibSample:
    source: str             # audio file
    embeds: np.ndarray      # (n_tokens, hidden) float32: prompt with the audio spliced in
    target: str             # the engine's transcription (raw model output)


def calibration_samples(bundle_dir: str, audio_files: Sequence[str], context: str = "",
                        language: Optional[str] = None, max_new_tokens: int = 128) -> list[CalibSample]:
    """Decoder inputs for each audio file, as the board builds them (ONNX Runtime encoder)."""
    from qwen3asr import Qwen3ASREngine
    from qwen3asr.audio import prepare_audio
    from qwen3asr.decoding import DecodingOptions
    from qwen3asr.languages import resolve_language

    engine = Qwen3ASREngine(bundle_dir, backend="onnx", decoder_dtype="fp32")
    forced = resolve_language(language)
    options = DecodingOptions(max_new_tokens=max_new_tokens)  # greedy, as engine.transcribe
    out = []
    for path in audio_files:
        req = engine.prepare(prepare_audio(path), language=forced, context=context, max_new_tokens=max_new_tokens)
        # the target is the engine's raw output (result.raw_text), decoded from these embeddings:
        # mel and encoder run once per file
        tokens, _ = engine.generate(req.embeds, options)
        target = engine.tokenizer.decode(tokens, skip_special_tokens=True)
        log.info("calibration sample %s: %d tokens, target %r", path, req.embeds.shape[0], target[:60])
        out.append(CalibSample(path, np.ascontiguousarray(req.embeds, dtype=np.float32), target))
    return out


def read_transcripts(path: str) -> dict[str, tuple[str, str]]:
    """File name -> (text, language) from a transcripts file in the format of audio/transcripts.json
    (``{"clips": [{"file", "text", "language"}, ...]}``)."""
    try:
        with open(path, encoding="utf-8") as f:
            clips = json.load(f)["clips"]
        out = {os.path.basename(c["file"]): (str(c["text"]), str(c["language"])) for c in clips}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--calib-transcripts {path}: not a transcripts file like audio/transcripts.json "
                         f"({{\"clips\": [{{\"file\", \"text\", \"language\"}}]}}): {exc}") from None
    return out


def aligner_calibration_samples(bundle_dir: str, audio_files: Sequence[str], transcripts: dict[str, tuple[str, str]],
                                language: Optional[str] = None) -> list[CalibSample]:
    """A forced aligner's inputs for each audio file and its transcript, as the board builds them:
    the words laid out with their ``<timestamp>`` slots after the audio block and embedded, with the
    encoder's output (ONNX Runtime on the bundle) over the audio pads. The target is the transcript."""
    from qwen3asr.aligner import ForcedAligner

    out = []
    with ForcedAligner(bundle_dir, backend="onnx") as aligner:
        for path in audio_files:
            name = os.path.basename(path)
            if name not in transcripts:
                raise ValueError(f"--calib-transcripts has no clip {name!r}: an aligner's calibration input is the audio "
                                 "and its transcript")
            text, lang = transcripts[name]
            inp = aligner.prepare(path, text, language or lang)
            if not inp.layout.words:
                raise ValueError(f"the transcript of {name} has no words the aligner can place: {text!r}")
            log.info("calibration sample %s: %d rows (%d words, %d slots)", path, inp.embeds.shape[0],
                     len(inp.layout.words), inp.rows.size)
            out.append(CalibSample(path, np.ascontiguousarray(inp.embeds, dtype=np.float32), text))
    return out


def write_calibration(samples: Sequence[CalibSample], out_dir: str) -> dict[str, str]:
    """Write both dataset formats; returns ``{"1.2": inputs.json, "1.3": llm_inputs.json}`` (1.3 needs torch)."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    p12 = os.path.join(out_dir, "inputs.json")
    with open(p12, "w", encoding="utf-8") as f:
        f.write("[\n")
        for i, s in enumerate(samples):
            # float32 -> Python float -> JSON repr round-trips exactly
            json.dump({"input_embed": s.embeds[None].tolist(), "target": s.target}, f, ensure_ascii=False)
            f.write(",\n" if i + 1 < len(samples) else "\n")
        f.write("]\n")
    paths["1.2"] = p12
    try:
        import torch
    except ImportError:
        log.warning("torch is not installed: the 1.3 calibration format (pickled tensors) is not written")
        return paths
    import pickle

    os.makedirs(os.path.join(out_dir, "llm_inputs"), exist_ok=True)
    index = []
    for i, s in enumerate(samples):
        rel = f"llm_inputs/sample_{i}"
        sample = {"inputs_embeds": torch.from_numpy(s.embeds.copy())[None],
                  "attention_mask": torch.ones(1, s.embeds.shape[0], dtype=torch.long)}
        with open(os.path.join(out_dir, rel), "wb") as f:
            pickle.dump(sample, f)
        index.append({"sample": rel, "token_nums": int(s.embeds.shape[0]), "target": s.target})
    p13 = os.path.join(out_dir, "llm_inputs.json")
    with open(p13, "w", encoding="utf-8") as f:
        json.dump(index, f, indent=2, ensure_ascii=False)
    paths["1.3"] = p13
    return paths


# ------------------------------------------------------------------------ (c) build

def check_target(target: str, quant: Optional[str]) -> str:
    """The quantisation for ``target`` (default per SoC); ValueError for unsupported pairs."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; accepted: {', '.join(TARGETS)}")
    quant = DEFAULT_QUANT[target] if quant is None else quant
    if quant not in QUANTS:
        raise ValueError(f"unknown quantisation {quant!r}; accepted: {', '.join(QUANTS)}")
    if target == "rk3588" and quant.startswith("w4a16"):
        raise ValueError("w4a16 decoders run on RK3576 only: the RK3588 NPU has no W4A16 kernels in the RKLLM "
                         "runtime. Use --quant w8a8 for rk3588 (the default).")
    return quant


def check_max_context(n: int) -> int:
    if not 0 < n <= MAX_CONTEXT_LIMIT:
        raise ValueError(f"--max-context must be in 1..{MAX_CONTEXT_LIMIT}, got {n}")
    return n


def toolkit_version() -> Optional[str]:
    from importlib import metadata

    for dist in ("rkllm-toolkit", "rkllm_toolkit"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def import_toolkit():
    """``rkllm.api.RKLLM``; ExportError with the install instructions when missing."""
    try:
        from rkllm.api import RKLLM
    except ImportError as exc:
        raise ToolkitMissing(f"{TOOLKIT_HINT} (import error: {exc})") from None
    return RKLLM


def build_rkllm(hf_dir: str, out_file: str, target: str, quant: str, dataset: Optional[str],
                max_context: int) -> None:
    """Run rkllm-toolkit: load, quantise, export. ExportError naming the failed call."""
    RKLLM = import_toolkit()
    llm = RKLLM()

    def check(what: str, rc) -> None:
        if rc != 0:
            raise ExportError(f"rkllm-toolkit {what} failed with code {rc}; see the toolkit's log above")

    check("load_huggingface", llm.load_huggingface(model=hf_dir, device="cpu", dtype="float32"))
    log.info("building %s for %s (%d NPU cores), dataset %s, max_context %d", quant, target,
             NPU_CORES[target], dataset, max_context)
    check("build", llm.build(do_quantization=True, optimization_level=1, quantized_dtype=quant,
                             quantized_algorithm=QUANT_ALGORITHM[quant], target_platform=target,
                             num_npu_core=NPU_CORES[target], dataset=dataset, max_context=max_context))
    os.makedirs(os.path.dirname(os.path.abspath(out_file)), exist_ok=True)
    check("export_rkllm", llm.export_rkllm(out_file))
    if not os.path.isfile(out_file):
        raise ExportError(f"rkllm-toolkit export_rkllm returned 0 but wrote no {out_file}")




def record_in_manifest(bundle_dir: str, rkllm_file: str, target: str, quant: str, max_context: int) -> dict:
    """Merge ``{"rk": {"rkllm": {target: {...}}}}`` and the file's checksum into model.json (other keys
    kept); returns the entry."""
    from qwen3asr.bundle import update_manifest

    rel = os.path.relpath(rkllm_file, bundle_dir).replace(os.sep, "/")
    if rel.startswith("../"):
        raise ExportError(f"{rkllm_file} is outside the bundle {bundle_dir}")
    from qwen3asr.bundle import sha256_file

    digest = sha256_file(rkllm_file)
    entry = {"file": rel, "quant": quant, "sha256": digest, "max_context": int(max_context)}

    def mutate(manifest: dict) -> None:
        manifest.setdefault("rk", {}).setdefault("rkllm", {})[target] = entry
        manifest.setdefault("files", {})[rel] = digest

    update_manifest(bundle_dir, mutate)
    return entry


def check_bundle_matches(bundle_dir: str, ckpt_dir: str) -> None:
    """The bundle must come from the same checkpoint (its kind, its config.json checksum)."""
    from qwen3asr.bundle import Bundle

    bundle = Bundle.load(bundle_dir)
    kind = "aligner" if ckpt.read_config(ckpt_dir).aligner else "asr"
    if bundle.kind != kind:
        what = {"asr": "a speech recognition model", "aligner": "a forced aligner"}
        raise ExportError(f"{ckpt_dir} is {what[kind]} but the bundle {bundle_dir} is {what[bundle.kind]}; give the "
                          "bundle scripts/export_onnx.py made from this checkpoint")
    want = bundle.manifest.get("source", {}).get("config_sha256")
    from qwen3asr.bundle import sha256_file

    have = sha256_file(os.path.join(ckpt_dir, "config.json"))
    if want and want != have:
        raise ExportError(f"the bundle {bundle_dir} was exported from another checkpoint (config.json checksum "
                          f"differs from {ckpt_dir}); export the bundle from this checkpoint first")


# ------------------------------------------------------------------------------ main

def run(args) -> int:
    quant = check_target(args.target, args.quant)
    max_context = check_max_context(args.max_context)
    if args.calib_audio and args.dataset:
        raise ValueError("give either --calib-audio (make a calibration set) or --dataset (use one), not both")
    if args.calib_audio and not args.bundle:
        raise ValueError("--calib-audio needs --bundle: the calibration embeddings come from the bundle's encoder")
    aligner = ckpt.read_config(args.checkpoint).aligner is not None
    if aligner and args.calib_audio and not args.calib_transcripts:
        raise ValueError("a forced aligner's calibration input is the audio and its transcript: give "
                         "--calib-transcripts FILE (the format of audio/transcripts.json) with --calib-audio")
    if not aligner and args.calib_transcripts:
        raise ValueError("--calib-transcripts is for forced-aligner checkpoints; the ASR calibration transcribes "
                         "the audio itself")
    if aligner and args.context:
        raise ValueError("--context is for ASR checkpoints: a forced aligner's input has no context")
    if args.bundle:
        check_bundle_matches(args.bundle, args.checkpoint)
    hf_dir = os.path.join(args.out, "hf")
    write_hf_dir(args.checkpoint, hf_dir)
    log.info("Qwen3ForCausalLM directory written to %s", hf_dir)
    dataset = args.dataset
    if args.calib_audio:
        missing = [p for p in args.calib_audio if not os.path.isfile(p)]
        if missing:
            raise ValueError(f"calibration audio not found: {', '.join(missing)}")
        if aligner:
            samples = aligner_calibration_samples(args.bundle, args.calib_audio, read_transcripts(args.calib_transcripts),
                                                  args.language)
        else:
            samples = calibration_samples(args.bundle, args.calib_audio, args.context, args.language,
                                          args.calib_max_new_tokens)
        paths = write_calibration(samples, os.path.join(args.out, "calib"))
        fmt = args.calib_format or _default_calib_format()
        if fmt not in paths:
            raise ExportError(f"calibration format {fmt} needs torch (pickled tensors); install torch or use 1.2")
        dataset = paths[fmt]
        log.info("calibration set (%d samples) written: %s", len(samples), ", ".join(paths.values()))
    elif dataset is not None and not os.path.isfile(dataset):
        raise ValueError(f"--dataset {dataset} not found")
    if args.skip_build:
        return 0
    if dataset is None:
        log.warning("no calibration set (--calib-audio or --dataset): the toolkit quantises without real "
                    "inputs, which hurts accuracy")
    if args.bundle:
        out_file = os.path.join(args.bundle, "rk", f"decoder_{args.target}_{quant}.rkllm")
    else:
        out_file = os.path.join(args.out, f"decoder_{args.target}_{quant}.rkllm")
    try:
        build_rkllm(hf_dir, out_file, args.target, quant, dataset, max_context)
    except ToolkitMissing as exc:
        print(f"error: {exc}\n(a) and (b) are written: {hf_dir}"
              + (f", {dataset}" if dataset else ""), file=sys.stderr)
        return 3
    log.info("wrote %s", out_file)
    if args.bundle:
        entry = record_in_manifest(args.bundle, out_file, args.target, quant, max_context)
        log.info("recorded in %s/model.json: %s", args.bundle, entry)
    return 0


def _default_calib_format() -> str:
    match = re.match(r"(\d+)\.(\d+)", toolkit_version() or "")
    if match is None:
        return "1.2"
    return "1.3" if (int(match[1]), int(match[2])) >= (1, 3) else "1.2"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True,
                    help="official Qwen3-ASR or Qwen3-ForcedAligner checkpoint directory")
    ap.add_argument("--out", required=True, help="work directory: OUT/hf (Qwen3ForCausalLM), OUT/calib")
    ap.add_argument("--bundle", default=None,
                    help="bundle of this checkpoint (scripts/export_onnx.py): encoder for the calibration set, and "
                         "where the .rkllm goes and is recorded")
    ap.add_argument("--calib-audio", nargs="+", default=None, metavar="FILE",
                    help="audio files for the calibration set (a few dozen utterances of the target languages)")
    ap.add_argument("--calib-transcripts", default=None, metavar="JSON",
                    help="forced aligner only: text and language of each --calib-audio file, in the format of "
                         "audio/transcripts.json")
    ap.add_argument("--dataset", default=None, help="an existing calibration JSON (instead of --calib-audio)")
    ap.add_argument("--calib-format", choices=CALIB_FORMATS, default=None,
                    help="dataset format given to the toolkit (default: from the toolkit version, 1.2 without it)")
    ap.add_argument("--calib-max-new-tokens", type=int, default=128, help="budget of the target transcriptions")
    ap.add_argument("--context", default="", help="system context of the calibration prompts")
    ap.add_argument("--language", default=None,
                    help="forced language of the calibration prompts (default: detect; aligner: the transcripts')")
    ap.add_argument("--target", default="rk3576", choices=TARGETS, help="SoC (default %(default)s)")
    ap.add_argument("--quant", default=None, choices=QUANTS,
                    help="w4a16_g128 (rk3576 only, its default) or w8a8 (rk3588 default)")
    ap.add_argument("--max-context", type=int, default=4096, help="KV cache length of the model (default %(default)s)")
    ap.add_argument("--skip-build", action="store_true", help="write (a) and (b) only")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        return run(args)
    except (RuntimeError, ValueError, OSError) as exc:  # ExportError, CheckpointError, BundleError, ...
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
