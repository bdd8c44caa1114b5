"""A real qwen3asr server process on a free loopback port, for the server tests."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "default")
AUDIO = os.path.join(ROOT, "audio")


def engine_stream_result(engine, pcm16, chunk_size: float, **options):
    """The engine's own streaming result for ``pcm16`` (int16, 16 kHz), fed in 100 ms pieces in
    this process (``options``: more create_stream settings; final passes on, as the server's
    live streams default): what a live stream of the same samples and settings must give."""
    options.setdefault("final_pass", True)
    s = engine.create_stream(chunk_size=chunk_size, **options)
    x = pcm16.astype("float32") / 32768
    for i in range(0, len(x), 1600):
        s.feed_audio(x[i:i + 1600])
    return s.finish()


def engine_stream_pieces(engine, pcm16, chunk_size: float, **options) -> str:
    """The committed pieces (``on_text``) of :func:`engine_stream_result`, joined: what a live
    stream's "committed" messages must add up to."""
    pieces = []
    engine_stream_result(engine, pcm16, chunk_size, on_text=pieces.append, **options)
    return "".join(pieces)


def engine_stream(engine, pcm16, chunk_size: float, **options) -> str:
    """The text of :func:`engine_stream_result`."""
    return engine_stream_result(engine, pcm16, chunk_size, **options).text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def expected(name: str) -> str:
    """The reference transcript of a bundled clip (audio/transcripts.json)."""
    with open(os.path.join(AUDIO, "transcripts.json"), encoding="utf-8") as f:
        return next(c["text"] for c in json.load(f)["clips"] if c["file"] == name)


def post_raw(url, body: bytes, content_type: str, key=None, chunked=False):
    """A raw POST to /v1/audio/transcriptions (http.client, no client library to forgive
    anything): (status, headers, parsed JSON or text)."""
    host, port = url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    headers = {"Content-Type": content_type}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    if chunked:
        def gen():
            for i in range(0, len(body), 65536):
                yield body[i:i + 65536]
        conn.request("POST", "/v1/audio/transcriptions", body=gen(), headers=headers, encode_chunked=True)
    else:
        conn.request("POST", "/v1/audio/transcriptions", body=body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    conn.close()
    try:
        return r.status, dict(r.headers), json.loads(data)
    except ValueError:
        return r.status, dict(r.headers), data.decode()


def multipart(fields: dict, files: dict) -> tuple[bytes, str]:
    """A multipart/form-data body and its content type: text fields, files as {field: (name, bytes)}."""
    b = "----qwen3asrtest"
    out = []
    for k, v in fields.items():
        out.append(f"--{b}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n".encode())
    for k, (name, data) in files.items():
        out.append(f"--{b}\r\nContent-Disposition: form-data; name=\"{k}\"; filename=\"{name}\"\r\n"
                   f"Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n")
    out.append(f"--{b}--\r\n".encode())
    return b"".join(out), f"multipart/form-data; boundary={b}"


class ServerProcess:
    """``python -m qwen3asr.server`` as a subprocess; ``stop()`` sends SIGTERM and waits."""

    def __init__(self, *args: str, port: int | None = None, env: dict | None = None, log_path: str | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        e = dict(os.environ)
        e["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + e.get("PYTHONPATH", "")
        e.update(env or {})
        self.log_path = log_path
        self._log = open(log_path, "w") if log_path else subprocess.DEVNULL
        cmd = [sys.executable, "-m", "qwen3asr.server", "--port", str(self.port), "--model", MODEL,
               "--backend", "onnx", "--threads", "1", "--log-level", "warning", *args]
        self.proc = subprocess.Popen(cmd, env=e, stdout=self._log, stderr=subprocess.STDOUT)

    def health(self) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def wait_ready(self, timeout: float = 120.0) -> "ServerProcess":
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log()}")
            try:
                if self.health()[0] == 200:
                    return self
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server not ready after {timeout} s: {self.log()}")

    def log(self) -> str:
        if not self.log_path:
            return "(no log)"
        with open(self.log_path) as f:
            return f.read()[-4000:]

    def rss_kb(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._log is not subprocess.DEVNULL:
            self._log.close()
        return self.proc.returncode

    def __enter__(self) -> "ServerProcess":
        return self.wait_ready()

    def __exit__(self, *exc) -> None:
        self.stop()


async def read_until_closed(ws) -> list:
    """Every JSON message a WebSocket client receives until the server closes it (a closed
    connection ends the list; the close code stays on ``ws``)."""
    import websockets

    got = []
    try:
        async for raw in ws:
            got.append(json.loads(raw))
    except websockets.ConnectionClosed:
        pass
    return got
