"""Model bundles exported from the random-weight official checkpoints with the real exporter
(qwen3asr_tools.export_onnx, run as scripts/export_onnx.py), cached under tests/.cache/ like the
checkpoints: keyed on the checkpoint and the source of every module the exporter imports
(fixtures.source_modules)."""

from __future__ import annotations

import os

import fixtures

# (preset, checkpoint dtype): one bf16 checkpoint as the real ones are stored, one fp32
PRESETS = (("tiny-a", "bfloat16"), ("tiny-b", "float32"))


def bundle(preset: str = "tiny-a", dtype: str = "bfloat16", decoders=("fp32", "int8", "int4"),
           memory: str = "default") -> tuple[str, str]:
    """(checkpoint_dir, bundle_dir) for ``preset``; ``memory``: the exporter's --memory."""
    from qwen3asr_tools import export_onnx

    ck = fixtures.checkpoint(preset, dtype=dtype)
    gen = fixtures._generator_hash("qwen3asr_tools.export_onnx")
    lean = "" if memory == "default" else f"-{memory}"
    key = f"bundle-{os.path.basename(ck)}-{'-'.join(decoders)}{lean}-{gen}"
    out = fixtures._cached_dir(key, lambda d: export_onnx.export(ck, d, decoder_dtypes=tuple(decoders), memory=memory))
    return ck, out


def aligner_bundle(preset: str = "fa-tiny-a", dtype: str = "float32", decoders=("fp32", "int8", "int4"),
                   forms=("merged", "split")) -> tuple[str, str]:
    """(checkpoint_dir, bundle_dir) of a random-weight official Qwen3-ForcedAligner, exported by
    the real exporter as an aligner bundle."""
    from qwen3asr_tools import export_onnx

    ck = fixtures.aligner_checkpoint(preset, dtype=dtype)
    gen = fixtures._generator_hash("qwen3asr_tools.export_onnx")
    key = f"aligner-{os.path.basename(ck)}-{'-'.join(decoders)}-{'-'.join(forms)}-{gen}"
    out = fixtures._cached_dir(key, lambda d: export_onnx.export(ck, d, forms=tuple(forms),
                                                                  decoder_dtypes=tuple(decoders)))
    return ck, out
