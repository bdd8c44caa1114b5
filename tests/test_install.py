"""`pip install .` into a fresh venv, as a user installs it: the console scripts work, the
Silero VAD model comes with the package, and no model given is a clear error."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a fresh venv and pip install

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


@pytest.fixture(scope="module")
def server_venv(venv):
    """The same venv with the server extra added, as `pip install '.[server]'` (after the tests
    above have run on the plain install)."""
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", ROOT + "[server]"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return venv


def _non_loopback_address():
    """An address of this machine other than loopback, or None (no route to anywhere)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outgoing address
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


def test_qwen3asr_serve_listens_on_loopback_8000_by_default(server_venv, tmp_path):
    """The installed console script with no --host/--port: it answers on 127.0.0.1:8000 and not
    on the machine's other address (0.0.0.0 must be asked for), transcribes, stops on SIGTERM."""
    import signal
    import socket
    import time
    import urllib.error
    import urllib.request

    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 8000)) == 0:
            pytest.skip("something already listens on 127.0.0.1:8000")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QWEN3ASR_MODEL")}
    proc = subprocess.Popen([str(server_venv / "bin" / "qwen3asr-serve"), "--model",
                             os.path.join(ROOT, "models", "default"), "--log-level", "warning"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline, status = time.monotonic() + 180, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen("http://127.0.0.1:8000/health", timeout=5) as r:
                    status = r.status
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.2)
        assert status == 200, proc.stdout.read() if proc.poll() is not None else "no answer on 127.0.0.1:8000"
        other = _non_loopback_address()
        if other is not None:
            with socket.socket() as s:
                s.settimeout(5)
                assert s.connect_ex((other, 8000)) != 0, f"the server also listens on {other}"
        from server_proc import multipart, post_raw

        with open(os.path.join(ROOT, "audio", "en_1.wav"), "rb") as f:
            body, ctype = multipart({"model": "qwen3-asr"}, {"file": ("en_1.wav", f.read())})
        st, _, answer = post_raw("http://127.0.0.1:8000", body, ctype)
        assert st == 200 and answer["text"] == "open the back door", answer
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        log = proc.stdout.read()
        assert "Traceback" not in log, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
