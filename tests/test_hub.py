"""Models by name (qwen3asr.hub, qwen3asr-models) against a loopback stand-in of the hub's file
API (doubles.hub) driven by the real huggingface_hub client: the official layout converted once
and reused offline, published bundles downloaded as they are, and every failure a user meets as
one line with nothing half-written left in the cache."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

pytest.importorskip("huggingface_hub", reason="models by name need huggingface_hub (a runtime dependency)")

import bundles  # noqa: E402
import fixtures  # noqa: E402
from doubles import rkllm_toolkit  # noqa: E402
from doubles.hub import StandInHub  # noqa: E402
from doubles.rknnlite import add_rk_section  # noqa: E402
from qwen3asr.bundle import sha256_file, update_manifest  # noqa: E402
from qwen3asr.hub import cache, resolve  # noqa: E402
from qwen3asr.hub.names import HubError, is_directory, parse  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIP = os.path.join(ROOT, "audio", "en_1.wav")
ASR, ALIGNER = "Qwen/Qwen3-ASR-0.6B", "Qwen/Qwen3-ForcedAligner-0.6B"
BUNDLE_REPO, GATED, NOT_ASR = "someone/qwen3-asr-0.6b-rk3588", "someone/gated-asr", "someone/whisper-tiny"
TOKEN = "hf_stand_in_token"


def _published_bundle(dst: str) -> str:
    """The tiny-a bundle as someone would publish it after converting it for rk3588: stand-in
    .rknn and .rkllm files (doubles.rknnlite.add_rk_section) listed in model.json with their
    SHA-256 (rk3576 has none)."""
    _, src = bundles.bundle("tiny-a")
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".complete"))
    add_rk_section(dst, "rk3588")

    def mutate(m):
        for rel in os.listdir(os.path.join(dst, "rk")):
            m["files"][f"rk/{rel}"] = sha256_file(os.path.join(dst, "rk", rel))

    update_manifest(dst, mutate)
    return dst


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    not_asr = tmp_path_factory.mktemp("whisper")
    with open(not_asr / "config.json", "w") as f:
        json.dump({"model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"]}, f)
    (not_asr / "model.safetensors").write_bytes(b"\0" * 4096)
    published = _published_bundle(str(tmp_path_factory.mktemp("published") / "b"))
    with StandInHub() as h:
        h.add(ASR, fixtures.checkpoint("tiny-a", dtype="bfloat16"))
        h.add(ALIGNER, fixtures.aligner_checkpoint("fa-tiny-a"))
        h.add(BUNDLE_REPO, published)
        h.add(GATED, published, gated_token=TOKEN)
        h.add(NOT_ASR, str(not_asr))
        yield h


@pytest.fixture
def env(hub, tmp_path, monkeypatch):
    """A fresh huggingface_hub cache and qwen3asr cache, the client pointed at the stand-in, and
    no socket allowed outside loopback."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "QWEN3ASR_SOC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("QWEN3ASR_CACHE", str(tmp_path / "q"))
    real_connect = socket.socket.connect

    def connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"a test tried to reach {address}")
        return real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    hub.requests.clear()
    hub.cut.clear()
    hub.corrupt.clear()
    return tmp_path


def _nothing_half_written(tmp_path) -> None:
    """No cache entry and no staging directory under the qwen3asr cache."""
    assert cache.entries() == []
    models = tmp_path / "q" / "models"
    left = [p for p in models.rglob(".tmp-*")] if models.exists() else []
    assert left == []


def _one_line(exc_info) -> str:
    msg = str(exc_info.value)
    assert "\n" not in msg
    return msg


# ------------------------------------------------------------------ names

def test_names_ids_aliases_and_directories(tmp_path):
    assert parse("0.6b").repo == ASR and parse("1.7B").repo == "Qwen/Qwen3-ASR-1.7B"
    assert parse("aligner@v1") == parse(f"{ALIGNER}@v1")
    assert str(parse("Org/Name@abc")) == "Org/Name@abc" and parse("Org/Name").revision == "main"
    assert is_directory(str(tmp_path)) and is_directory("./x") and is_directory("/no/such") and is_directory("a/b/c")
    assert not is_directory("Org/Name")
    with pytest.raises(HubError) as e:
        parse("whisper-large")
    assert "unknown model 'whisper-large'" in _one_line(e) and "0.6b, 1.7b, aligner" in str(e.value)


def test_unknown_name_on_the_cli(env):
    r = _models("pull", "nosuch")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("error: unknown model 'nosuch'") and r.stderr.count("\n") == 1


# ------------------------------------------------------------------ the official checkpoint

def test_id_converts_once_gives_the_hand_converted_text_and_then_works_offline(env, hub, monkeypatch):
    from qwen3asr import Qwen3ASREngine

    _, by_hand = bundles.bundle("tiny-a", decoders=("fp32", "int8"))
    with Qwen3ASREngine(by_hand, backend="onnx", decoder_dtype="fp32") as engine:
        want = engine.transcribe(CLIP).text
    with Qwen3ASREngine(ASR, backend="onnx", decoder_dtype="fp32") as engine:
        assert engine.transcribe(CLIP).text == want
        path = engine.bundle.path
    assert path.startswith(str(env / "q")) and engine.bundle.manifest["source"]["repo"] == ASR
    with open(os.path.join(by_hand, "model.json")) as f:
        assert engine.bundle.manifest["files"] == json.load(f)["files"]  # byte for byte the same bundle
    assert len(hub.calls("/api/models/")) == 1
    n = len(hub.requests)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: any request would fail
    with Qwen3ASREngine("0.6b", backend="onnx", decoder_dtype="fp32") as engine:
        assert engine.bundle.path == path and engine.transcribe(CLIP).text == want
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve.resolve_model("Qwen/Qwen3-ASR-0.6B@main") == path
    assert len(hub.requests) == n
    [entry] = cache.entries()
    assert entry.source == "converted" and entry.variant == f"x{resolve.exporter_version()}-default"
    assert cache.verify_entry(entry) == []


def test_aligner_by_name_and_a_kind_mix_up(env):
    from qwen3asr.aligner.segments import load_aligner
    from qwen3asr.backends import BackendOptions

    aligner = load_aligner("aligner", "onnx", BackendOptions())
    assert aligner is not None
    assert cache.entries()[0].kind == "aligner"
    with pytest.raises(HubError) as e:
        resolve.resolve_model("aligner", "asr")
    assert "is a forced aligner" in _one_line(e) and "--aligner" in str(e.value)


def test_two_processes_convert_once(env, hub):
    code = "from qwen3asr.hub import resolve_model; print(resolve_model('0.6b'))"
    e = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert outs[0][0] == outs[1][0]
    weights = [r for r in hub.requests if r[0] == "GET" and r[1].startswith("/cdn/")]
    assert len([r for r in weights if r[2] is None]) == 1  # one download of the weights
    assert len(cache.entries()) == 1


def test_conversion_cut_off_leaves_nothing_complete(env, monkeypatch):
    from qwen3asr_tools import export_onnx

    real = export_onnx.export

    def export_then_disk_full(ckpt_dir, out_dir, **kw):
        real(ckpt_dir, out_dir, **kw)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export_onnx, "export", export_then_disk_full)
    with pytest.raises(HubError) as e:
        resolve.resolve_model("0.6b")
    assert "disk filled up while converting" in _one_line(e) and "nothing was cached" in str(e.value)
    _nothing_half_written(env)
    # a run killed half-way (no exception handler ran) leaves a .tmp- directory: never loaded, removed next time
    stale = env / "q" / "models" / "Qwen--Qwen3-ASR-0.6B" / f".tmp-{resolve.converted_variant('default')}-dead"
    stale.mkdir(parents=True)
    (stale / "model.json").write_text("{}")
    monkeypatch.setattr(export_onnx, "export", real)
    assert resolve.resolve_model("0.6b") != str(stale) and not stale.exists()


def test_disk_check_runs_before_any_weight_is_fetched(env, hub, monkeypatch):
    monkeypatch.setattr(cache.shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10**9, 10**9 - 10**6, 10**6))
    with pytest.raises(HubError) as e:
        resolve.resolve_model("0.6b")
    assert _one_line(e).startswith("not enough disk for downloading Qwen/Qwen3-ASR-0.6B: it needs about")
    assert "QWEN3ASR_CACHE" in str(e.value)
    assert not any(r[1].startswith("/cdn/") for r in hub.requests)
    _nothing_half_written(env)


def test_not_an_asr_checkpoint_is_refused_before_its_weights(env, hub):
    with pytest.raises(HubError) as e:
        resolve.resolve_model(NOT_ASR)
    assert "is not a Qwen3-ASR or Qwen3-ForcedAligner checkpoint (config.json model_type 'whisper')" in _one_line(e)
    assert not any("safetensors" in r[1] or r[1].startswith("/cdn/") for r in hub.requests)
    _nothing_half_written(env)


def test_without_onnx_the_message_names_the_convert_extra(env, monkeypatch):
    import qwen3asr_tools

    monkeypatch.setitem(sys.modules, "onnx", None)  # as if not installed: the import fails
    for name in ("export_onnx", "onnx_graphs"):
        monkeypatch.delitem(sys.modules, f"qwen3asr_tools.{name}", raising=False)
        monkeypatch.delattr(qwen3asr_tools, name, raising=False)
    with pytest.raises(HubError) as e:
        resolve.resolve_model("0.6b")
    assert "pip install 'qwen3asr-rk[convert]'" in _one_line(e)
    _nothing_half_written(env)


# ------------------------------------------------------------------ network failures

def test_repo_not_found(env):
    with pytest.raises(HubError) as e:
        resolve.resolve_model("Qwen/Qwen3-ASR-9B")
    assert _one_line(e).startswith("no model repo Qwen/Qwen3-ASR-9B on http://127.0.0.1:")
    with pytest.raises(HubError) as e:
        resolve.resolve_model(f"{ASR}@v9")
    assert "has no revision 'v9'" in _one_line(e)


def test_gated_repo_needs_a_token(env, monkeypatch):
    with pytest.raises(HubError) as e:
        resolve.resolve_model(GATED, backend="onnx")
    assert f"{GATED} is gated" in _one_line(e) and "HF_TOKEN" in str(e.value)
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(HubError) as e:
        resolve.resolve_model(GATED, backend="onnx")
    assert "is gated" in _one_line(e)
    _nothing_half_written(env)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert os.path.isfile(os.path.join(resolve.resolve_model(GATED, backend="onnx"), "model.json"))


def test_network_down_and_offline_without_a_cache(env, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: connections are refused
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(HubError) as e:
        resolve.resolve_model("0.6b")
    assert _one_line(e).startswith(f"cannot reach http://127.0.0.1:{port} for Qwen/Qwen3-ASR-0.6B")
    assert "HF_ENDPOINT" in str(e.value)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError) as e:
        resolve.resolve_model("0.6b")
    assert "HF_HUB_OFFLINE is set: run `qwen3asr-models pull Qwen/Qwen3-ASR-0.6B` once" in _one_line(e)
    _nothing_half_written(env)


def test_a_cut_download_is_resumed(env, hub):
    hub.cut["model.safetensors"] = 1
    resolve.resolve_model("0.6b")
    ranges = [r[2] for r in hub.requests if r[1].startswith("/cdn/") and r[2]]
    assert len(ranges) == 1 and ranges[0].startswith("bytes=") and ranges[0] != "bytes=0-"


def test_a_download_cut_every_time_stops_then_resumes_next_run(env, hub):
    from qwen3asr.hub import fetch

    hub.cut["model.safetensors"] = fetch.RESUME_TRIES
    with pytest.raises(HubError) as e:
        resolve.resolve_model("0.6b")
    assert "was cut off 3 times" in _one_line(e) and "it resumes where it stopped" in str(e.value)
    _nothing_half_written(env)
    hub.requests.clear()
    resolve.resolve_model("0.6b")
    assert [r[2] for r in hub.requests if r[1].startswith("/cdn/")][0].startswith("bytes=")


# ------------------------------------------------------------------ published bundles

def test_published_bundle_downloaded_as_is_with_only_this_socs_files(env, hub):
    path = resolve.resolve_model(BUNDLE_REPO, backend="onnx")  # the CPU: no Rockchip file
    assert not os.path.exists(os.path.join(path, "rk"))
    assert not any("rknn" in r[1] or "rkllm" in r[1] for r in hub.requests)
    board = resolve.resolve_model(BUNDLE_REPO, soc="rk3588")
    assert os.path.isfile(os.path.join(board, "rk", "decoder_rk3588_w8a8.rkllm"))
    assert {e.variant for e in cache.entries()} == {"hub-cpu", "hub-rk3588"}
    from qwen3asr_tools.board_convert import check_board_bundle

    check_board_bundle(board, "rk3588", rkllm=True)


def test_published_bundle_for_another_soc(env):
    with pytest.raises(HubError) as e:
        resolve.resolve_model(BUNDLE_REPO, soc="rk3576")
    msg = _one_line(e)
    assert "holds Rockchip models for rk3588, not for this rk3576" in msg and "--target rk3576" in msg
    _nothing_half_written(env)


def test_hash_mismatch_is_fetched_again_once_then_refused(env, hub):
    hub.corrupt["encoder/weights.bin"] = 1
    path = resolve.resolve_model(BUNDLE_REPO, backend="onnx")
    assert len([r for r in hub.requests if "encoder/weights.bin" in r[1] or r[1].startswith("/cdn/")]) >= 2
    assert cache.verify_entry(cache.entries()[0]) == [] and os.path.isdir(path)
    cache.remove(cache.entries()[0])
    shutil.rmtree(env / "hf")
    hub.corrupt["encoder/weights.bin"] = 2
    with pytest.raises(HubError) as e:
        resolve.resolve_model(BUNDLE_REPO, backend="onnx")
    assert "encoder/weights.bin of someone/qwen3-asr-0.6b-rk3588 differs from its SHA-256 twice" in _one_line(e)
    _nothing_half_written(env)


# ------------------------------------------------------------------ qwen3asr-models

def _models(*args, env=None):
    e = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), **(env or {}))
    return subprocess.run([sys.executable, "-m", "qwen3asr.cli.models", *args], capture_output=True, text=True, env=e)


def test_models_command_list_verify_rm(env, hub):
    r = _models("list", "--known")
    assert r.returncode == 0 and "Qwen/Qwen3-ForcedAligner-0.6B" in r.stdout
    assert "no models in" in _models("list").stdout
    r = _models("-q", "pull", BUNDLE_REPO)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    path = r.stdout.strip()
    r = _models("list")
    assert BUNDLE_REPO in r.stdout and "hub" in r.stdout and path in r.stdout
    assert _models("verify").returncode == 0
    with open(os.path.join(path, "embed_tokens.npy"), "r+b") as f:  # damage one byte, same size
        f.seek(200)
        b = f.read(1)
        f.seek(200)
        f.write(bytes([b[0] ^ 1]))
    r = _models("verify", BUNDLE_REPO)
    assert r.returncode == 1 and "BAD" in r.stdout and "embed_tokens.npy" in r.stdout
    r = _models("rm", BUNDLE_REPO)
    assert r.returncode == 0 and not os.path.exists(path)
    r = _models("verify", BUNDLE_REPO)
    assert r.returncode == 2 and r.stderr.startswith("error: no cached bundle of") and r.stderr.count("\n") == 1


# ------------------------------------------------------------------ the board conversion

def test_board_convert_without_toolkits_reports_them(env, monkeypatch, tmp_path):
    from qwen3asr_tools import board_convert as board

    monkeypatch.setattr(board, "rknn_python", lambda given=None: None)
    monkeypatch.delenv(board.RKLLM_PYTHON_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "rkllm", None)
    result = board.convert_for_board(["0.6b"], "rk3588", str(tmp_path / "out"))
    assert len(result.missing) == 2
    assert "rknn-toolkit2" in result.missing[0] and "setup_rknn_env.sh" in result.missing[0]
    assert "rkllm-toolkit is not installed" in result.missing[1] and "github.com/airockchip/rknn-llm" in result.missing[1]
    assert "qwen3asr_tools.export_rkllm --checkpoint" in result.missing[1]
    assert os.path.isfile(os.path.join(result.models[0].path, "model.json")) and os.path.isfile(result.tarball)
    assert not os.path.exists(result.models[0].path + ".tmp")


def test_board_convert_with_the_rkllm_toolkit(env, monkeypatch, tmp_path):
    from qwen3asr_tools import board_convert as board

    fake = rkllm_toolkit.install(monkeypatch)
    monkeypatch.setattr(board, "rknn_python", lambda given=None: None)
    result = board.convert_for_board(["0.6b"], "rk3588", str(tmp_path / "out"), tarball=False)
    assert len(result.missing) == 1 and "rknn" in result.missing[0]
    [m] = result.models
    assert m.rkllm and [c[0] for c in fake.calls] == ["load_huggingface", "build", "export_rkllm"]
    with open(os.path.join(m.path, "model.json")) as f:
        assert json.load(f)["rk"]["rkllm"]["rk3588"]["file"] == "rk/decoder_rk3588_w8a8.rkllm"
    # the cached CPU bundle is untouched by the board files (hard links, model.json replaced)
    [entry] = cache.entries()
    assert cache.verify_entry(entry) == [] and not os.path.exists(os.path.join(entry.path, "rk"))


@pytest.mark.slow
def test_board_convert_with_rknn_toolkit2(env, tmp_path):
    from qwen3asr_tools import board_convert as board

    if board.rknn_python() is None:
        pytest.skip("no rknn-toolkit2 venv: bash scripts/setup_rknn_env.sh (or QWEN3ASR_RKNN_PYTHON)")
    r = _models("-q", "convert", "0.6b", "--target", "rk3588", "--out", str(tmp_path / "board"),
                "--rknn-args", "--forms merged --sizes 2 --shapes fixed")
    assert r.returncode == 3, r.stderr  # RKLLM missing here: reported, not faked
    assert "rkllm-toolkit is not installed" in r.stderr and "rknn" not in r.stderr.split("not done:")[1][:40]
    path = os.path.join(tmp_path, "board", "Qwen3-ASR-0.6B")
    board.check_board_bundle(path, "rk3588", rkllm=False)
    assert os.path.isfile(str(tmp_path / "board") + ".tar")


# ------------------------------------------------------------------ the CLI and the server

@pytest.mark.slow
def test_cli_and_server_take_an_id(env, hub, tmp_path):
    from qwen3asr import Qwen3ASREngine
    from server_proc import ServerProcess, multipart, post_raw

    _, by_hand = bundles.bundle("tiny-a", decoders=("fp32", "int8"))
    with Qwen3ASREngine(by_hand, backend="onnx") as engine:
        want = engine.transcribe(CLIP).text
    e = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    r = subprocess.run([sys.executable, "-m", "qwen3asr.cli.transcribe", "--model", ASR, "--audio", CLIP,
                        "--backend", "onnx", "--format", "json"], capture_output=True, text=True, env=e)
    assert r.returncode == 0, r.stderr
    # json: the random-weight model's text holds control characters that plain text output would mangle
    assert json.loads(r.stdout)["text"] == want and "Fetching" not in r.stderr  # no progress bar off a terminal
    n = len(hub.requests)
    log = str(tmp_path / "server.log")
    with ServerProcess("--model", "0.6b", "--log-level", "info", env={"HF_HUB_OFFLINE": "1"}, log_path=log) as srv:
        body, ctype = multipart({"model": "qwen3-asr"}, {"file": ("en_1.wav", open(CLIP, "rb").read())})
        status, _, got = post_raw(srv.url, body, ctype)
        assert status == 200 and got["text"] == want
    assert len(hub.requests) == n  # the server loaded the cached bundle offline
