"""qwen3asr-serve's start-up: /health is 503 (and requests are refused with 503) until the
model is loaded, then 200; --wyoming without its module is a clear error."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

uvicorn = pytest.importorskip("uvicorn", reason="the server extra is needed (pip install '.[server]')")
websockets = pytest.importorskip("websockets", reason="the websockets client is needed (the dev extra: pip install -e '.[dev]')")

from server_proc import AUDIO, MODEL, ROOT, free_port, read_until_closed  # noqa: E402


def _get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.loads(exc.read())


def test_health_is_503_until_the_model_is_loaded():
    from qwen3asr import Qwen3ASREngine
    from qwen3asr.server.app import create_app
    from qwen3asr.server.scheduler import Scheduler

    release = threading.Event()

    def loader():  # the real engine, once the test lets it load
        release.wait(60)
        return Qwen3ASREngine(MODEL, backend="onnx")

    app = create_app(None, Scheduler(4), loader=loader)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < end
            time.sleep(0.02)
        st, headers, body = _get(url + "/health")
        assert st == 503 and body == {"status": "loading"} and headers["retry-after"] == "1"
        import openai

        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.InternalServerError) as e, open(os.path.join(AUDIO, "en_1.wav"), "rb") as f:
            client.audio.transcriptions.create(model="qwen3-asr", file=f)
        assert e.value.status_code == 503 and e.value.body["code"] == "model_loading"

        async def ws():
            async with websockets.connect(url.replace("http", "ws") + "/v1/stream") as c:
                return await read_until_closed(c), c.close_code

        msgs, code = asyncio.run(ws())
        assert code == 1013 and msgs[-1]["code"] == "model_loading"
        release.set()
        while _get(url + "/health")[0] != 200:
            assert time.monotonic() < end + 60
            time.sleep(0.05)
        with open(os.path.join(AUDIO, "en_1.wav"), "rb") as f:
            assert client.audio.transcriptions.create(model="qwen3-asr", file=f).text == "open the back door"
    finally:
        release.set()
        server.should_exit = True
        thread.join(30)
        app.state.runtime.close()


def test_wyoming_flag_without_its_module_is_a_clear_error():
    code = ("import sys; sys.modules['qwen3asr.server.wyoming'] = None; "
            "from qwen3asr.server.cli import main; sys.exit(main(['--wyoming', 'tcp://127.0.0.1:10300', "
            "'--port', '0']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "python")})
    assert p.returncode == 2
    assert "error: --wyoming is not available" in p.stderr


def test_bad_settings_are_refused():
    p = subprocess.run([sys.executable, "-m", "qwen3asr.server", "--max-clients", "0"], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "PYTHONPATH": os.path.join(ROOT, "python")})
    assert p.returncode == 2 and "max_clients must be an integer >= 1" in p.stderr


def test_api_key_from_the_environment(tmp_path):
    from server_proc import ServerProcess

    with ServerProcess(env={"QWEN3ASR_API_KEY": "env-key"}, log_path=str(tmp_path / "server.log")) as s:
        st, _, body = _get(s.url + "/v1/models")
        assert st == 401 and body["error"]["code"] == "missing_api_key"
        req = urllib.request.Request(s.url + "/v1/models", headers={"Authorization": "Bearer env-key"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert json.loads(r.read())["data"][0]["id"] == "qwen3-asr"
