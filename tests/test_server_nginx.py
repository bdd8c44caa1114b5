"""Scale-out: two server processes behind Debian's nginx on loopback (the config of
docs/serving.md). Requests spread over both; when one is stopped (SIGTERM) mid-run no request
is lost: its in-flight ones finish, new ones go to the other (proxy_next_upstream)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request

import pytest

openai = pytest.importorskip("openai", reason="the openai client is needed (the dev extra: pip install -e '.[dev]')")
websockets = pytest.importorskip("websockets", reason="the websockets client is needed (the dev extra: pip install -e '.[dev]')")
pytest.importorskip("uvicorn", reason="the server extra is needed (pip install '.[server]')")

from server_proc import AUDIO, ServerProcess, expected, free_port  # noqa: E402
from qwen3asr_tools.bench_server import load_clip  # noqa: E402

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
pytestmark = [pytest.mark.skipif(not os.path.exists(NGINX),
                                 reason="Debian's nginx is not installed (scripts/install_system_deps.sh)"),
              pytest.mark.slow]  # nginx and two server processes

# The upstream part is what docs/serving.md shows; the rest keeps nginx inside the tmp dir.
CONF = """
{user}
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 512; }}
http {{
    access_log {tmp}/access.log;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;

    upstream qwen3asr {{
        server 127.0.0.1:{a} max_fails=1 fail_timeout=5s;
        server 127.0.0.1:{b} max_fails=1 fail_timeout=5s;
    }}
    map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 100m;
        client_body_buffer_size 16m;      # keep uploads in memory: a retry resends them
        location / {{
            proxy_pass http://qwen3asr;
            proxy_http_version 1.1;
            proxy_set_header Host $host;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_read_timeout 600s;
            proxy_buffering off;          # SSE deltas and live captions as they come
            proxy_max_temp_file_size 0;
            # a refused connection, or a 503 (busy, loading, shutting down), is tried on the next
            # server; a transcription is safe to repeat, so POSTs are retried too
            proxy_next_upstream error timeout http_503 non_idempotent;
            proxy_next_upstream_tries 2;
        }}
    }}
}}
"""


@pytest.fixture()
def cluster(tmp_path):
    a = ServerProcess(log_path=str(tmp_path / "a.log"))
    b = ServerProcess(log_path=str(tmp_path / "b.log"))
    port = free_port()
    conf = tmp_path / "nginx.conf"
    conf.write_text(CONF.format(tmp=tmp_path, a=a.port, b=b.port, port=port,
                                user="user root;" if os.geteuid() == 0 else ""))
    nginx = None
    try:
        a.wait_ready()
        b.wait_ready()
        nginx = subprocess.Popen([NGINX, "-c", str(conf), "-p", str(tmp_path)], stdout=subprocess.DEVNULL,
                                 stderr=open(tmp_path / "nginx.out", "w"))
        url = f"http://127.0.0.1:{port}"
        end = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=5)
                break
            except OSError:
                if nginx.poll() is not None or time.monotonic() > end:
                    raise RuntimeError(f"nginx did not start: {(tmp_path / 'nginx.out').read_text()}"
                                       f"{(tmp_path / 'error.log').read_text() if (tmp_path / 'error.log').exists() else ''}")
                time.sleep(0.1)
        yield url, a, b
    finally:
        if nginx is not None:
            nginx.terminate()
            nginx.wait(30)
        a.stop()
        b.stop()


def _upload(url, name):
    client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)
    with open(os.path.join(AUDIO, name), "rb") as f:
        return client.audio.transcriptions.create(model="qwen3-asr", file=f).text


def test_requests_spread_and_none_lost_when_one_server_stops(cluster):
    url, a, b = cluster
    clips = ["en_1.wav", "zh_1.wav", "en_2.wav", "zh_3.wav", "long_mixed.wav"]
    jobs = [clips[i % len(clips)] for i in range(60)]
    results = {}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = {}
        for i, name in enumerate(jobs):
            futures[pool.submit(_upload, url, name)] = (i, name)
            if i == 20:
                # both servers have answered by now; stop one while requests are in flight
                end = time.monotonic() + 120
                while not all(s.health()[1].get("admitted", 0) > 0 for s in (a, b)):
                    assert time.monotonic() < end, "nginx sent every request to one server"
                    time.sleep(0.05)
                spread = (a.health()[1]["admitted"], b.health()[1]["admitted"])
                a.proc.send_signal(signal.SIGTERM)
            time.sleep(0.02)
        for f in concurrent.futures.as_completed(futures):
            results[futures[f]] = f.result()  # raises if a request was lost
    assert a.proc.wait(60) == 0
    assert len(results) == len(jobs)
    long_text = _upload(url, "long_mixed.wav")
    for (i, name), text in results.items():
        assert text == (long_text if name == "long_mixed.wav" else expected(name)), (i, name)
    assert min(spread) > 0
    assert b.health()[1]["admitted"] > spread[1]  # b took over after a stopped


def test_live_stream_through_nginx(cluster):
    url, a, b = cluster
    pcm, sr = load_clip("en_3.wav")

    async def go():
        async with websockets.connect(url.replace("http", "ws") + "/v1/stream") as ws:
            await ws.send(json.dumps({"type": "start", "chunk_size": 2.0}))
            assert json.loads(await ws.recv())["type"] == "ready"
            for i in range(0, len(pcm), 1600):
                await ws.send(pcm[i:i + 1600].tobytes())
            await ws.send(json.dumps({"type": "stop"}))
            return [json.loads(m) async for m in ws]

    msgs = asyncio.run(go())
    assert msgs[-1]["type"] == "final" and msgs[-1]["text"] == expected("en_3.wav")
