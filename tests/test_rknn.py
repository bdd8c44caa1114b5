"""RKNN encoder path: conversion + simulator verification (rknn-toolkit2 in .venv-rknn) and the
board runner's checks and call contract (with a test double for rknnlite, which only runs on boards)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

import bundles
from qwen3asr_tools import onnx2rknn
from qwen3asr.audio import prepare_audio
from qwen3asr.bundle import Bundle, BundleError
from qwen3asr.encoder import AudioEncoder, tokens_for_frames
from qwen3asr.mel import log_mel
from qwen3asr.backends.onnx import OnnxEncoderRunner
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
    """A bundle whose merged + split 2/3 s graphs were converted for both SoCs with --verify."""
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
    _, reports = converted
    res = reports[target]
    graphs = {r["graph"] for r in res}
    assert graphs == {"merged_2s", "merged_3s", "frontend", "backend_2s", "backend_3s"}
    assert len(res) == len(graphs) * len(LENGTHS)
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
        assert sorted((e["part"], e["n_chunks"]) for e in entries) == [
            ("backend", 2), ("backend", 3), ("frontend", 1), ("merged", 2), ("merged", 3)]
        for e in entries:
            path = os.path.join(d, e["file"])
            assert e["file"].startswith(f"rknn/{target}/")
            with open(path, "rb") as f:
                assert e["sha256"] == hashlib.sha256(f.read()).hexdigest()
            assert b.manifest["files"][e["file"]] == e["sha256"]
            with open(path, "rb") as f:
                assert f.read(4) == b"RKNN"
            meta = rknn_meta.read_rknn_metadata(path)
            assert (meta["form"], meta["part"], meta["n_chunks"], meta["target"]) == (
                e["form"], e["part"], e["n_chunks"], target)
            assert meta["encoder_sha256"] == digest
            assert meta["inputs"] == b.manifest["encoder"]["inputs"][e["part"]]
            assert meta["tokens"] == 13 * e["n_chunks"]
            assert meta["exporter_version"] == b.manifest["exporter_version"]
            assert meta["toolkit"] == "2.5.0"


@pytest.mark.slow  # rknn-toolkit2 converts and simulates
def test_an_aligner_bundles_encoder_converts_unchanged(tmp_path):
    """onnx2rknn on a forced-aligner bundle (its own encoder weights and widths, the same graph
    family): the simulator matches ONNX Runtime, the manifest keeps the aligner section, and the
    board runner reads the files (docs/board.md, "Word timestamps on the board")."""
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
           "--forms", "merged,split", "--sizes", "2", "--verify", AUDIO, "--verify-lengths", ",".join(map(str, LENGTHS)),
           "--verify-start", str(START), "--report", rep]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python")))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "verified 6 comparisons for rk3576" in r.stdout
    with open(rep) as f:
        res = json.load(f)
    assert {x["graph"] for x in res} == {"merged_2s", "frontend", "backend_2s"}
    assert all(x["tokens_rknn"] == x["tokens_onnx"] and x["cosine"] >= 0.999 for x in res), res
    b = Bundle.load(d)
    assert b.kind == "aligner" and b.aligner == json.load(open(os.path.join(src, "model.json")))["aligner"]
    assert sorted((e["part"], e["n_chunks"]) for e in b.rknn_entries("rk3576")) == [
        ("backend", 2), ("frontend", 1), ("merged", 2)]
    RecordingRKNNLite.reset()
    try:
        for form in ("merged", "split"):
            enc = rknn.create_rknn_encoder(b, form, soc="rk3576", lite_class=RecordingRKNNLite)
            ref = AudioEncoder(OnnxEncoderRunner(b.frontend_path()), b.encoder_variants(form, [2]),
                               b.manifest["encoder"]["window_tokens"], int(b.audio_config["num_mel_bins"]), form)
            mel = _mel(3.0)  # longer than the 2 s graph: chained
            got, want = enc.encode(mel), ref.encode(mel)
            assert got.shape == want.shape == (tokens_for_frames(mel.shape[1]), b.audio_config["output_dim"])
            np.testing.assert_array_equal(got, want)
            enc.close()
    finally:
        RecordingRKNNLite.reset()


# --- the board runner, with a test double for rknnlite (doubles.rknnlite) -------------------------

@pytest.fixture()
def synthetic(tmp_path):
    """A bundle with stand-in .rknn files (real metadata, no NPU code) for rk3588 and rk3576."""
    d = _copy_encoder_bundle(str(tmp_path / "bundle"))
    b = Bundle.load(d)
    for target in TARGETS:
        entries = []
        for v in onnx2rknn.select_graphs(b, ("merged", "split"), list(SIZES)):
            shapes, out_shape = onnx2rknn.graph_io(os.path.join(d, v["file"]))
            inputs = b.manifest["encoder"]["inputs"][v["part"]]
            meta = {"meta_version": rknn_meta.META_VERSION, "form": v["form"], "part": v["part"],
                    "n_chunks": v["n_chunks"], "target": target, "inputs": inputs,
                    "input_shapes": {k: shapes[k] for k in inputs}, "output_shape": out_shape,
                    "encoder_sha256": rknn_meta.encoder_digest(b.manifest)}
            rel = f"rknn/{target}/{onnx2rknn.graph_name(v)}.rknn"
            write_rknn_file(os.path.join(d, rel), meta)
            with open(os.path.join(d, rel), "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            entries.append({"form": v["form"], "part": v["part"], "n_chunks": v["n_chunks"], "file": rel,
                            "sha256": digest})
        onnx2rknn.record(d, target, entries)
    return d


@pytest.fixture()
def fake_lite():
    RecordingRKNNLite.reset()
    yield RecordingRKNNLite
    RecordingRKNNLite.reset()


def _mel(seconds: float) -> np.ndarray:
    pcm = prepare_audio(AUDIO)
    return log_mel(pcm[int(START * 16000):int((START + seconds) * 16000)], 128)


def _check_runner_against_onnx(bundle_dir: str, fake_lite, target: str, form: str) -> None:
    b = Bundle.load(bundle_dir)
    enc = rknn.create_rknn_encoder(b, form, soc=target, lite_class=fake_lite)
    ref = AudioEncoder(OnnxEncoderRunner(b.frontend_path()), b.encoder_variants(form, list(SIZES)),
                       b.manifest["encoder"]["window_tokens"], 128, form)
    for seconds in (1.37, 3.0, 5.0):  # 5 s is longer than the largest variant: chained
        mel = _mel(seconds)
        got, want = enc.encode(mel), ref.encode(mel)
        assert got.shape == want.shape == (tokens_for_frames(mel.shape[1]), 96)
        np.testing.assert_array_equal(got, want)
    n_models = len(SIZES) + (1 if form == "split" else 0)
    assert len(fake_lite.instances) == n_models
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


@pytest.mark.slow
@pytest.mark.parametrize("form", ["merged", "split"])
def test_runner_contract_converted_files(converted, fake_lite, form):
    _check_runner_against_onnx(converted[0], fake_lite, "rk3576", form)


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
def test_converter_checks_every_return_code(tmp_path, monkeypatch, capsys, failing):
    d = _copy_encoder_bundle(str(tmp_path / "b"))
    monkeypatch.setattr(FailingRKNN, "failing", failing)
    monkeypatch.setattr(FailingRKNN, "log", [])
    monkeypatch.setattr(onnx2rknn, "toolkit", lambda: FailingRKNN)
    assert onnx2rknn.main(["--bundle", d, "--target", "rk3576", "--forms", "merged", "--sizes", "2"]) == 2
    err = capsys.readouterr().err
    assert f"rknn-toolkit2 {failing} failed (returned -1) for encoder/merged_2s.onnx (rk3576)" in err
    assert FailingRKNN.log[-1] == "release"
    assert "rk" not in json.load(open(os.path.join(d, "model.json")))


def test_converter_without_toolkit(tmp_path, capsys):
    try:
        import rknn.api  # noqa: F401
        pytest.skip("rknn-toolkit2 imports in this venv")
    except ImportError:
        pass
    d = _copy_encoder_bundle(str(tmp_path / "b"))
    assert onnx2rknn.main(["--bundle", d, "--target", "rk3588", "--sizes", "2"]) == 2
    assert "run this script with .venv-rknn/bin/python" in capsys.readouterr().err

