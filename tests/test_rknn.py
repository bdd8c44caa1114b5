"""RKNN encoder path: conversion + simulator verification (rknn-toolkit2 in .venv-rknn) and the
board runner's checks and call contract (with a test double for rknnlite, which only runs on boards).

Both shape kinds: the converter's default, one dynamic-shape model per encoder part for every
size (one weight copy), and --shapes fixed, one model per size."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import bundles
from qwen3asr_tools import onnx2rknn, onnx_dynamic
from qwen3asr.audio import prepare_audio
from qwen3asr.bundle import Bundle, BundleError
from qwen3asr.encoder import AudioEncoder, tokens_for_frames
from qwen3asr.mel import log_mel
from qwen3asr.backends.onnx import OnnxEncoderRunner, make_session
from qwen3asr.backends.rk import rknn, rknn_meta
from qwen3asr.backends.rk import soc as rk_soc

from doubles.rknn_toolkit import FailingRKNN
from doubles.rknnlite import RecordingRKNNLite, write_rknn_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RKNN_PY = os.path.join(ROOT, ".venv-rknn", "bin", "python")
AUDIO = os.path.join(ROOT, "audio", "long_mixed.wav")
TARGETS = ("rk3588", "rk3576")
SIZES = (2, 3)
LENGTHS = (1.37, 3.0)
START = 0.5  # s: the first utterance of long_mixed.wav starts here


def _toolkit_reason() -> str | None:
    if not os.path.isfile(RKNN_PY):
        return "no .venv-rknn: run `bash scripts/setup_rknn_env.sh` for the rknn-toolkit2 tests"
    r = subprocess.run([RKNN_PY, "-c", "import rknn.api"], capture_output=True, text=True)
    if r.returncode != 0:
        return f"rknn-toolkit2 does not import in .venv-rknn: {r.stderr.strip()[-300:]}"
    return None


def _copy_encoder_bundle(dst: str) -> str:
    """model.json + encoder/ of the tiny-a bundle (all the RKNN path reads)."""
    _, src = bundles.bundle("tiny-a")
    os.makedirs(dst)
    shutil.copy(os.path.join(src, "model.json"), dst)
    shutil.copytree(os.path.join(src, "encoder"), os.path.join(dst, "encoder"))
    return dst


def _add_foreign_rk_key(bundle_dir: str) -> None:
    path = os.path.join(bundle_dir, "model.json")
    with open(path) as f:
        m = json.load(f)
    m["rk"] = {"rkllm": {"rk3576": [{"file": "rkllm/decoder.rkllm"}]}}
    with open(path, "w") as f:
        json.dump(m, f)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A bundle whose merged + split 2/3 s graphs were converted for both SoCs with --verify, with
    the default shapes: one dynamic-shape model per part (merged, split back end) for 2 and 3 s."""
    reason = _toolkit_reason()
    if reason:
        pytest.skip(reason)
    d = _copy_encoder_bundle(str(tmp_path_factory.mktemp("rk") / "bundle"))
    _add_foreign_rk_key(d)
    reports = {}
    for target in TARGETS:
        rep = os.path.join(d, f"verify_{target}.json")
        cmd = [RKNN_PY, os.path.join(ROOT, "scripts", "onnx2rknn.py"), "--bundle", d, "--target", target,
               "--forms", "merged,split", "--sizes", ",".join(map(str, SIZES)), "--verify", AUDIO,
               "--verify-lengths", ",".join(map(str, LENGTHS)), "--verify-start", str(START), "--report", rep]
        # The launcher as a user runs it, on this checkout's code whichever checkout .venv-rknn has
        # installed (scripts/setup_rknn_env.sh installs it editable).
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        assert r.returncode == 0, f"onnx2rknn failed for {target}:\n{r.stderr[-3000:]}"
        assert f"verified 10 comparisons for {target}" in r.stdout
        with open(rep) as f:
            reports[target] = json.load(f)
    return d, reports


@pytest.mark.slow  # rknn-toolkit2 converts and simulates (the module fixture)
@pytest.mark.parametrize("target", TARGETS)
def test_simulator_matches_onnx_runtime(converted, target):
    """Each dynamic-shape model, run in the simulator at each of its sizes (2 and 3 s), against
    ONNX Runtime on that size's own fixed graph, on real speech."""
    _, reports = converted
    res = reports[target]
    assert {(r["graph"], r["size"]) for r in res} == {
        ("frontend", 1), ("merged_dynamic", 2), ("merged_dynamic", 3), ("backend_dynamic", 2), ("backend_dynamic", 3)}
    assert len(res) == 5 * len(LENGTHS)
    for r in res:
        assert r["target"] == target
        assert r["tokens_rknn"] == r["tokens_onnx"] == tokens_for_frames(round(r["seconds"] * 100))
        assert r["cosine"] >= 0.999, r
    assert {r["tokens_onnx"] for r in res} == {18, 39}


@pytest.mark.slow
def test_metadata_in_custom_string_and_manifest(converted):
    d, _ = converted
    b = Bundle.load(d)
    assert b.manifest["rk"]["rkllm"] == {"rk3576": [{"file": "rkllm/decoder.rkllm"}]}  # merged, not clobbered
    assert b.manifest["decoder"]["variants"]  # export-time keys kept
    digest = rknn_meta.encoder_digest(b.manifest)
    for target in TARGETS:
        entries = b.manifest["rk"]["rknn"][target]
        assert sorted((e["part"], e["shapes"], e["n_chunks"], tuple(e.get("sizes", ()))) for e in entries) == [
            ("backend", "dynamic", 3, (2, 3)), ("frontend", "fixed", 1, ()), ("merged", "dynamic", 3, (2, 3))]
        for e in entries:
            path = os.path.join(d, e["file"])
            assert e["file"] == f"rknn/{target}/" + ("frontend" if e["part"] == "frontend" else f"{e['part']}_dynamic") \
                + ".rknn"
            with open(path, "rb") as f:
                assert e["sha256"] == hashlib.sha256(f.read()).hexdigest()
            assert b.manifest["files"][e["file"]] == e["sha256"]
            with open(path, "rb") as f:
                assert f.read(4) == b"RKNN"
            meta = rknn_meta.read_rknn_metadata(path)
            assert (meta["form"], meta["part"], meta["n_chunks"], meta["target"], meta["shapes"]) == (
                e["form"], e["part"], e["n_chunks"], target, e["shapes"])
            assert meta["encoder_sha256"] == digest
            assert meta["inputs"] == b.manifest["encoder"]["inputs"][e["part"]]
            assert meta["tokens"] == 13 * e["n_chunks"]
            assert meta["exporter_version"] == b.manifest["exporter_version"]
            assert meta["toolkit"] == "2.5.0"
            if e["shapes"] == "dynamic":  # per size: the inputs of that size's ONNX graph, then its output
                assert meta["sizes"] == [2, 3]
                for n in (2, 3):
                    sess = make_session(b.encoder_variants(e["form"], [n])[0].path)
                    by_name = {i.name: list(i.shape) for i in sess.get_inputs()}
                    assert meta["size_shapes"][str(n)] == [by_name[k] for k in meta["inputs"]] + [
                        list(sess.get_outputs()[0].shape)]


@pytest.mark.slow  # rknn-toolkit2 converts and simulates
def test_fixed_shapes_flag_converts_one_model_per_size(converted, tmp_path):
    """--shapes fixed (the per-size files): simulator parity at each size, and the run replaces the
    form's dynamic-shape entry (one kind per part) while the other form keeps its own."""
    src, _ = converted
    d = str(tmp_path / "bundle")
    shutil.copytree(src, d)
    rep = os.path.join(d, "verify_fixed.json")
    cmd = [RKNN_PY, os.path.join(ROOT, "scripts", "onnx2rknn.py"), "--bundle", d, "--target", "rk3576",
           "--shapes", "fixed", "--forms", "merged", "--sizes", ",".join(map(str, SIZES)), "--verify", AUDIO,
           "--verify-lengths", ",".join(map(str, LENGTHS)), "--verify-start", str(START), "--report", rep]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python")))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "verified 4 comparisons for rk3576" in r.stdout
    res = json.load(open(rep))
    assert {(x["graph"], x["size"]) for x in res} == {("merged_2s", 2), ("merged_3s", 3)}
    assert all(x["tokens_rknn"] == x["tokens_onnx"] and x["cosine"] >= 0.999 for x in res), res
    b = Bundle.load(d)
    entries = b.rknn_entries("rk3576")
    assert sorted((e["form"], e["part"], e["shapes"], e["n_chunks"]) for e in entries) == [
        ("merged", "merged", "fixed", 2), ("merged", "merged", "fixed", 3), ("split", "backend", "dynamic", 3),
        ("split", "frontend", "fixed", 1)]
    assert "rknn/rk3576/merged_dynamic.rknn" not in b.manifest["files"]  # no longer listed, so not checksummed
    assert b.rknn_entries("rk3588") == Bundle.load(src).rknn_entries("rk3588")  # the other target untouched
    RecordingRKNNLite.reset()
    try:
        merged = rknn.create_rknn_encoder(b, "merged", soc="rk3576", lite_class=RecordingRKNNLite)
        split = rknn.create_rknn_encoder(b, "split", soc="rk3576", lite_class=RecordingRKNNLite)
        assert (merged.runner.shapes, split.runner.shapes) == ("fixed", "dynamic")
        assert len(RecordingRKNNLite.instances) == 2 + 2  # merged_2s, merged_3s; front end, one back end
        merged.close()
        split.close()
    finally:
        RecordingRKNNLite.reset()


@pytest.mark.slow  # rknn-toolkit2 converts and simulates
def test_an_aligner_bundles_encoder_converts_unchanged(tmp_path):
    """onnx2rknn on a forced-aligner bundle (its own encoder weights and widths, the same graph
    family), default dynamic shapes for 2 and 3 s: the simulator matches ONNX Runtime at both
    sizes, the manifest keeps the aligner section, and the board runner reads the files
    (docs/board.md, "Word timestamps on the board")."""
    reason = _toolkit_reason()
    if reason:
        pytest.skip(reason)
    pytest.importorskip("torch", reason="the random aligner checkpoint is built with the official code (torch)")
    _, src = bundles.aligner_bundle("fa-tiny-odd")
    d = str(tmp_path / "aligner")
    os.makedirs(d)
    shutil.copy(os.path.join(src, "model.json"), d)
    shutil.copytree(os.path.join(src, "encoder"), os.path.join(d, "encoder"))
    rep = os.path.join(d, "verify.json")
    cmd = [RKNN_PY, os.path.join(ROOT, "scripts", "onnx2rknn.py"), "--bundle", d, "--target", "rk3576",
           "--forms", "merged,split", "--sizes", "2,3", "--verify", AUDIO, "--verify-lengths",
           ",".join(map(str, LENGTHS)), "--verify-start", str(START), "--report", rep]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python")))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "verified 10 comparisons for rk3576" in r.stdout
    with open(rep) as f:
        res = json.load(f)
    assert {(x["graph"], x["size"]) for x in res} == {
        ("merged_dynamic", 2), ("merged_dynamic", 3), ("frontend", 1), ("backend_dynamic", 2), ("backend_dynamic", 3)}
    assert all(x["tokens_rknn"] == x["tokens_onnx"] and x["cosine"] >= 0.999 for x in res), res
    b = Bundle.load(d)
    assert b.kind == "aligner" and b.aligner == json.load(open(os.path.join(src, "model.json")))["aligner"]
    assert sorted((e["part"], e["shapes"], tuple(e.get("sizes", ()))) for e in b.rknn_entries("rk3576")) == [
        ("backend", "dynamic", (2, 3)), ("frontend", "fixed", ()), ("merged", "dynamic", (2, 3))]
    RecordingRKNNLite.reset()
    try:
        for form in ("merged", "split"):
            enc = rknn.create_rknn_encoder(b, form, soc="rk3576", lite_class=RecordingRKNNLite)
            ref = AudioEncoder(OnnxEncoderRunner(b.frontend_path()), b.encoder_variants(form, [2, 3]),
                               b.manifest["encoder"]["window_tokens"], int(b.audio_config["num_mel_bins"]), form)
            mel = _mel(5.0)  # longer than the 3 s graph: chained, 3 s then 2 s
            got, want = enc.encode(mel), ref.encode(mel)
            assert got.shape == want.shape == (tokens_for_frames(mel.shape[1]), b.audio_config["output_dim"])
            np.testing.assert_array_equal(got, want)
            (model,) = enc.runner._models.values()  # one model for both sizes
            assert [c[2] for c in model.handle.calls if c[0] == "inference"] == [3, 2]
            enc.close()
    finally:
        RecordingRKNNLite.reset()


# --- the board runner, with a test double for rknnlite (doubles.rknnlite) -------------------------

def _synthetic(d: str, shapes: str) -> str:
    """Stand-in .rknn files (the converter's metadata and manifest entries, no NPU code) for
    rk3588 and rk3576 of the merged and split 2/3 s graphs, with ``shapes`` "fixed" or "dynamic"."""
    b = Bundle.load(d)
    for target in TARGETS:
        entries = []
        for job in onnx2rknn.plan(onnx2rknn.select_graphs(b, ("merged", "split"), list(SIZES)), shapes):
            inputs = b.manifest["encoder"]["inputs"][job.part]
            _, tmp, io = onnx2rknn.job_graph(b, target, job, inputs)
            if tmp:
                os.remove(tmp)
            path = os.path.join(d, "rknn", target, f"{job.name}.rknn")
            write_rknn_file(path, onnx2rknn.model_metadata(b, target, job, io))
            entries.append(onnx2rknn.manifest_entry(b, job, path))
        onnx2rknn.record(d, target, entries)
    return d


@pytest.fixture()
def synthetic(tmp_path):
    """A bundle with fixed-shape stand-in .rknn files (real metadata, no NPU code) for rk3588 and rk3576."""
    return _synthetic(_copy_encoder_bundle(str(tmp_path / "bundle")), "fixed")


@pytest.fixture()
def synthetic_dynamic(tmp_path):
    """The same with dynamic-shape stand-ins: one file per part for 2 and 3 s, the front end fixed."""
    return _synthetic(_copy_encoder_bundle(str(tmp_path / "bundle")), "dynamic")


@pytest.fixture()
def fake_lite():
    RecordingRKNNLite.reset()
    yield RecordingRKNNLite
    RecordingRKNNLite.reset()


def _mel(seconds: float) -> np.ndarray:
    pcm = prepare_audio(AUDIO)
    return log_mel(pcm[int(START * 16000):int((START + seconds) * 16000)], 128)


def _check_runner_against_onnx(bundle_dir: str, fake_lite, target: str, form: str) -> None:
    """The runner's encoder equals ONNX Runtime's exactly on 1.37, 3 and 5 s (chained) of speech;
    each call ran the graph size AudioEncoder picked (a dynamic model: the shapes of that size)."""
    b = Bundle.load(bundle_dir)
    enc = rknn.create_rknn_encoder(b, form, soc=target, lite_class=fake_lite)
    ref = AudioEncoder(OnnxEncoderRunner(b.frontend_path()), b.encoder_variants(form, list(SIZES)),
                       b.manifest["encoder"]["window_tokens"], 128, form)
    picked = []
    for seconds in (1.37, 3.0, 5.0):  # 5 s is longer than the largest variant: chained
        mel = _mel(seconds)
        got, want = enc.encode(mel), ref.encode(mel)
        assert got.shape == want.shape == (tokens_for_frames(mel.shape[1]), 96)
        np.testing.assert_array_equal(got, want)
        picked += [2] if seconds < 2 else [3] if seconds <= 3 else [3, 2]
    dynamic = enc.runner.shapes == "dynamic"
    n_models = (1 if dynamic else len(SIZES)) + (1 if form == "split" else 0)
    assert len(fake_lite.instances) == n_models
    main = [h for h in fake_lite.instances if h.sessions and 1 not in h.sessions]  # not the front end
    ran = [c[2] for h in main for c in h.calls if c[0] == "inference"]
    assert (ran if dynamic else sorted(ran)) == (picked if dynamic else sorted(picked))
    enc.close()
    mask = {"rk3588": 7, "rk3576": 3}[target]
    for h in fake_lite.instances:
        assert h.calls[0][0] == "load_rknn" and h.calls[0][1].endswith(".rknn")
        assert h.calls[1] == ("init_runtime", mask)
        assert h.calls[-1] == ("release",)
    assert sum(c[0] == "inference" for h in fake_lite.instances for c in h.calls) > 0


@pytest.mark.parametrize("form", ["merged", "split"])
@pytest.mark.parametrize("target", TARGETS)
def test_runner_contract_synthetic(synthetic, fake_lite, target, form):
    _check_runner_against_onnx(synthetic, fake_lite, target, form)


@pytest.mark.parametrize("form", ["merged", "split"])
@pytest.mark.parametrize("target", TARGETS)
def test_runner_contract_dynamic_shapes(synthetic_dynamic, fake_lite, target, form):
    _check_runner_against_onnx(synthetic_dynamic, fake_lite, target, form)


@pytest.mark.slow
@pytest.mark.parametrize("form", ["merged", "split"])
def test_runner_contract_converted_files(converted, fake_lite, form):
    _check_runner_against_onnx(converted[0], fake_lite, "rk3576", form)


def test_dynamic_model_sizes(synthetic_dynamic, fake_lite):
    """sizes= picks which of the model's sizes are used (one model loaded whatever the choice);
    a size it lacks, or a call at one, is refused with the sizes it has."""
    enc = rknn.create_rknn_encoder(synthetic_dynamic, "merged", sizes=[3], soc="rk3588", lite_class=fake_lite)
    assert [v.n_chunks for v in enc.variants] == [3] and enc.runner.shapes == "dynamic"
    enc.encode(_mel(1.37))  # would take the 2 s graph if it were in use
    (h,) = fake_lite.instances
    assert [c[2] for c in h.calls if c[0] == "inference"] == [3]
    (model,) = enc.runner._models.values()
    with pytest.raises(ValueError, match=r"merged_dynamic.rknn takes sizes \[2, 3\] s, not 4 s"):
        model.run({}, 4)
    with pytest.raises(ValueError, match=r"merged_dynamic.rknn takes sizes \[2, 3\] s: say which one"):
        model.run({})
    enc.close()
    with pytest.raises(BundleError, match=r"RKNN encoder sizes \[4\] s not converted for rk3588 \(merged offers \[2, 3\] s\)"):
        rknn.create_rknn_encoder(synthetic_dynamic, "merged", sizes=[4], soc="rk3588", lite_class=fake_lite)


def test_rknnlite_double_refuses_undeclared_shapes(synthetic_dynamic, fake_lite):
    """The double's check can fail: a dynamic model takes only the shape sets it was built with."""
    rknn.create_rknn_encoder(synthetic_dynamic, "merged", soc="rk3576", lite_class=fake_lite)
    (h,) = fake_lite.instances
    good = [np.zeros(s, np.float32) for s in ([1, 128, 300], [3, 1, 1, 50], [3, 1, 1, 25], [1, 1, 39, 39])]
    assert h.inference(inputs=good, data_format="nchw")[0].shape == (1, 39, 96)
    bad = [np.zeros(s, np.float32) for s in ([1, 128, 400], [4, 1, 1, 50], [4, 1, 1, 25], [1, 1, 52, 52])]
    with pytest.raises(AssertionError, match=r"input shapes \[\[1, 128, 400\].* are none of the model's shape sets"):
        h.inference(inputs=bad, data_format="nchw")


def test_one_kind_per_form(synthetic_dynamic, fake_lite):
    """A manifest listing both kinds for a form (hand-edited: record() keeps one) is refused, as is
    a dynamic entry whose sizes differ from its file's."""
    path = os.path.join(synthetic_dynamic, "model.json")
    m = json.load(open(path))
    merged = next(e for e in m["rk"]["rknn"]["rk3588"] if e["part"] == "merged")
    m["rk"]["rknn"]["rk3588"].append(dict(merged, shapes="fixed", n_chunks=2))
    json.dump(m, open(path, "w"))
    with pytest.raises(BundleError, match="lists both fixed and dynamic-shape merged RKNN models for rk3588"):
        rknn.create_rknn_encoder(synthetic_dynamic, "merged", soc="rk3588", lite_class=fake_lite)
    m["rk"]["rknn"]["rk3588"].pop()
    merged["sizes"] = [2]
    json.dump(m, open(path, "w"))
    with pytest.raises(rknn_meta.RknnModelError, match=r"sizes: file has \[2, 3\], expected \[2\]"):
        rknn.create_rknn_encoder(synthetic_dynamic, "merged", soc="rk3588", lite_class=fake_lite)
    assert fake_lite.instances == []


def test_dynamic_graph_matches_each_fixed_graph(tmp_path):
    """onnx_dynamic: the one graph computes, at every size of the bundle, what that size's own
    graph computes (ONNX Runtime, random inputs); Reshape targets became -1, the I/O dims free."""
    d = _copy_encoder_bundle(str(tmp_path / "b"))
    b = Bundle.load(d)
    for form in ("merged", "split"):
        variants = {v.n_chunks: v.path for v in b.encoder_variants(form)}
        out = os.path.join(d, "encoder", f".{form}_dynamic.onnx")
        g = onnx_dynamic.dynamic_graph(variants, out)
        assert g.sizes == (2, 3, 4, 5, 8)
        dyn = make_session(out)
        for i in dyn.get_inputs():  # free exactly where the sizes differ
            per_size = [g.input_shapes[n][i.name] for n in g.sizes]
            for axis, dim in enumerate(i.shape):
                varies = len({p[axis] for p in per_size}) > 1
                assert isinstance(dim, str) if varies else dim == per_size[0][axis], (i.name, i.shape)
        rng = np.random.default_rng(0)
        for n, path in variants.items():
            fixed = make_session(path)
            feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in fixed.get_inputs()}
            assert {k: list(v.shape) for k, v in feeds.items()} == g.input_shapes[n]
            want, got = fixed.run(None, feeds)[0], dyn.run(None, feeds)[0]
            assert list(got.shape) == g.output_shapes[n]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_dynamic_graph_refuses_what_sizes_cannot_explain(tmp_path):
    import onnx
    from onnx import numpy_helper

    d = _copy_encoder_bundle(str(tmp_path / "b"))
    b = Bundle.load(d)
    paths = {v.n_chunks: v.path for v in b.encoder_variants("merged", [2, 3])}
    with pytest.raises(onnx_dynamic.DynamicGraphError, match=r"needs two or more sizes, got \[2\]"):
        onnx_dynamic.dynamic_graph({2: paths[2]}, str(tmp_path / "x.onnx"))
    m = onnx.load(paths[3], load_external_data=False)  # a weight that differs between sizes
    t = next(t for t in m.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and not t.external_data)
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) + 1.0, t.name))
    onnx.save_model(m, paths[3])
    with pytest.raises(onnx_dynamic.DynamicGraphError, match=f"initializer '{t.name}' differs between sizes and is "
                                                             f"not only a Reshape target shape"):
        onnx_dynamic.dynamic_graph(paths, os.path.join(d, "encoder", "x.onnx"))


def test_sizes_and_core_mask_override(synthetic, fake_lite):
    enc = rknn.create_rknn_encoder(synthetic, "merged", sizes=[3], soc="rk3588", core_mask="0_1", lite_class=fake_lite)
    assert [v.n_chunks for v in enc.variants] == [3]
    assert fake_lite.instances[0].calls[1] == ("init_runtime", 3)
    with pytest.raises(BundleError, match=r"RKNN encoder sizes \[4\] s not converted for rk3588 \(merged offers \[2, 3\] s\)"):
        rknn.create_rknn_encoder(synthetic, "merged", sizes=[4], soc="rk3588", lite_class=fake_lite)


def _first_file(bundle_dir: str, target="rk3588", part="merged") -> str:
    man = json.load(open(os.path.join(bundle_dir, "model.json")))
    e = next(e for e in man["rk"]["rknn"][target] if e["part"] == part)
    return os.path.join(bundle_dir, e["file"])


def test_missing_file(synthetic, fake_lite):
    os.remove(_first_file(synthetic))
    with pytest.raises(BundleError, match=r"RKNN model missing: .*merged_2s\.rknn\. Convert it on an x86 PC with "
                                          r"scripts/onnx2rknn\.py"):
        rknn.create_rknn_encoder(synthetic, "merged", soc="rk3588", lite_class=fake_lite)
    assert fake_lite.instances == []  # checked before any model was loaded


def test_record_adds_rknn_files_to_checksums(synthetic):
    """onnx2rknn.record lists every .rknn file in "files", so Bundle.verify_checksums covers them."""
    b = Bundle.load(synthetic)
    rels = [e["file"] for t in TARGETS for e in b.manifest["rk"]["rknn"][t]]
    assert len(rels) == 10 and all(r.endswith(".rknn") for r in rels)
    for rel in rels:
        with open(os.path.join(synthetic, rel), "rb") as f:
            assert b.manifest["files"][rel] == hashlib.sha256(f.read()).hexdigest()
    bad = b.verify_checksums()  # the copy has no decoder files: those are reported, the .rknn files are not
    assert bad and not set(bad) & set(rels)
    with open(os.path.join(synthetic, rels[0]), "ab") as f:
        f.write(b"corrupted")
    assert set(Bundle.load(synthetic).verify_checksums()) - set(bad) == {rels[0]}
    # a re-run for one target replaces its entries, keeps the other target's and the export's files
    entries = b.manifest["rk"]["rknn"]["rk3588"][:1]
    onnx2rknn.record(synthetic, "rk3588", [dict(entries[0], sha256="f" * 64)])
    man = Bundle.load(synthetic).manifest
    assert len(man["rk"]["rknn"]["rk3588"]) == 5 and man["rk"]["rknn"]["rk3576"] == b.manifest["rk"]["rknn"]["rk3576"]
    assert man["files"] == dict(b.manifest["files"], **{entries[0]["file"]: "f" * 64})
    assert not [n for n in os.listdir(synthetic) if n.startswith(".model.json")]  # no temporary file left


def test_record_keeps_one_kind_per_part(synthetic):
    """Dynamic-shape models recorded over fixed ones replace them (and their checksums) per
    form and part; the front end, fixed in both, is replaced by its new entry."""
    before = Bundle.load(synthetic).manifest
    _synthetic(synthetic, "dynamic")
    man = Bundle.load(synthetic).manifest
    for target in TARGETS:
        assert sorted((e["part"], e["shapes"], e["n_chunks"]) for e in man["rk"]["rknn"][target]) == [
            ("backend", "dynamic", 3), ("frontend", "fixed", 1), ("merged", "dynamic", 3)]
    gone = {e["file"] for t in TARGETS for e in before["rk"]["rknn"][t] if e["part"] != "frontend"}
    assert len(gone) == 8 and not gone & set(man["files"])
    assert {e["file"] for t in TARGETS for e in man["rk"]["rknn"][t]} <= set(man["files"])


def test_lfs_pointer(synthetic, fake_lite):
    with open(_first_file(synthetic), "w") as f:
        f.write("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n")
    with pytest.raises(BundleError, match=r"RKNN model is a Git LFS pointer.*`git lfs pull`"):
        rknn.create_rknn_encoder(synthetic, "merged", soc="rk3588", lite_class=fake_lite)


def test_wrong_magic(synthetic, fake_lite):
    with open(_first_file(synthetic), "wb") as f:
        f.write(b"\x08\x07onnx-model" + b"\0" * 100)
    with pytest.raises(rknn_meta.RknnModelError, match=r"is not an RKNN model \(starts with b'\\x08\\x07on', expected b'RKNN'\)"):
        rknn.create_rknn_encoder(synthetic, "merged", soc="rk3588", lite_class=fake_lite)


def test_no_metadata(synthetic, fake_lite):
    with open(_first_file(synthetic), "wb") as f:
        f.write(b"RKNN" + b"\0" * 200)
    with pytest.raises(rknn_meta.RknnModelError, match="no qwen3asr metadata in its custom string"):
        rknn.create_rknn_encoder(synthetic, "merged", soc="rk3588", lite_class=fake_lite)


def test_stale_conversion(synthetic, fake_lite):
    """The encoder was re-exported after the conversion: its files' checksums changed."""
    path = os.path.join(synthetic, "model.json")
    m = json.load(open(path))
    m["files"]["encoder/weights.bin"] = "0" * 64
    json.dump(m, open(path, "w"))
    with pytest.raises(rknn_meta.RknnModelError, match=r"encoder_sha256: file has '[0-9a-f]{64}', expected '[0-9a-f]{64}'.*"
                                                r"re-run python scripts/onnx2rknn.py --bundle .* --target rk3588"):
        rknn.create_rknn_encoder(synthetic, "merged", soc="rk3588", lite_class=fake_lite)


def test_file_of_other_soc(synthetic, fake_lite):
    path = os.path.join(synthetic, "model.json")
    m = json.load(open(path))
    m["rk"]["rknn"]["rk3588"] = m["rk"]["rknn"]["rk3576"]
    json.dump(m, open(path, "w"))
    with pytest.raises(rknn_meta.RknnModelError, match=r"target: file has 'rk3576', expected 'rk3588'"):
        rknn.create_rknn_encoder(synthetic, "merged", soc="rk3588", lite_class=fake_lite)


def test_no_models_for_soc(tmp_path):
    d = _copy_encoder_bundle(str(tmp_path / "b"))
    with pytest.raises(BundleError, match=r"no RKNN encoder models for rk3576 \(it has: none\).*"
                                          r"python scripts/onnx2rknn.py --bundle .* --target rk3576"):
        rknn.create_rknn_encoder(d, "merged", soc="rk3576")


def test_missing_rknnlite_message(synthetic):
    try:
        import rknnlite  # noqa: F401
        pytest.skip("rknnlite is installed here (a board): the missing-library message cannot be tested")
    except ImportError:
        pass
    with pytest.raises(RuntimeError, match=r"pip install rknn-toolkit-lite2 \(aarch64 boards only"):
        rknn.create_rknn_encoder(synthetic, "merged", soc="rk3588")


def test_init_runtime_failure_releases(synthetic, fake_lite):
    fake_lite.fail = {"init_runtime": -1}
    with pytest.raises(RuntimeError, match=r"RKNNLite.init_runtime\(core_mask=7\) failed with -1 for .*merged_2s"):
        rknn.create_rknn_encoder(synthetic, "merged", soc="rk3588", lite_class=fake_lite)
    assert all(h.calls[-1] == ("release",) for h in fake_lite.instances)


def test_load_failure(synthetic, fake_lite):
    fake_lite.fail = {"load_rknn": -1}
    with pytest.raises(RuntimeError, match=r"RKNNLite.load_rknn\(.*merged_2s.rknn\) failed with -1"):
        rknn.create_rknn_encoder(synthetic, "merged", soc="rk3588", lite_class=fake_lite)


def test_inf_output_and_failed_inference(synthetic, fake_lite):
    enc = rknn.create_rknn_encoder(synthetic, "merged", sizes=[2], soc="rk3588", lite_class=fake_lite)
    out = np.zeros((1, 26, 96), np.float32)
    out[0, 3, 5] = np.inf
    fake_lite.output_override = out
    with pytest.raises(FloatingPointError, match=r"merged_2s.rknn produced inf/nan on the NPU"):
        enc.encode(_mel(1.37))
    fake_lite.output_override = np.zeros((1, 25, 96), np.float32)
    with pytest.raises(RuntimeError, match=r"merged_2s.rknn: output shape \[1, 25, 96\], expected \[1, 26, 96\]"):
        enc.encode(_mel(1.37))


def test_detect_soc(tmp_path):
    p = tmp_path / "compatible"
    for content, soc in ((b"radxa,rock-5b\0rockchip,rk3588\0", "rk3588"), (b"xunlong,orangepi-5\0rockchip,rk3588s\0",
                                                                          "rk3588"),
                         (b"rockchip,rk3576-evb1-v10\0rockchip,rk3576\0", "rk3576")):
        p.write_bytes(content)
        assert rk_soc.detect_soc(str(p)) == soc
    p.write_bytes(b"raspberrypi,5-model-b\0brcm,bcm2712\0")
    with pytest.raises(RuntimeError, match=r"unsupported SoC \(device tree says: raspberrypi,5-model-b, brcm,bcm2712\)"):
        rk_soc.detect_soc(str(p))
    with pytest.raises(RuntimeError, match="not a Rockchip board"):
        rk_soc.detect_soc(str(tmp_path / "absent"))


def test_core_masks():
    assert rk_soc.resolve_core_mask("rk3588") == 7
    assert rk_soc.resolve_core_mask("rk3576") == 3
    assert rk_soc.resolve_core_mask("rk3588", "NPU_CORE_0") == 1
    assert rk_soc.resolve_core_mask("rk3576", 2) == 2
    with pytest.raises(ValueError, match="core mask 7 names an NPU core rk3576 does not have"):
        rk_soc.resolve_core_mask("rk3576", "0_1_2")
    with pytest.raises(ValueError, match="unknown NPU core mask 'fast'"):
        rk_soc.resolve_core_mask("rk3588", "fast")


# --- converter errors that need no toolkit -------------------------------------------------------

def test_converter_unknown_size(tmp_path, capsys):
    d = _copy_encoder_bundle(str(tmp_path / "b"))
    assert onnx2rknn.main(["--bundle", d, "--target", "rk3588", "--sizes", "7"]) == 2
    assert "sizes [7] s not in the bundle's merged graphs (it has [2, 3, 4, 5, 8] s)" in capsys.readouterr().err


@pytest.mark.parametrize("failing", ["config", "load_onnx", "build", "export_rknn"])
@pytest.mark.parametrize("sizes", ["2", "2,3"])
def test_converter_checks_every_return_code(tmp_path, monkeypatch, capsys, failing, sizes):
    d = _copy_encoder_bundle(str(tmp_path / "b"))
    monkeypatch.setattr(FailingRKNN, "failing", failing)
    monkeypatch.setattr(FailingRKNN, "log", [])
    monkeypatch.setattr(FailingRKNN, "kwargs", {})
    monkeypatch.setattr(onnx2rknn, "toolkit", lambda: FailingRKNN)
    monkeypatch.chdir(tmp_path)
    assert onnx2rknn.main(["--bundle", d, "--target", "rk3576", "--forms", "merged", "--sizes", sizes]) == 2
    err = capsys.readouterr().err
    graphs = ", ".join(f"encoder/merged_{n}s.onnx" for n in sizes.split(","))
    assert f"rknn-toolkit2 {failing} failed (returned -1) for {graphs} (rk3576)" in err
    assert FailingRKNN.log[-1] == "release"
    assert "rk" not in json.load(open(os.path.join(d, "model.json")))
    assert sorted(os.listdir(os.path.join(d, "encoder"))) == sorted(os.listdir(os.path.join(bundles.bundle()[1],
                                                                                            "encoder")))  # no temp
    assert os.getcwd() == str(tmp_path) and not os.listdir(os.path.join(d, "rknn", "rk3576"))
    assert os.listdir(tmp_path) == ["b"]  # the toolkit's scratch files went with its scratch directory
    # the toolkit contract: one shape set per size, in the manifest's input order, the largest loaded
    b = Bundle.load(d)
    shapes = {n: onnx2rknn.graph_io(v.path)[0] for n in (2, 3) for v in b.encoder_variants("merged", [n])}
    names = b.manifest["encoder"]["inputs"]["merged"]
    want = [[shapes[int(n)][k] for k in names] for n in sizes.split(",")]
    assert FailingRKNN.kwargs["config"].get("dynamic_input") == (want if len(want) > 1 else None)
    if failing != "config":
        assert FailingRKNN.kwargs["load_onnx"]["inputs"] == names
        assert FailingRKNN.kwargs["load_onnx"]["input_size_list"] == want[-1]


def test_converter_without_toolkit(tmp_path, capsys):
    try:
        import rknn.api  # noqa: F401
        pytest.skip("rknn-toolkit2 imports in this venv")
    except ImportError:
        pass
    d = _copy_encoder_bundle(str(tmp_path / "b"))
    assert onnx2rknn.main(["--bundle", d, "--target", "rk3588", "--sizes", "2"]) == 2
    assert "run this script with .venv-rknn/bin/python" in capsys.readouterr().err

