"""Cached generated test data (pytest-independent).

``checkpoint(preset)`` returns a random-weight official checkpoint directory and
``tokenizer_dir()`` a directory with only the tokenizer files, both built once under
tests/.cache/ (gitignored). The cache key holds the preset, seed, dtype, FIXTURE_VERSION
and a hash of the generator modules' source (python/qwen3asr_tools/*.py and the runtime modules
they share), so a change to a generator rebuilds. Builds go to a temporary directory next to the
final one and are moved in with os.replace, so two pytest processes building the same fixture
at once both end with a complete directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.path.join(ROOT, "python")
CACHE = os.path.join(ROOT, "tests", ".cache")
FIXTURE_VERSION = "1"
_COMPLETE = ".complete"


def _generator_hash(*modules: str) -> str:
    """12 hex digits over FIXTURE_VERSION and the source of ``modules`` (dotted names under python/,
    e.g. ``qwen3asr_tools.export_onnx``), in order."""
    h = hashlib.sha256(FIXTURE_VERSION.encode())
    for name in modules:
        with open(os.path.join(PYTHON, *name.split(".")) + ".py", "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:12]


def _cached_dir(key: str, build: Callable[[str], None]) -> str:
    """Directory CACHE/key, built by ``build(tmp_dir)`` if not already complete."""
    final = os.path.join(CACHE, key)
    if os.path.isfile(os.path.join(final, _COMPLETE)):
        return final
    os.makedirs(CACHE, exist_ok=True)
    if os.path.isdir(final):  # left incomplete by a crashed run
        shutil.rmtree(final, ignore_errors=True)
    tmp = tempfile.mkdtemp(prefix=f".{key}-", dir=CACHE)
    try:
        build(tmp)
        with open(os.path.join(tmp, _COMPLETE), "w") as f:
            f.write(key + "\n")
        try:
            os.replace(tmp, final)
        except OSError:
            # Another process moved its copy in first: keep that one.
            if not os.path.isfile(os.path.join(final, _COMPLETE)):
                raise
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def tokenizer_dir() -> str:
    """A directory with vocab.json, merges.txt, tokenizer_config.json, chat_template.json."""
    from qwen3asr_tools.make_tokenizer_files import write_tokenizer_files

    key = f"tokenizer-{_generator_hash('qwen3asr_tools.make_tokenizer_files', 'qwen3asr.tokenizer')}"
    return _cached_dir(key, lambda d: write_tokenizer_files(d))


def checkpoint(preset: str = "tiny-a", seed: int = 0, dtype: str = "float32") -> str:
    """A random-weight official checkpoint directory for ``preset`` (see
    python/qwen3asr_tools/make_random_checkpoint.py). Needs torch, transformers and qwen-asr."""
    from qwen3asr_tools.make_random_checkpoint import make_checkpoint

    gen = _generator_hash("qwen3asr_tools.make_random_checkpoint", "qwen3asr_tools.make_tokenizer_files",
                          "qwen3asr_tools.official_ref", "qwen3asr.tokenizer")
    key = f"ckpt-{preset}-s{seed}-{dtype}-{gen}"
    return _cached_dir(key, lambda d: make_checkpoint(preset, d, seed=seed, dtype=dtype))


def aligner_checkpoint(preset: str = "fa-tiny-a", seed: int = 0, dtype: str = "float32") -> str:
    """A random-weight official Qwen3-ForcedAligner checkpoint directory for ``preset`` (an
    ``ALIGNER_PRESETS`` name of python/qwen3asr_tools/make_random_checkpoint.py), with the
    aligner's tokenizer files. Needs torch, transformers and qwen-asr."""
    from qwen3asr_tools.make_random_checkpoint import ALIGNER_PRESETS, make_checkpoint

    if preset not in ALIGNER_PRESETS:
        raise ValueError(f"unknown aligner preset {preset!r}; accepted: {', '.join(ALIGNER_PRESETS)}")
    gen = _generator_hash("qwen3asr_tools.make_random_checkpoint", "qwen3asr_tools.make_tokenizer_files",
                          "qwen3asr_tools.official_ref", "qwen3asr.tokenizer", "qwen3asr.aligner.words")
    key = f"ckpt-{preset}-s{seed}-{dtype}-{gen}"
    return _cached_dir(key, lambda d: make_checkpoint(preset, d, seed=seed, dtype=dtype))
