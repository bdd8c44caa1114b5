"""Development tools of qwen3asr-rk: conversion (export_onnx, onnx2rknn, export_rkllm), the
official reference (official_ref, compare_logits), random checkpoints and tokenizers, the
synthetic dataset, training of the tiny model, evaluation and benchmarks.

Each module is one tool; ``scripts/NAME.py`` is its command-line launcher
(``python scripts/NAME.py ...`` = ``python -m qwen3asr_tools.NAME ...``). The tools run from a
checkout of the repository, installed with ``pip install -e .`` (their defaults point into it:
``audio/``, ``models/default``, ``build/``). The runtime package ``qwen3asr`` never imports
this one; torch, transformers and onnx are imported only by the tools that need them.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # <checkout>/python
REPO_ROOT = os.path.dirname(PYTHON_DIR)  # the checkout: audio/, models/, build/, scripts/


def child_env(env: Optional[Mapping[str, str]] = None) -> dict:
    """A copy of ``env`` (default ``os.environ``) with PYTHON_DIR first on PYTHONPATH, for a child
    ``python -m qwen3asr_tools.NAME`` that must run this same checkout's code whether or not
    (and from where) the package is installed."""
    out = dict(os.environ if env is None else env)
    rest = [p for p in out.get("PYTHONPATH", "").split(os.pathsep) if p and p != PYTHON_DIR]
    out["PYTHONPATH"] = os.pathsep.join([PYTHON_DIR] + rest)
    return out
