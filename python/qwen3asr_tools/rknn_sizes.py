"""How big an encoder .rknn is beyond its weights, with fixed and with dynamic shapes: the
measurement behind board.budget.GRAPH_MB (docs/rknn.md section 2a, docs/board.md section 8).

    .venv-rknn/bin/python scripts/rknn_sizes.py --encoder asr --layers 2 --sizes 2,3,4,5,8 --dynamic

Builds merged encoder graphs of the real widths (board.budget.ASR_AUDIO or ALIGNER_AUDIO) with
``--layers`` layers and seeded random weights (a file's size does not depend on the values),
converts each size with fixed shapes and, with ``--dynamic``, all of them into one
dynamic-shape model as scripts/onnx2rknn.py does, and prints each file's size and its bytes
beyond 2 x the parameters (fp16 weights). Needs rknn-toolkit2 (.venv-rknn); a 2-layer model
takes about 15-25 s per fixed size and 2 minutes for the dynamic one on a loaded 2-core PC.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import types

import numpy as np

from .board import budget as bb
from . import onnx2rknn
from . import onnx_graphs as graphs
from .export_onnx import SharedWeights, save_encoder
from .onnx_dynamic import dynamic_graph

INPUTS = ["mel", "conv_mask1", "conv_mask2", "attn_bias"]  # the merged graph's, in onnx2rknn's order
P = "thinker.audio_tower."


class RandomWeights:
    """``get(name)`` -> a seeded random float32 tensor of the official audio tower's shape for ``name``."""

    def __init__(self, cfg):
        c, d, ffn, out = cfg.downsample_hidden_size, cfg.d_model, cfg.encoder_ffn_dim, cfg.output_dim
        f = bb._stem_dims(vars(cfg))[1]
        self.shapes = {"conv2d1.weight": (c, 1, 3, 3), "conv2d2.weight": (c, c, 3, 3), "conv2d3.weight": (c, c, 3, 3),
                       "conv2d1.bias": (c,), "conv2d2.bias": (c,), "conv2d3.bias": (c,), "conv_out.weight": (d, c * f),
                       "ln_post.weight": (d,), "ln_post.bias": (d,), "proj1.weight": (d, d), "proj1.bias": (d,),
                       "proj2.weight": (out, d), "proj2.bias": (out,)}
        self.layer = {"fc1.weight": (ffn, d), "fc1.bias": (ffn,), "fc2.weight": (d, ffn)}
        self.d = d
        self.rng = np.random.default_rng(0)

    def get(self, name: str) -> np.ndarray:
        key = name[len(P):]
        if key not in self.shapes:  # layers.{i}.<rest>: attention d x d, norms and biases d, fc1 / fc2
            rest = key.split(".", 2)[2]
            shape = self.layer.get(rest, (self.d, self.d) if rest.endswith("proj.weight") else (self.d,))
        else:
            shape = self.shapes[key]
        return (self.rng.standard_normal(shape) * 0.02).astype(np.float32)


def _convert(onnx_path: str, out_path: str, target: str, shapes: list, dynamic: bool) -> int:
    """Build one .rknn (fp16, as onnx2rknn) and return its size in bytes."""
    rk = onnx2rknn.toolkit()(verbose=False)
    try:
        with onnx2rknn._scratch_cwd():
            extra = {"dynamic_input": shapes} if dynamic else {}
            onnx2rknn.check(rk.config(target_platform=target, float_dtype="float16", optimization_level=3, **extra),
                            "config", onnx_path)
            onnx2rknn.check(rk.load_onnx(model=onnx_path, inputs=INPUTS, input_size_list=shapes[-1]), "load_onnx",
                            onnx_path)
            onnx2rknn.check(rk.build(do_quantization=False), "build", onnx_path)
            onnx2rknn.check(rk.export_rknn(out_path), "export_rknn", onnx_path)
    finally:
        rk.release()
    return os.path.getsize(out_path)


def measure(encoder: str, layers: int, sizes, dynamic: bool, target: str = "rk3576") -> list[dict]:
    """Rows {model, bytes, weights_bytes, beyond_mb} for each fixed size and (``dynamic``) the one model."""
    audio = dict(bb.ASR_AUDIO if encoder == "asr" else bb.ALIGNER_AUDIO, encoder_layers=int(layers))
    cfg = types.SimpleNamespace(**audio)
    weights = 2 * bb.encoder_params(audio)
    rows = []
    with tempfile.TemporaryDirectory(prefix="rknn_sizes-") as d:
        shared = SharedWeights(os.path.join(d, "encoder", "weights.bin"))
        w, paths = RandomWeights(cfg), {}
        for n in sorted(sizes):
            paths[n] = os.path.join(d, "encoder", f"merged_{n}s.onnx")
            w.rng = np.random.default_rng(0)  # the same tensors at every size: one weights file
            save_encoder(graphs.encoder_merged(w, cfg, n), paths[n], shared)
        shared.close()
        io = {n: onnx2rknn.graph_io(p)[0] for n, p in paths.items()}
        for n, p in paths.items():
            size = _convert(p, os.path.join(d, f"merged_{n}s.rknn"), target, [[io[n][k] for k in INPUTS]], False)
            rows.append({"model": f"fixed {n} s", "bytes": size, "weights_bytes": weights})
        if dynamic:
            g = dynamic_graph(paths, os.path.join(d, "encoder", "merged_dynamic.onnx"))
            shapes = [[g.input_shapes[n][k] for k in INPUTS] for n in g.sizes]
            size = _convert(g.path, os.path.join(d, "merged_dynamic.rknn"), target, shapes, True)
            rows.append({"model": f"dynamic {', '.join(map(str, g.sizes))} s", "bytes": size, "weights_bytes": weights})
    for r in rows:
        r["beyond_mb"] = (r["bytes"] - r["weights_bytes"]) / bb.MB
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", choices=("asr", "aligner"), default="asr", help="whose widths (0.6B models)")
    ap.add_argument("--layers", type=int, default=2, help="encoder layers (default %(default)s)")
    ap.add_argument("--sizes", default="2,8", help="graph seconds, comma-separated (default %(default)s)")
    ap.add_argument("--dynamic", action="store_true", help="also one dynamic-shape model of all the sizes")
    ap.add_argument("--target", default="rk3576", choices=("rk3576", "rk3588"))
    ap.add_argument("--json", default=None, help="write the rows here")
    args = ap.parse_args(argv)
    try:
        sizes = sorted({int(x) for x in args.sizes.split(",") if x.strip()})
        if not sizes or min(sizes) < 1 or args.layers < 1:
            raise ValueError("--sizes needs whole seconds >= 1 and --layers >= 1")
        rows = measure(args.encoder, args.layers, sizes, args.dynamic, args.target)
    except (onnx2rknn.ConversionError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.encoder} widths, {args.layers} layers, {args.target}; fp16 weights {rows[0]['weights_bytes'] / 1e6:.2f} MB")
    print("| model | file MB | beyond the weights MB |\n|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['bytes'] / 1e6:.2f} | {r['beyond_mb']:.2f} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
