"""python/transcribe.py as a user runs it: output formats and one-line errors with non-zero exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

import bundles

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(ROOT, "python", "transcribe.py")
CLIP = os.path.join(ROOT, "audio", "zh_1.wav")


def run(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, CLI, *args], capture_output=True, text=True, timeout=300, env=e)


@pytest.fixture(scope="module")
def bundle_dir():
    pytest.importorskip("torch", reason="random checkpoints are built with the official code (torch)")
    return bundles.bundle("tiny-b", "float32")[1]


def test_json_output(bundle_dir):
    p = run("--audio", CLIP, "--model", bundle_dir, "--format", "json", "--max-new-tokens", "5", "--language", "zh")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert {"text", "language", "language_code", "truncated", "stats"} <= set(d)
    assert d["language"] == "Chinese" and d["language_code"] == "zh" and d["truncated"] is True
    assert d["stats"]["audio_seconds"] == pytest.approx(1.38, abs=0.01)
    assert "truncated" in p.stderr


def test_text_output_and_model_env(bundle_dir):
    p = run("--audio", CLIP, "--max-new-tokens", "3", "--backend", "onnx", "-v", env={"QWEN3ASR_MODEL": bundle_dir})
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == 1
    assert f"loaded {bundle_dir} " in p.stderr  # the model named by the environment, not models/default


def test_stream_flag(bundle_dir):
    p = run("--audio", CLIP, "--model", bundle_dir, "--max-new-tokens", "6", "--language", "en", "--stream")
    assert p.returncode == 0, p.stderr
    q = run("--audio", CLIP, "--model", bundle_dir, "--max-new-tokens", "6", "--language", "en")
    assert p.stdout.strip() == q.stdout.strip()


def _one_line_error(p, pattern):
    assert p.returncode != 0
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert "Traceback" not in p.stderr
    import re

    assert re.search(pattern, lines[0]), lines[0]


def test_missing_audio(bundle_dir):
    _one_line_error(run("--audio", "/nonexistent/x.wav", "--model", bundle_dir), "audio file not found")


def test_not_audio(bundle_dir, tmp_path):
    bad = tmp_path / "notes.wav"
    bad.write_text("hello\n" * 100)
    _one_line_error(run("--audio", str(bad), "--model", bundle_dir), "cannot decode .* as audio")


def test_nan_audio(bundle_dir, tmp_path):
    x = np.zeros(16000, np.float32)
    x[5] = np.nan
    path = tmp_path / "nan.wav"
    sf.write(path, x, 16000, subtype="FLOAT")
    _one_line_error(run("--audio", str(path), "--model", bundle_dir), "NaN or infinite")


def test_missing_model(tmp_path):
    _one_line_error(run("--audio", CLIP, "--model", str(tmp_path / "none")), "model directory not found")


def test_bad_language(bundle_dir):
    _one_line_error(run("--audio", CLIP, "--model", bundle_dir, "--language", "Elvish"), "unsupported language")


def test_bad_budget(bundle_dir):
    _one_line_error(run("--audio", CLIP, "--model", bundle_dir, "--max-new-tokens", "0"), "max_new_tokens")


def test_rk_backend_off_board_is_explained(bundle_dir):
    p = run("--audio", CLIP, "--model", bundle_dir, "--backend", "rk")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert p.stderr.startswith("error: ")
