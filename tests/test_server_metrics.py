"""/metrics of a real server process, parsed by prometheus_client's own text parser: the
counters move by exactly the requests this test makes (uploads with the openai client, a live
stream, a realtime session, an alignment, refusals), and --metrics-auth puts it behind the key."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import urllib.error
import urllib.request

import pytest

openai = pytest.importorskip("openai", reason="the openai client is needed (pip install -e '.[dev]')")
websockets = pytest.importorskip("websockets", reason="the websockets client is needed (the dev extra)")
parser = pytest.importorskip("prometheus_client.parser", reason="prometheus_client is needed (the server extra)")
pytest.importorskip("uvicorn", reason="the server extra is needed (pip install '.[server]')")

from server_proc import AUDIO, ServerProcess, multipart, post_raw  # noqa: E402
from qwen3asr_tools.bench_server import load_clip  # noqa: E402

KEY = "k-metrics"


def _scrape(url: str, key=None) -> dict:
    """{(name, frozenset(labels)): value} of every sample."""
    req = urllib.request.Request(url + "/metrics", headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=")
        text = r.read().decode()
    out = {}
    for family in parser.text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name, frozenset(s.labels.items())] = s.value
    return out


def _get(m: dict, name: str, **labels) -> float:
    return m.get((name, frozenset(labels.items())), 0.0)


def _diff(before: dict, after: dict, name: str, **labels) -> float:
    return _get(after, name, **labels) - _get(before, name, **labels)


async def _live(url: str, pcm) -> dict:
    async with websockets.connect(url + f"/v1/stream?api_key={KEY}") as ws:
        await ws.send(json.dumps({"type": "start", "sample_rate": 16000, "chunk_size": 1.0}))
        json.loads(await ws.recv())
        for i in range(0, len(pcm), 1600):
            await ws.send(pcm[i:i + 1600].tobytes())
        await ws.send(json.dumps({"type": "stop"}))
        msgs = [json.loads(m) async for m in ws]
    return msgs[-1]


async def _realtime(base: str, pcm) -> str:
    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0)
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        await conn.send({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": None}}}})
        await conn.input_audio_buffer.append(audio=base64.b64encode(pcm.tobytes()).decode())
        await conn.input_audio_buffer.commit()
        async for ev in conn:
            if ev.type == "conversation.item.input_audio_transcription.completed":
                return ev.transcript


def test_counters_move_by_the_requests_made(tmp_path):
    pcm, sr = load_clip("en_3.wav")
    seconds = len(pcm) / sr
    with ServerProcess("--api-key", KEY, log_path=str(tmp_path / "server.log")) as s:
        before = _scrape(s.url)
        assert _get(before, "qwen3asr_model_info", kind="asr", model="qwen3-asr", backend="onnx") == 1
        assert _get(before, "qwen3asr_model_info", kind="aligner", model="default-aligner", backend="onnx") == 1
        assert _get(before, "qwen3asr_ready") == 1
        client = openai.OpenAI(base_url=s.url + "/v1", api_key=KEY, max_retries=0)
        with open(os.path.join(AUDIO, "en_3.wav"), "rb") as f:
            assert client.audio.transcriptions.create(model="qwen3-asr", file=f).text
        with open(os.path.join(AUDIO, "en_3.wav"), "rb") as f:
            with pytest.raises(openai.BadRequestError):
                client.audio.transcriptions.create(model="qwen3-asr", file=f, language="Klingon")
        assert post_raw(s.url, b"{}", "application/json", key="wrong")[0] == 401
        assert asyncio.run(_live(s.ws_url, pcm))["type"] == "final"
        assert asyncio.run(_realtime(s.url, pcm))
        body, ctype = multipart({"text": "please turn on the living room fan"},
                                {"file": ("en_3.wav", open(os.path.join(AUDIO, "en_3.wav"), "rb").read())})
        req = urllib.request.Request(s.url + "/v1/audio/alignments", data=body, headers={
            "Content-Type": ctype, "Authorization": f"Bearer {KEY}"})
        with urllib.request.urlopen(req, timeout=60) as r:
            assert json.loads(r.read())["words"]
        after = _scrape(s.url)

    d = lambda name, **labels: _diff(before, after, name, **labels)  # noqa: E731
    assert d("qwen3asr_requests_total", surface="transcriptions", outcome="ok") == 1
    assert d("qwen3asr_requests_total", surface="transcriptions", outcome="client_error") == 2
    assert d("qwen3asr_errors_total", surface="transcriptions", code="invalid_language") == 1
    assert d("qwen3asr_errors_total", surface="transcriptions", code="invalid_api_key") == 1
    for surface in ("stream", "realtime", "alignments"):
        assert d("qwen3asr_requests_total", surface=surface, outcome="ok") == 1, surface
        assert d("qwen3asr_audio_seconds_total", surface=surface) == pytest.approx(seconds, abs=0.01), surface
        assert d("qwen3asr_real_time_factor_count", surface=surface) == 1
        assert d("qwen3asr_model_seconds_total", surface=surface) > 0
    assert d("qwen3asr_audio_seconds_total", surface="transcriptions") == pytest.approx(seconds, abs=0.01)
    for surface in ("stream", "realtime"):
        assert d("qwen3asr_first_text_seconds_count", surface=surface) == 1
        assert d("qwen3asr_final_latency_seconds_count", surface=surface) == 1
        assert _get(after, "qwen3asr_active_streams", surface=surface) == 0
    assert d("qwen3asr_queue_wait_seconds_count", **{"class": "live"}) >= 2
    assert d("qwen3asr_queue_wait_seconds_count", **{"class": "bulk"}) >= 2
    assert _get(after, "qwen3asr_scheduler_clients", state="active") == 0


def test_refusals_count_under_their_code(tmp_path):
    pcm, sr = load_clip("en_3.wav")

    async def hold_and_refuse(url):
        async with websockets.connect(url + "/v1/stream") as held:  # the one admission slot
            await held.send(json.dumps({"type": "start", "sample_rate": 16000}))
            json.loads(await held.recv())
            async with websockets.connect(url + "/v1/realtime?intent=transcription") as ws:
                ev = json.loads(await ws.recv())
                with pytest.raises(websockets.ConnectionClosed):
                    await ws.recv()
                return ev, ws.close_code

    with ServerProcess("--max-clients", "1", log_path=str(tmp_path / "server.log")) as s:
        before = _scrape(s.url)
        ev, code = asyncio.run(hold_and_refuse(s.ws_url))
        after = _scrape(s.url)
    assert ev["error"]["code"] == "server_busy" and code == 1013
    assert _diff(before, after, "qwen3asr_refusals_total", surface="realtime", code="server_busy") == 1
    assert _diff(before, after, "qwen3asr_requests_total", surface="realtime", outcome="refused") == 1


def test_metrics_auth(tmp_path):
    with ServerProcess("--api-key", KEY, "--metrics-auth", log_path=str(tmp_path / "server.log")) as s:
        with pytest.raises(urllib.error.HTTPError) as err:
            _scrape(s.url)
        assert err.value.code == 401
        assert _get(_scrape(s.url, KEY), "qwen3asr_ready") == 1
