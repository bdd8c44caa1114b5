"""Doubles of ``rknnlite.api.RKNNLite`` (rknn-toolkit-lite2, which runs on boards only), and
stand-in .rknn / .rkllm files for them.

Contract checked: the one qwen3asr.backends.rk.rknn follows with the real RKNNLite:
``load_rknn(path)`` -> ``init_runtime(core_mask=<the SoC's mask>)`` -> ``inference(inputs=[...],
data_format="nchw")`` with float32 arrays of the converted graph's input shapes, in the order
onnx2rknn gave load_onnx -> ``release()``. A dynamic-shape model (onnx2rknn --shapes dynamic)
takes, per call, exactly one of the input shape sets it was built with (rknn-toolkit2
``dynamic_input``; rknnlite picks the set from the arrays it is given, as in
rknn-toolkit-lite2's dynamic_shape example): any other shape is a breach. Both doubles compute
the output with ONNX Runtime on the bundle's fixed-size encoder graph of the shape set the call
used, so the encoder's result can be compared with the ONNX backend's.

- ``RecordingRKNNLite`` is handed to the runner as ``lite_class``: it finds the graphs from the
  .rknn file's metadata (the declared shape sets are those of the bundle's graphs of the sizes
  the metadata lists), asserts the call order and every input, records the calls (an inference
  as ``("inference", n_inputs, size)``) and returns scripted failure codes (``fail``) or a given
  output (``output_override``).
- ``BoardRKNNLite`` is installed as the ``rknnlite.api`` module (``install``) for the engine with
  backend="rk": it knows the files ``add_rk_section`` registered, checks the state machine and the
  core mask, and collects violations instead of raising (it runs inside the engine, possibly on
  its encoder thread; the fixture asserts the list is empty). ``delay`` makes each inference take
  time, as on the NPU, and ``intervals`` records when each ran (overlap test).
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import sys
import time
import types

import numpy as np

from qwen3asr.encoder import EncoderVariant
from qwen3asr.backends.onnx import OnnxEncoderRunner
from qwen3asr.backends.onnx import make_session
from qwen3asr.backends.rk import rknn_meta


def write_rknn_file(path: str, meta: dict) -> None:
    """A file laid out like a .rknn for the runner's checks: magic, filler, custom string
    (rknn_meta.custom_string(meta)), no NPU code."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"RKNN" + bytes(60) + rknn_meta.custom_string(meta).encode() + bytes(16))


class RecordingRKNNLite:
    """Test double of rknnlite.api.RKNNLite: enforces load_rknn -> init_runtime(core_mask) ->
    inference(inputs=[...]) -> release and checks inputs against the ONNX graph the file was made
    from (count, order, shape, float32), then computes the output with ONNX Runtime.

    Expects the bundle layout <bundle>/rknn/<target>/<name>.rknn (onnx2rknn's). Class state:
    ``instances`` (every object made), ``fail`` (call name -> return value instead of success),
    ``output_override`` (if set, inference returns it); a test resets them (``reset``)."""

    instances: list = []
    fail: dict = {}  # call name -> return value to give instead of success
    output_override = None  # if set, inference returns this

    @classmethod
    def reset(cls) -> None:
        cls.instances, cls.fail, cls.output_override = [], {}, None

    def __init__(self):
        self.calls = []
        self.sessions = {}
        RecordingRKNNLite.instances.append(self)

    def load_rknn(self, path):
        assert self.calls == [], self.calls
        self.calls.append(("load_rknn", path))
        if "load_rknn" in self.fail:
            return self.fail["load_rknn"]
        bundle_dir = os.path.dirname(os.path.dirname(os.path.dirname(path)))
        man = json.load(open(os.path.join(bundle_dir, "model.json")))
        meta = rknn_meta.read_rknn_metadata(path)
        sizes = meta["sizes"] if meta.get("shapes") == "dynamic" else [meta["n_chunks"]]
        self.names = man["encoder"]["inputs"][meta["part"]]  # the order onnx2rknn gave load_onnx
        self.sessions = {}  # size -> ONNX Runtime session of the bundle's graph of that size
        for n in sizes:
            src = next(v for v in man["encoder"]["variants"] if v["form"] == meta["form"]
                       and v["part"] == meta["part"] and v["n_chunks"] == n)
            self.sessions[n] = make_session(os.path.join(bundle_dir, src["file"]))
        return 0

    def init_runtime(self, core_mask=0):
        assert [c[0] for c in self.calls] == ["load_rknn"], self.calls
        self.calls.append(("init_runtime", core_mask))
        return self.fail.get("init_runtime", 0)

    def inference(self, inputs, data_format=None):
        assert [c[0] for c in self.calls[:2]] == ["load_rknn", "init_runtime"], self.calls
        assert isinstance(inputs, list) and len(inputs) == len(self.names)
        assert data_format == "nchw"
        for a in inputs:
            assert isinstance(a, np.ndarray) and a.dtype == np.float32 and a.flags.c_contiguous
        declared = {n: [list(i.shape) for i in sorted(s.get_inputs(), key=lambda i: self.names.index(i.name))]
                    for n, s in self.sessions.items()}
        got = [list(a.shape) for a in inputs]
        size = next((n for n, shapes in declared.items() if shapes == got), None)
        assert size is not None, f"input shapes {got} are none of the model's shape sets {declared}"
        self.calls.append(("inference", len(inputs), size))
        if self.output_override is not None:
            return [self.output_override]
        return self.sessions[size].run(None, dict(zip(self.names, inputs)))

    def release(self):
        self.calls.append(("release",))


class BoardRKNNLite:
    """rknnlite.api.RKNNLite with the board's call contract; computes with ONNX Runtime.

    Class state, reset by ``reset(expected_mask)``: ``files`` (.rknn path -> (part, input names,
    [(input shapes, onnx path) per declared shape set]), filled by ``add_rk_section``, for any
    number of bundles),
    ``expected_mask`` (the core mask init_runtime must get), ``delay`` (seconds each inference
    takes), ``intervals`` ((start, end) perf_counter of every inference), ``instances``,
    ``violations`` (contract breaches, in words)."""

    NPU_CORE_AUTO, NPU_CORE_0, NPU_CORE_1, NPU_CORE_2, NPU_CORE_0_1, NPU_CORE_0_1_2 = 0, 1, 2, 4, 3, 7
    files: dict = {}        # .rknn path -> (part, input names, [(input shapes, onnx path), ...])
    expected_mask = None
    delay = 0.0  # seconds each inference takes (overlap test)
    intervals: list = []  # (start, end) perf_counter of every inference
    instances: list = []
    violations: list = []

    @classmethod
    def reset(cls, expected_mask: int) -> None:
        cls.files, cls.instances, cls.violations = {}, [], []
        cls.delay, cls.intervals = 0.0, []
        cls.expected_mask = expected_mask

    def __init__(self, verbose=False):
        self.state = "new"
        self.file = None
        self.core_mask = None
        self.shapes_seen = []
        BoardRKNNLite.instances.append(self)

    def _bad(self, msg):
        BoardRKNNLite.violations.append(msg)

    def load_rknn(self, path):
        if self.state != "new":
            self._bad(f"load_rknn in state {self.state}")
        with open(path, "rb") as f:
            if f.read(4) != b"RKNN":
                return -1
        if path not in self.files:
            self._bad(f"unknown model {path}")
            return -1
        self.file, self.state = path, "loaded"
        return 0

    def init_runtime(self, core_mask=NPU_CORE_AUTO, **kw):
        if self.state != "loaded":
            self._bad(f"init_runtime in state {self.state}")
        if kw:
            self._bad(f"init_runtime with {sorted(kw)}")
        if core_mask != self.expected_mask:
            self._bad(f"core_mask {core_mask}, expected {self.expected_mask}")
        self.core_mask, self.state = core_mask, "ready"
        return 0

    def inference(self, inputs=None, data_type=None, data_format=None, inputs_pass_through=None):
        t0 = time.perf_counter()
        if self.delay:
            time.sleep(self.delay)  # an encoder that takes time, as on the NPU
        try:
            return self._inference(inputs, data_format)
        finally:
            BoardRKNNLite.intervals.append((t0, time.perf_counter()))

    def _inference(self, inputs, data_format):
        if self.state != "ready":
            self._bad(f"inference in state {self.state}")
            return None
        part, names, sets = self.files[self.file]
        if not isinstance(inputs, list) or len(inputs) != len(names):
            self._bad(f"inputs must be a list of {len(names)} arrays")
            return None
        for a, name in zip(inputs, names):
            if not isinstance(a, np.ndarray) or a.dtype != np.float32:
                self._bad(f"input {name}: {getattr(a, 'dtype', type(a))}, want float32")
                return None
        got = [list(a.shape) for a in inputs]
        onnx_path = next((p for shapes, p in sets if shapes == got), None)
        if onnx_path is None:
            self._bad(f"input shapes {got} are none of {os.path.basename(self.file)}'s shape sets "
                      f"{[shapes for shapes, _ in sets]}")
            return None
        if any(a.ndim == 4 for a in inputs) and data_format != "nchw":
            self._bad(f"4-D inputs with data_format={data_format!r} (the toolkit default is NHWC)")
        self.shapes_seen.append([list(a.shape) for a in inputs])
        runner = OnnxEncoderRunner(onnx_path if part == "frontend" else None)  # each file runs its own graph
        feeds = dict(zip(names, inputs))
        if part == "frontend":
            out = runner.run_frontend(feeds["mel"], feeds["conv_mask1"], feeds["conv_mask2"])
        else:
            v = EncoderVariant("merged" if part == "merged" else "split", 0, onnx_path)
            out = runner.run_merged(v, **feeds) if part == "merged" else runner.run_backend(v, **feeds)
        return [out]

    def release(self):
        if self.state == "released":
            self._bad("release twice")
        self.state = "released"


def install(monkeypatch, lite_class) -> None:
    """Make ``import rknnlite.api`` give a module whose RKNNLite is ``lite_class`` (and
    importlib.util.find_spec("rknnlite") see it installed), undone by ``monkeypatch``."""
    api = types.ModuleType("rknnlite.api")
    api.RKNNLite = lite_class
    pkg = types.ModuleType("rknnlite")
    pkg.api = api
    pkg.__spec__ = importlib.machinery.ModuleSpec("rknnlite", None)  # find_spec() sees it installed
    monkeypatch.setitem(sys.modules, "rknnlite", pkg)
    monkeypatch.setitem(sys.modules, "rknnlite.api", api)


def add_rk_section(bundle_dir: str, soc: str, decoder: bool = True, max_context: int = 1024,
                   shapes: str = "dynamic") -> None:
    """What onnx2rknn.py and export_rkllm.py add to a bundle: stand-in .rknn files (magic +
    metadata), registered with BoardRKNNLite, and (``decoder``) a decoder file that the librkllmrt
    double (doubles.rkllm_c) does not read, with the manifest entries. ``shapes``: "dynamic" (the
    converter's default: one file per encoder part for all sizes, the split front end fixed) or
    "fixed" (one file per graph)."""
    man_path = os.path.join(bundle_dir, "model.json")
    man = json.load(open(man_path))
    digest = rknn_meta.encoder_digest(man)
    os.makedirs(os.path.join(bundle_dir, "rk"), exist_ok=True)
    groups = {}  # (form, part) or the variant's file -> the variants one .rknn holds
    for v in man["encoder"]["variants"]:
        key = (v["form"], v["part"]) if shapes == "dynamic" and v["part"] != "frontend" else v["file"]
        groups.setdefault(key, []).append(v)
    entries = []
    for vs in groups.values():
        vs = sorted(vs, key=lambda v: v["n_chunks"])
        sets, size_shapes = [], {}
        for v in vs:
            onnx_path = os.path.join(bundle_dir, v["file"])
            sess = make_session(onnx_path)
            names = [i.name for i in sess.get_inputs()]
            ins, out = [list(i.shape) for i in sess.get_inputs()], list(sess.get_outputs()[0].shape)
            sets.append((ins, onnx_path))
            size_shapes[str(v["n_chunks"])] = ins + [out]
        v = vs[-1]
        meta = {"meta_version": rknn_meta.META_VERSION, "form": v["form"], "part": v["part"],
                "n_chunks": v["n_chunks"], "target": soc, "encoder_sha256": digest, "inputs": names}
        entry = {"form": v["form"], "part": v["part"], "n_chunks": v["n_chunks"]}
        if len(vs) > 1:
            meta.update(shapes="dynamic", sizes=[x["n_chunks"] for x in vs], size_shapes=size_shapes)
            entry.update(shapes="dynamic", sizes=meta["sizes"])
            rel = f"rk/{v['part']}_dynamic_{soc}.rknn"
        else:
            meta.update(shapes="fixed", input_shapes=dict(zip(names, sets[0][0])), output_shape=size_shapes[
                str(v["n_chunks"])][-1])
            entry.update(shapes="fixed")
            rel = f"rk/{os.path.basename(v['file'])[:-5]}_{soc}.rknn"
        write_rknn_file(os.path.join(bundle_dir, rel), meta)
        entries.append(dict(entry, file=rel))
        BoardRKNNLite.files[os.path.join(bundle_dir, rel)] = (v["part"], names, sets)
    rk = man.setdefault("rk", {})
    rk.setdefault("rknn", {})[soc] = entries
    if decoder:
        rel = f"rk/decoder_{soc}_w8a8.rkllm"
        with open(os.path.join(bundle_dir, rel), "wb") as f:
            f.write(b"not a real rkllm model: the runtime double does not read it")
        rk.setdefault("rkllm", {})[soc] = {"file": rel, "quant": "w8a8", "sha256": "0" * 64,
                                           "max_context": max_context}
    json.dump(man, open(man_path, "w"), indent=2)
