#!/usr/bin/env python3
"""Convert a bundle's encoder ONNX graphs to fp16 .rknn models for the Rockchip NPU.

Runs on an x86_64 PC in the rknn-toolkit2 venv (bash scripts/setup_rknn_env.sh):

    .venv-rknn/bin/python scripts/onnx2rknn.py --bundle models/qwen3-asr-0.6b --target rk3576 \\
        --forms merged,split --sizes 2,3,4,5 --verify audio/long_mixed.wav

Each graph is converted with fixed input shapes (config(float_dtype='float16',
optimization_level=3), load_onnx(inputs=..., input_size_list=...), build(do_quantization=False),
export_rknn) and gets its variant metadata (form, part, duration, tokens, input order and
shapes, the bundle's encoder digest, exporter/converter/toolkit versions) in the model's
custom string, which qwen3asr.backends.rk.rknn_meta checks at load. The files are recorded in the
bundle manifest under rk.rknn.<target> (other keys of model.json are kept).

--verify AUDIO: right after each build the model runs in the toolkit's simulator
(init_runtime(target=None); a prebuilt .rknn cannot be loaded into the simulator) on
real log-mel input from AUDIO, through the same AudioEncoder code as the board, and is
compared with ONNX Runtime; a cosine below --min-cosine fails the conversion.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time

import numpy as np

from qwen3asr.audio import prepare_audio
from qwen3asr.bundle import Bundle, BundleError, update_manifest
from qwen3asr.bundle import sha256_file as sha256
from qwen3asr.encoder import AudioEncoder
from qwen3asr.mel import log_mel, SAMPLE_RATE
from qwen3asr.backends.onnx import OnnxEncoderRunner
from qwen3asr.backends.rk.rknn import RknnModel
from qwen3asr.backends.rk.rknn_meta import META_VERSION, RknnEntry, custom_string, encoder_digest
from qwen3asr.backends.rk.soc import SUPPORTED_SOCS

CONVERTER_VERSION = "1.0.0"
DEFAULT_LENGTHS = (1.37, 3.0)  # seconds of audio compared in --verify
log = logging.getLogger("onnx2rknn")


class ConversionError(RuntimeError):
    """A toolkit call failed or the simulator disagrees with ONNX Runtime."""


@dataclasses.dataclass(frozen=True)
class VerifyResult:
    target: str
    graph: str  # e.g. "merged_2s", "frontend", "backend_3s"
    seconds: float  # audio length compared
    tokens_rknn: int  # output rows of the simulator path
    tokens_onnx: int  # output rows of the ONNX Runtime path
    cosine: float  # cosine similarity of the flattened embeddings
    max_abs_diff: float


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def toolkit():
    try:
        from rknn.api import RKNN
    except ImportError as exc:
        raise ConversionError("rknn-toolkit2 is not importable here: run this script with .venv-rknn/bin/python "
                              "(create it with bash scripts/setup_rknn_env.sh)") from exc
    return RKNN


def toolkit_version() -> str:
    try:
        from importlib.metadata import version

        return version("rknn-toolkit2")
    except Exception:  # metadata missing in odd installs: the version is informational only
        return "unknown"


def check(ret, call: str, graph: str) -> None:
    if ret != 0:
        raise ConversionError(f"rknn-toolkit2 {call} failed (returned {ret}) for {graph}; see the toolkit log above")


def graph_io(path: str) -> tuple[dict[str, list[int]], list[int]]:
    """Input name -> fixed shape, and the output shape, read from the ONNX graph."""
    import onnx

    m = onnx.load(path, load_external_data=False)
    dims = lambda vi: [int(d.dim_value) for d in vi.type.tensor_type.shape.dim]  # noqa: E731
    shapes = {vi.name: dims(vi) for vi in m.graph.input}
    for name, shape in shapes.items():
        if not shape or min(shape) <= 0:
            raise ConversionError(f"{path}: input {name} has no fixed shape ({shape}); re-export the bundle")
    return shapes, dims(m.graph.output[0])


def select_graphs(bundle: Bundle, forms, sizes) -> list[dict]:
    """Manifest variant entries to convert (the split front end comes with 'split')."""
    out = []
    for v in bundle.manifest["encoder"]["variants"]:
        if v["form"] not in forms:
            continue
        if v["part"] != "frontend" and sizes is not None and int(v["n_chunks"]) not in sizes:
            continue
        out.append(v)
    for form in forms:
        have = {int(v["n_chunks"]) for v in out if v["form"] == form and v["part"] != "frontend"}
        if sizes is not None and set(sizes) - have:
            offered = sorted({int(v["n_chunks"]) for v in bundle.manifest["encoder"]["variants"]
                              if v["form"] == form and v["part"] != "frontend"})
            raise ConversionError(f"sizes {sorted(set(sizes) - have)} s not in the bundle's {form} graphs "
                                  f"(it has {offered} s); re-export with scripts/export_onnx.py --durations")
        if not have:
            raise ConversionError(f"the bundle has no {form} encoder graphs")
    return out


def graph_name(v: dict) -> str:
    return "frontend" if v["part"] == "frontend" else f"{v['part']}_{int(v['n_chunks'])}s"


class _HybridRunner:
    """ONNX Runtime for every part except the one under test, which runs in the simulator."""

    def __init__(self, onnx_runner: OnnxEncoderRunner, part: str, model: RknnModel):
        self.onnx, self.part, self.model = onnx_runner, part, model

    def run_merged(self, variant, mel, m1, m2, bias):
        return self.model.run({"mel": mel, "conv_mask1": m1, "conv_mask2": m2, "attn_bias": bias})

    def run_frontend(self, mel, m1, m2):
        if self.part == "frontend":
            return self.model.run({"mel": mel, "conv_mask1": m1, "conv_mask2": m2})
        return self.onnx.run_frontend(mel, m1, m2)

    def run_backend(self, variant, hidden, bias):
        if self.part == "backend":
            return self.model.run({"hidden": hidden, "attn_bias": bias})
        return self.onnx.run_backend(variant, hidden, bias)


def verify_graph(bundle: Bundle, target: str, v: dict, model: RknnModel, mels: list[np.ndarray]) -> list[VerifyResult]:
    """Simulator vs ONNX Runtime through AudioEncoder on each mel in ``mels``."""
    form = v["form"]
    onnx_runner = OnnxEncoderRunner(bundle.frontend_path())
    if v["part"] == "frontend":  # judged with the ONNX back ends that hold the audio
        variants = bundle.encoder_variants("split")
    else:
        onnx_v = bundle.encoder_variants(form, [int(v["n_chunks"])])[0]
        variants = [onnx_v]
    window, n_mels = bundle.manifest["encoder"]["window_tokens"], int(bundle.audio_config["num_mel_bins"])
    hybrid = _HybridRunner(onnx_runner, v["part"], model)
    results = []
    for mel in mels:
        ref = AudioEncoder(onnx_runner, variants, window, n_mels, form).encode(mel)
        got = AudioEncoder(hybrid, variants, window, n_mels, form).encode(mel)
        n = min(len(ref), len(got))
        results.append(VerifyResult(target, graph_name(v), mel.shape[1] / 100.0, int(got.shape[0]), int(ref.shape[0]),
                                    cosine(got[:n], ref[:n]), float(np.max(np.abs(got[:n] - ref[:n])))))
    return results


def verify_mels(audio_path: str, lengths, start: float, n_mels: int) -> list[np.ndarray]:
    """Log-mel (n_mels, frames) of ``audio[start : start + L]`` for each L in ``lengths`` (seconds)."""
    pcm = prepare_audio(audio_path)
    out = []
    for length in lengths:
        a, b = int(round(start * SAMPLE_RATE)), int(round((start + length) * SAMPLE_RATE))
        if b > pcm.shape[0]:
            raise ValueError(f"{audio_path} is {pcm.shape[0] / SAMPLE_RATE:.2f} s long; cannot take {length} s from "
                             f"{start} s")
        out.append(log_mel(pcm[a:b], n_mels))
    return out


def convert_graph(bundle: Bundle, target: str, v: dict, out_dir: str, mels, min_cosine: float):
    """Convert one graph; returns (manifest entry, verify results)."""
    RKNN = toolkit()
    name = graph_name(v)
    onnx_path = bundle.file(v["file"], f"encoder graph {v['file']}")
    shapes, out_shape = graph_io(onnx_path)
    inputs = list(bundle.manifest["encoder"]["inputs"][v["part"]])
    if sorted(inputs) != sorted(shapes):
        raise ConversionError(f"{onnx_path} inputs {sorted(shapes)} differ from the manifest's {inputs}")
    meta = {"meta_version": META_VERSION, "form": v["form"], "part": v["part"], "n_chunks": int(v["n_chunks"]),
            "seconds": int(v["seconds"]), "tokens": int(v["tokens"]), "target": target, "dtype": "float16",
            "inputs": inputs, "input_shapes": {k: shapes[k] for k in inputs}, "output_shape": out_shape,
            "encoder_sha256": encoder_digest(bundle.manifest),
            "exporter_version": bundle.manifest.get("exporter_version"),
            "converter": f"onnx2rknn/{CONVERTER_VERSION}", "toolkit": toolkit_version()}
    out_path = os.path.join(out_dir, f"{name}.rknn")
    graph = f"{v['file']} ({target})"
    log.info("converting %s -> %s", graph, out_path)
    tmp = os.path.join(out_dir, f".{name}.tmp.rknn")
    rk = RKNN(verbose=False)
    results = []
    try:
        check(rk.config(target_platform=target, float_dtype="float16", optimization_level=3,
                        custom_string=custom_string(meta)), "config", graph)
        check(rk.load_onnx(model=onnx_path, inputs=inputs, input_size_list=[shapes[k] for k in inputs]),
              "load_onnx", graph)
        check(rk.build(do_quantization=False), "build", graph)
        check(rk.export_rknn(tmp), "export_rknn", graph)
        if mels:
            check(rk.init_runtime(target=None), "init_runtime(simulator)", graph)
            entry = RknnEntry(v["form"], v["part"], int(v["n_chunks"]), out_path, meta)
            results = verify_graph(bundle, target, v, RknnModel(rk, entry), mels)
            for r in results:
                log.info("verify %s %-11s %5.2f s  tokens %d/%d  cosine %.7f  max|diff| %.2e", target, r.graph,
                         r.seconds, r.tokens_rknn, r.tokens_onnx, r.cosine, r.max_abs_diff)
            bad = [r for r in results if r.cosine < min_cosine or r.tokens_rknn != r.tokens_onnx]
            if bad:
                raise ConversionError(
                    f"{graph}: simulator disagrees with ONNX Runtime: " + "; ".join(
                        f"{r.seconds:.2f} s cosine {r.cosine:.6f} tokens {r.tokens_rknn}/{r.tokens_onnx}" for r in bad)
                    + f" (need cosine >= {min_cosine} and equal token counts)")
        os.replace(tmp, out_path)
    finally:
        rk.release()
        if os.path.exists(tmp):
            os.remove(tmp)
    entry = {"form": v["form"], "part": v["part"], "n_chunks": int(v["n_chunks"]),
             "file": os.path.relpath(out_path, bundle.path).replace(os.sep, "/"), "sha256": sha256(out_path)}
    return entry, results


def record(bundle_dir: str, target: str, entries: list[dict]) -> None:
    """Merge ``entries`` into model.json's rk.rknn.<target> and their checksums into "files"
    (so Bundle.verify_checksums covers them); other keys kept."""
    key = lambda e: (e["form"], e["part"], int(e["n_chunks"]))  # noqa: E731

    def mutate(manifest: dict) -> None:
        lst = manifest.setdefault("rk", {}).setdefault("rknn", {}).setdefault(target, [])
        new = {key(e): e for e in entries}
        lst[:] = [e for e in lst if key(e) not in new] + entries
        lst.sort(key=lambda e: (e["form"], e["part"] != "frontend", int(e["n_chunks"])))
        manifest.setdefault("files", {}).update({e["file"]: e["sha256"] for e in entries})

    update_manifest(bundle_dir, mutate)


def convert(bundle_dir: str, target: str, forms=("merged", "split"), sizes=None, out_dir=None, verify=None,
            lengths=DEFAULT_LENGTHS, start: float = 0.0, min_cosine: float = 0.999) -> list[VerifyResult]:
    if target not in SUPPORTED_SOCS:
        raise ValueError(f"--target must be one of {', '.join(SUPPORTED_SOCS)}, got {target!r}")
    for form in forms:
        if form not in ("merged", "split"):
            raise ValueError(f"unknown encoder form {form!r}; use merged and/or split")
    bundle = Bundle.load(bundle_dir)
    bundle.require_float_encoder("the RKNN conversion")
    out_dir = os.path.abspath(out_dir or os.path.join(bundle.path, "rknn", target))
    os.makedirs(out_dir, exist_ok=True)
    if os.path.relpath(out_dir, bundle.path).startswith(".."):
        log.warning("%s is outside the bundle: the manifest records a relative path that leaves it", out_dir)
    graphs = select_graphs(bundle, forms, sizes)
    mels = verify_mels(verify, lengths, start, int(bundle.audio_config["num_mel_bins"])) if verify else []
    entries, results = [], []
    t0 = time.time()
    for v in graphs:
        entry, res = convert_graph(bundle, target, v, out_dir, mels, min_cosine)
        entries.append(entry)
        results += res
    record(bundle.path, target, entries)
    log.info("%d models for %s in %s (%.1f s); manifest updated", len(entries), target, out_dir, time.time() - t0)
    return results


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True, help="bundle directory (from scripts/export_onnx.py)")
    ap.add_argument("--target", required=True, choices=SUPPORTED_SOCS)
    ap.add_argument("--forms", default="merged,split", help="merged, split or both (default %(default)s)")
    ap.add_argument("--sizes", default=None, help="durations in seconds, comma-separated (default: all in the bundle)")
    ap.add_argument("--out", default=None, help="output directory (default BUNDLE/rknn/TARGET)")
    ap.add_argument("--verify", metavar="AUDIO", default=None,
                    help="compare each model in the simulator with ONNX Runtime on this audio file")
    ap.add_argument("--verify-lengths", default=",".join(map(str, DEFAULT_LENGTHS)),
                    help="audio lengths in seconds to compare (default %(default)s)")
    ap.add_argument("--verify-start", type=float, default=0.0, help="offset into AUDIO in seconds")
    ap.add_argument("--min-cosine", type=float, default=0.999, help="fail below this cosine (default %(default)s)")
    ap.add_argument("--report", default=None, help="write the verify results as JSON here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # --verify runs single-variant encoders on audio longer than the variant on purpose (chained
    # on both sides alike); the encoder's warning about windows cut by chaining is noise here.
    logging.getLogger("qwen3asr.encoder").setLevel(logging.ERROR)
    try:
        sizes = [int(x) for x in _csv(args.sizes)] if args.sizes else None
        results = convert(args.bundle, args.target, tuple(_csv(args.forms)), sizes, args.out, args.verify,
                          [float(x) for x in _csv(args.verify_lengths)], args.verify_start, args.min_cosine)
    except (ConversionError, BundleError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            json.dump([dataclasses.asdict(r) for r in results], f, indent=2)
    if results:
        print(f"verified {len(results)} comparisons for {args.target}: min cosine "
              f"{min(r.cosine for r in results):.7f}, token counts equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
