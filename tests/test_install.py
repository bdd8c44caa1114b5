"""`pip install .` into a fresh venv, as a user installs it: the console scripts work, the
Silero VAD model comes with the package, and no model given is a clear error."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    d = tmp_path_factory.mktemp("install") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(d)], check=True, timeout=120)
    r = subprocess.run([str(d / "bin" / "python"), "-m", "pip", "install", "-q", ROOT], capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return d


def test_console_scripts_transcribe_a_bundled_clip(venv, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QWEN3ASR_MODEL")}
    out = subprocess.run([str(venv / "bin" / "qwen3asr-transcribe"), "--audio", os.path.join(ROOT, "audio", "en_1.wav"),
                          "--model", os.path.join(ROOT, "models", "default")], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "open the back door"
    for script in ("qwen3asr-mic", "qwen3asr-serve", "qwen3asr-wyoming"):
        assert (venv / "bin" / script).exists(), script
    # the installed copy runs, not the checkout, and it carries the VAD model and the page
    code = ("import qwen3asr, qwen3asr.vad as v, os; print(qwen3asr.__file__); print(v.find_model()); "
            "print(os.path.isfile(os.path.join(os.path.dirname(qwen3asr.__file__), 'server', 'static', "
            "'index.html')))")
    lines = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, cwd=tmp_path,
                           env=env, timeout=120, check=True).stdout.split()
    assert lines[0].startswith(str(venv)) and lines[1].startswith(str(venv)) and lines[2] == "True"


def test_no_model_given_is_a_clear_error_not_a_site_packages_path(venv, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QWEN3ASR_MODEL")}
    out = subprocess.run([str(venv / "bin" / "qwen3asr-transcribe"), "--audio",
                          os.path.join(ROOT, "audio", "en_1.wav")], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=300)
    assert out.returncode == 2
    assert "no model given: pass a model directory (--model DIR" in out.stderr and "QWEN3ASR_MODEL" in out.stderr
    assert "site-packages" not in out.stderr and "Traceback" not in out.stderr
