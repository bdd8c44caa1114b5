#!/usr/bin/env python3
"""Convert a bundle's encoder ONNX graphs to fp16 .rknn models for the Rockchip NPU.

Runs on an x86_64 PC in the rknn-toolkit2 venv (bash scripts/setup_rknn_env.sh):

    .venv-rknn/bin/python scripts/onnx2rknn.py --bundle models/qwen3-asr-0.6b --target rk3576 \\
        --forms merged,split --verify audio/long_mixed.wav

Two shape kinds (--shapes):

- ``dynamic`` (default): one .rknn per encoder part (``merged_dynamic.rknn``,
  ``backend_dynamic.rknn``) for every duration converted, holding one copy of the weights.
  The part's fixed-size graphs are merged into one graph with free dimensions
  (qwen3asr_tools.onnx_dynamic) and built with ``config(dynamic_input=[<the input shapes of
  each size>])``. rknn-toolkit2 calls dynamic_input experimental; whether the NPU runs it as
  fast as fixed shapes is unmeasured (docs/rknn.md). The split front end (one 1 s chunk) is
  converted with fixed shapes either way.
- ``fixed``: one .rknn per graph and size (``merged_{N}s.rknn``, ``backend_{N}s.rknn``), each with
  its own copy of the weights: the NPU compiles each for its exact shapes.

Each graph is converted with config(float_dtype='float16', optimization_level=3),
load_onnx(inputs=..., input_size_list=...), build(do_quantization=False), export_rknn, and gets
its metadata (form, part, shape kind, duration(s), input order and shapes, the bundle's encoder
digest, exporter/converter/toolkit versions) in the model's custom string, which
qwen3asr.backends.rk.rknn_meta checks at load. The files are recorded in the bundle manifest
under rk.rknn.<target>, each entry with its ``shapes`` kind (and ``sizes`` when dynamic); a run
replaces the target's entries of the other kind for the forms it converts (other keys of
model.json are kept).

--verify AUDIO: right after each build the model runs in the toolkit's simulator
(init_runtime(target=None); a prebuilt .rknn cannot be loaded into the simulator) on
real log-mel input from AUDIO, through the same AudioEncoder code as the board, at every size
the model holds, and is compared with ONNX Runtime on that size's own graph; a cosine below
--min-cosine fails the conversion.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import sys
import tempfile
import time

import numpy as np

from qwen3asr.audio import prepare_audio
from qwen3asr.bundle import Bundle, BundleError, update_manifest
from qwen3asr.bundle import sha256_file as sha256
from qwen3asr.encoder import AudioEncoder
from qwen3asr.mel import log_mel, SAMPLE_RATE
from qwen3asr.backends.onnx import OnnxEncoderRunner
from qwen3asr.backends.rk.rknn import RknnModel
from qwen3asr.backends.rk.rknn_meta import META_VERSION, SHAPE_KINDS, RknnEntry, custom_string, encoder_digest
from qwen3asr.backends.rk.rknn_meta import entry_shapes
from qwen3asr.backends.rk.soc import SUPPORTED_SOCS

from .onnx_dynamic import DynamicGraphError, dynamic_graph

CONVERTER_VERSION = "1.1.0"  # 1.1: dynamic-shape models
DEFAULT_LENGTHS = (1.37, 3.0)  # seconds of audio compared in --verify
log = logging.getLogger("onnx2rknn")


class ConversionError(RuntimeError):
    """A toolkit call failed or the simulator disagrees with ONNX Runtime."""


@dataclasses.dataclass(frozen=True)
class VerifyResult:
    target: str
    graph: str  # e.g. "merged_2s", "frontend", "backend_3s", "merged_dynamic"
    size: int  # the graph size (s) the model ran at (the front end: 1)
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
    """File stem of a fixed-shape model of manifest variant ``v``."""
    return "frontend" if v["part"] == "frontend" else f"{v['part']}_{int(v['n_chunks'])}s"


@dataclasses.dataclass(frozen=True)
class Job:
    """One .rknn to build: a part of a form at one size (fixed shapes) or at several (dynamic)."""

    form: str  # "merged" or "split"
    part: str  # "merged", "frontend" or "backend"
    shapes: str  # "fixed" or "dynamic"
    variants: tuple  # the manifest's encoder variants it holds (dicts), ascending size

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(int(v["n_chunks"]) for v in self.variants)

    @property
    def name(self) -> str:
        """File stem: frontend, merged_2s / backend_3s (fixed), merged_dynamic / backend_dynamic."""
        return f"{self.part}_dynamic" if self.shapes == "dynamic" else graph_name(self.variants[0])


def plan(graphs: list[dict], shapes: str) -> list[Job]:
    """The models to build from the selected manifest variants ``graphs`` (select_graphs):
    fixed, one per graph; dynamic, one per form and part (the front end, one chunk, stays
    fixed; a part with a single size is converted with fixed shapes, which is the same model)."""
    if shapes not in SHAPE_KINDS:
        raise ValueError(f"--shapes must be one of {', '.join(SHAPE_KINDS)}, got {shapes!r}")
    jobs, groups = [], {}
    for v in graphs:
        if shapes == "fixed" or v["part"] == "frontend":
            jobs.append(Job(v["form"], v["part"], "fixed", (v,)))
        else:
            groups.setdefault((v["form"], v["part"]), []).append(v)
    for (form, part), vs in groups.items():
        vs = tuple(sorted(vs, key=lambda v: int(v["n_chunks"])))
        if len(vs) == 1:
            log.info("%s %s: one size (%d s), converted with fixed shapes", form, part, int(vs[0]["n_chunks"]))
        jobs.append(Job(form, part, "dynamic" if len(vs) > 1 else "fixed", vs))
    return jobs


class _HybridRunner:
    """ONNX Runtime for every part except the one under test, which runs in the simulator."""

    def __init__(self, onnx_runner: OnnxEncoderRunner, part: str, model: RknnModel):
        self.onnx, self.part, self.model = onnx_runner, part, model

    def run_merged(self, variant, mel, m1, m2, bias):
        return self.model.run({"mel": mel, "conv_mask1": m1, "conv_mask2": m2, "attn_bias": bias}, variant.n_chunks)

    def run_frontend(self, mel, m1, m2):
        if self.part == "frontend":
            return self.model.run({"mel": mel, "conv_mask1": m1, "conv_mask2": m2})
        return self.onnx.run_frontend(mel, m1, m2)

    def run_backend(self, variant, hidden, bias):
        if self.part == "backend":
            return self.model.run({"hidden": hidden, "attn_bias": bias}, variant.n_chunks)
        return self.onnx.run_backend(variant, hidden, bias)


def verify_graph(bundle: Bundle, target: str, job: Job, model: RknnModel, mels: list[np.ndarray]) -> list[VerifyResult]:
    """Simulator vs ONNX Runtime through AudioEncoder on each mel in ``mels``, at each size of
    the model, each against that size's own ONNX graph."""
    onnx_runner = OnnxEncoderRunner(bundle.frontend_path())
    if job.part == "frontend":  # judged with the ONNX back ends that hold the audio
        runs = [(1, bundle.encoder_variants("split"))]
    else:
        runs = [(n, bundle.encoder_variants(job.form, [n])) for n in job.sizes]
    window, n_mels = bundle.manifest["encoder"]["window_tokens"], int(bundle.audio_config["num_mel_bins"])
    hybrid = _HybridRunner(onnx_runner, job.part, model)
    results = []
    for size, variants in runs:
        for mel in mels:
            ref = AudioEncoder(onnx_runner, variants, window, n_mels, job.form).encode(mel)
            got = AudioEncoder(hybrid, variants, window, n_mels, job.form).encode(mel)
            n = min(len(ref), len(got))
            results.append(VerifyResult(target, job.name, size, mel.shape[1] / 100.0, int(got.shape[0]),
                                        int(ref.shape[0]), cosine(got[:n], ref[:n]),
                                        float(np.max(np.abs(got[:n] - ref[:n])))))
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


@contextlib.contextmanager
def _scratch_cwd():
    """Run the toolkit in a private empty working directory: while it builds a dynamic-shape
    model it writes check_dynshape{i}.onnx (one per shape) into the working directory and reads
    them back, so two conversions in one directory break each other ("Cannot parse onnx input
    file"; seen here) and a failed build leaves them behind. Every path it is given is absolute."""
    old = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="onnx2rknn-") as d:
        os.chdir(d)
        try:
            yield d
        finally:
            os.chdir(old)


def job_graph(bundle: Bundle, target: str, job: Job, inputs: list[str]):
    """(ONNX path to convert, temporary file to delete or None, size -> (input shapes, output shape))."""
    if job.shapes == "fixed":
        path = bundle.file(job.variants[0]["file"], f"encoder graph {job.variants[0]['file']}")
        shapes, out_shape = graph_io(path)
        io = {job.sizes[0]: (shapes, out_shape)}
        tmp = None
    else:
        paths = {int(v["n_chunks"]): bundle.file(v["file"], f"encoder graph {v['file']}") for v in job.variants}
        # next to the fixed graphs: their weights file (encoder/weights.bin) resolves from there
        tmp = os.path.join(os.path.dirname(paths[job.sizes[-1]]), f".{job.name}_{target}.tmp.onnx")
        try:
            dg = dynamic_graph(paths, tmp)
        except DynamicGraphError as exc:
            raise ConversionError(f"{exc} (or convert with --shapes fixed)") from exc
        io = {n: (dg.input_shapes[n], dg.output_shapes[n]) for n in dg.sizes}
        path = tmp
    for n, (shapes, _) in io.items():
        if sorted(inputs) != sorted(shapes):
            raise ConversionError(f"{job.name} at {n} s: inputs {sorted(shapes)} differ from the manifest's {inputs}")
    return path, tmp, io


def model_metadata(bundle: Bundle, target: str, job: Job, io: dict) -> dict:
    """The metadata stored in the custom string of ``job``'s model (rknn_meta); ``io`` is
    job_graph's size -> (input shapes, output shape)."""
    inputs = list(bundle.manifest["encoder"]["inputs"][job.part])
    largest = job.variants[-1]
    meta = {"meta_version": META_VERSION, "form": job.form, "part": job.part, "shapes": job.shapes,
            "n_chunks": int(largest["n_chunks"]), "seconds": int(largest["seconds"]), "tokens": int(largest["tokens"]),
            "target": target, "dtype": "float16", "inputs": inputs, "encoder_sha256": encoder_digest(bundle.manifest),
            "exporter_version": bundle.manifest.get("exporter_version"),
            "converter": f"onnx2rknn/{CONVERTER_VERSION}", "toolkit": toolkit_version()}
    if job.shapes == "dynamic":
        meta.update(sizes=list(job.sizes), size_shapes={str(n): [ins[k] for k in inputs] + [out]
                                                        for n, (ins, out) in io.items()})
    else:
        ins, out = io[job.sizes[0]]
        meta.update(input_shapes={k: ins[k] for k in inputs}, output_shape=out)
    return meta


def convert_graph(bundle: Bundle, target: str, job: Job, out_dir: str, mels, min_cosine: float):
    """Convert one job's graph(s) into one .rknn; returns (manifest entry, verify results)."""
    RKNN = toolkit()
    name = job.name
    inputs = list(bundle.manifest["encoder"]["inputs"][job.part])
    largest = job.variants[-1]
    out_path = os.path.join(out_dir, f"{name}.rknn")
    graph = f"{', '.join(v['file'] for v in job.variants)} ({target})"
    onnx_path, tmp_onnx, io = job_graph(bundle, target, job, inputs)
    meta = model_metadata(bundle, target, job, io)
    dynamic = {"dynamic_input": [[io[n][0][k] for k in inputs] for n in job.sizes]} if job.shapes == "dynamic" else {}
    log.info("converting %s -> %s (%s shapes, %s s)", graph, out_path, job.shapes, ", ".join(map(str, job.sizes)))
    largest_shapes = [io[job.sizes[-1]][0][k] for k in inputs]  # the toolkit's MaxShape when dynamic
    tmp = os.path.join(out_dir, f".{name}.tmp.rknn")
    rk = RKNN(verbose=False)
    results = []
    try:
        with _scratch_cwd():
            try:
                text = custom_string(meta)
            except ValueError as exc:
                raise ConversionError(f"{graph}: {exc}") from None
            check(rk.config(target_platform=target, float_dtype="float16", optimization_level=3, custom_string=text,
                            **dynamic), "config", graph)
            check(rk.load_onnx(model=onnx_path, inputs=inputs, input_size_list=largest_shapes), "load_onnx", graph)
            check(rk.build(do_quantization=False), "build", graph)
            check(rk.export_rknn(tmp), "export_rknn", graph)
            if mels:
                check(rk.init_runtime(target=None), "init_runtime(simulator)", graph)
                entry = RknnEntry(job.form, job.part, int(largest["n_chunks"]), out_path, meta)
                results = verify_graph(bundle, target, job, RknnModel(rk, entry), mels)
                for r in results:
                    log.info("verify %s %-15s at %d s %5.2f s  tokens %d/%d  cosine %.7f  max|diff| %.2e", target,
                             r.graph, r.size, r.seconds, r.tokens_rknn, r.tokens_onnx, r.cosine, r.max_abs_diff)
                bad = [r for r in results if r.cosine < min_cosine or r.tokens_rknn != r.tokens_onnx]
                if bad:
                    raise ConversionError(
                        f"{graph}: simulator disagrees with ONNX Runtime: " + "; ".join(
                            f"{r.size} s graph, {r.seconds:.2f} s cosine {r.cosine:.6f} tokens "
                            f"{r.tokens_rknn}/{r.tokens_onnx}" for r in bad)
                        + f" (need cosine >= {min_cosine} and equal token counts)")
            os.replace(tmp, out_path)
    finally:
        rk.release()
        for path in (tmp, tmp_onnx):
            if path and os.path.exists(path):
                os.remove(path)
    return manifest_entry(bundle, job, out_path), results


def manifest_entry(bundle: Bundle, job: Job, path: str) -> dict:
    """The rk.rknn.<target> entry of ``job``'s model written at ``path``."""
    entry = {"form": job.form, "part": job.part, "shapes": job.shapes, "n_chunks": job.sizes[-1],
             "file": os.path.relpath(path, bundle.path).replace(os.sep, "/"), "sha256": sha256(path)}
    if job.shapes == "dynamic":
        entry["sizes"] = list(job.sizes)
    return entry


def _key(e: dict) -> tuple:
    kind = entry_shapes(e)
    return e["form"], e["part"], kind, int(e["n_chunks"]) if kind == "fixed" else 0


def record(bundle_dir: str, target: str, entries: list[dict]) -> list[dict]:
    """Merge ``entries`` into model.json's rk.rknn.<target> and their checksums into "files"
    (so Bundle.verify_checksums covers them); other keys kept. A part keeps one shape kind:
    entries of the other kind for the same form and part are dropped (returned; their files
    are left on disk, unlisted)."""
    kinds = {(e["form"], e["part"]): entry_shapes(e) for e in entries}
    dropped: list[dict] = []

    def mutate(manifest: dict) -> None:
        lst = manifest.setdefault("rk", {}).setdefault("rknn", {}).setdefault(target, [])
        new = {_key(e): e for e in entries}
        stale = [e for e in lst if (e["form"], e["part"]) in kinds and entry_shapes(e) != kinds[(e["form"], e["part"])]]
        lst[:] = [e for e in lst if _key(e) not in new and e not in stale] + entries
        lst.sort(key=lambda e: (e["form"], e["part"] != "frontend", entry_shapes(e), int(e["n_chunks"])))
        files = manifest.setdefault("files", {})
        for e in stale:
            files.pop(e["file"], None)
        files.update({e["file"]: e["sha256"] for e in entries})
        dropped[:] = stale

    update_manifest(bundle_dir, mutate)
    for e in dropped:
        log.info("model.json no longer lists %s (%s shapes; this run made %s ones)", e["file"], entry_shapes(e),
                 kinds[(e["form"], e["part"])])
    return dropped


def convert(bundle_dir: str, target: str, forms=("merged", "split"), sizes=None, out_dir=None, verify=None,
            lengths=DEFAULT_LENGTHS, start: float = 0.0, min_cosine: float = 0.999,
            shapes: str = "dynamic") -> list[VerifyResult]:
    if target not in SUPPORTED_SOCS:
        raise ValueError(f"--target must be one of {', '.join(SUPPORTED_SOCS)}, got {target!r}")
    for form in forms:
        if form not in ("merged", "split"):
            raise ValueError(f"unknown encoder form {form!r}; use merged and/or split")
    bundle = Bundle.load(os.path.abspath(bundle_dir))  # absolute: the toolkit runs in a scratch directory
    bundle.require_float_encoder("the RKNN conversion")
    jobs = plan(select_graphs(bundle, forms, sizes), shapes)
    out_dir = os.path.abspath(out_dir or os.path.join(bundle.path, "rknn", target))
    os.makedirs(out_dir, exist_ok=True)
    if os.path.relpath(out_dir, bundle.path).startswith(".."):
        log.warning("%s is outside the bundle: the manifest records a relative path that leaves it", out_dir)
    mels = verify_mels(verify, lengths, start, int(bundle.audio_config["num_mel_bins"])) if verify else []
    entries, results = [], []
    t0 = time.time()
    for job in jobs:
        entry, res = convert_graph(bundle, target, job, out_dir, mels, min_cosine)
        entries.append(entry)
        results += res
    record(bundle.path, target, entries)
    total = sum(os.path.getsize(os.path.join(bundle.path, e["file"])) for e in entries)
    log.info("%d models (%.1f MB) for %s in %s (%.1f s); manifest updated", len(entries), total / 1e6, target, out_dir,
             time.time() - t0)
    return results


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True, help="bundle directory (from scripts/export_onnx.py)")
    ap.add_argument("--target", required=True, choices=SUPPORTED_SOCS)
    ap.add_argument("--forms", default="merged,split", help="merged, split or both (default %(default)s)")
    ap.add_argument("--sizes", default=None, help="durations in seconds, comma-separated (default: all in the bundle)")
    ap.add_argument("--shapes", default="dynamic", choices=SHAPE_KINDS,
                    help="dynamic: one .rknn per part for all sizes, one weight copy (default); fixed: one .rknn per "
                         "size, each with its own weights (the NPU compiles each for its exact shapes)")
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
                          [float(x) for x in _csv(args.verify_lengths)], args.verify_start, args.min_cosine,
                          args.shapes)
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
