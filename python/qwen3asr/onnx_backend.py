"""ONNX Runtime backend (any CPU): encoder runner and KV-cache decoder.

This is the reference backend: the NPU backends are checked against it.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import numpy as np

from .encoder import EncoderVariant

logger = logging.getLogger(__name__)


def _ort():
    try:
        import onnxruntime
    except ImportError as exc:  # pragma: no cover - onnxruntime is a hard dependency
        raise RuntimeError("onnxruntime is not installed: pip install onnxruntime") from exc
    return onnxruntime


def make_session(path: str, threads: int | None = None):
    """An ONNX Runtime CPU session with full graph optimisation."""
    ort = _ort()
    if not os.path.isfile(path):
        raise FileNotFoundError(f"model file missing: {path}; re-run scripts/export_onnx.py for this bundle")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        so.intra_op_num_threads = int(threads)
        so.inter_op_num_threads = 1
    so.log_severity_level = 3
    try:
        return ort.InferenceSession(path, sess_options=so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types
        raise RuntimeError(f"ONNX Runtime cannot load {path}: {exc}") from exc


class OnnxEncoderRunner:
    """Runs merged / split encoder graphs; sessions are created on first use and kept."""

    def __init__(self, frontend_path: str | None, threads: int | None = None):
        self._frontend_path = frontend_path
        self._threads = threads
        self._sessions: dict[str, object] = {}

    def _session(self, path: str):
        sess = self._sessions.get(path)
        if sess is None:
            logger.debug("loading encoder graph %s", path)
            sess = self._sessions[path] = make_session(path, self._threads)
        return sess

    def run_merged(self, variant: EncoderVariant, mel, conv_mask1, conv_mask2, attn_bias):
        return self._session(variant.path).run(
            ["embeds"], {"mel": mel, "conv_mask1": conv_mask1, "conv_mask2": conv_mask2, "attn_bias": attn_bias})[0]

    def run_frontend(self, mel_chunk, conv_mask1, conv_mask2):
        if self._frontend_path is None:
            raise RuntimeError("this bundle has no split-encoder front end")
        return self._session(self._frontend_path).run(
            ["hidden"], {"mel": mel_chunk, "conv_mask1": conv_mask1, "conv_mask2": conv_mask2})[0]

    def run_backend(self, variant: EncoderVariant, hidden, attn_bias):
        return self._session(variant.path).run(["embeds"], {"hidden": hidden, "attn_bias": attn_bias})[0]


@dataclasses.dataclass
class KVCache:
    keys: list  # per layer (1, kv_heads, length, head_dim) float32
    values: list
    length: int


def rope_tables(positions: np.ndarray, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin ``(len(positions), head_dim)`` float32, computed in float32 as the official code."""
    inv = (1.0 / (np.float32(theta) ** (np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim))))
    freqs = positions.astype(np.float32)[:, None] * inv.astype(np.float32)[None, :]
    emb = np.concatenate([freqs, freqs], axis=1)
    return np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)


class OnnxDecoder:
    """The exported Qwen3 decoder (fp32 or weight-only int8/int4) with a host-held KV cache."""

    def __init__(self, path: str, n_layers: int, kv_heads: int, head_dim: int, rope_theta: float,
                 threads: int | None = None):
        self.session = make_session(path, threads)
        self.n_layers, self.kv_heads, self.head_dim, self.theta = n_layers, kv_heads, head_dim, rope_theta
        self._out_names = ["logits"] + [f"present_{kind}_{i}" for i in range(n_layers) for kind in ("key", "value")]

    def new_cache(self) -> KVCache:
        empty = np.zeros((1, self.kv_heads, 0, self.head_dim), np.float32)
        return KVCache([empty] * self.n_layers, [empty] * self.n_layers, 0)

    def cache_length(self, cache: KVCache) -> int:
        return cache.length

    def forward(self, embeds: np.ndarray, cache: KVCache, logit_rows: np.ndarray):
        s = embeds.shape[0]
        p = cache.length
        pos = np.arange(p, p + s)
        cos, sin = rope_tables(pos, self.head_dim, self.theta)
        j = np.arange(p + s)
        bias = np.where(j[None, :] <= pos[:, None], 0.0, -np.inf).astype(np.float32)[None, None]
        feed = {"inputs_embeds": embeds[None].astype(np.float32, copy=False), "attn_bias": bias,
                "cos": cos, "sin": sin, "logit_index": np.asarray(logit_rows, dtype=np.int64)}
        for i in range(self.n_layers):
            feed[f"past_key_{i}"] = cache.keys[i]
            feed[f"past_value_{i}"] = cache.values[i]
        outs = self.session.run(self._out_names, feed)
        new = KVCache(outs[1::2], outs[2::2], p + s)
        return outs[0][0], new
