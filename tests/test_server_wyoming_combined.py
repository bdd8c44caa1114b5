"""qwen3asr-serve --wyoming: Wyoming and HTTP from one process, one engine, one scheduler.

The Wyoming server itself (qwen3asr.server.wyoming) is tested in tests/test_wyoming.py; this
checks the combined process: both front ends answer, share the
scheduler's counters, and SIGTERM stops both with exit 0."""

from __future__ import annotations

import asyncio
import os
import urllib.request

import pytest

pytest.importorskip("wyoming", reason="the wyoming package is needed (the dev extra: pip install -e '.[dev]')")
openai = pytest.importorskip("openai", reason="the openai client is needed (the dev extra: pip install -e '.[dev]')")

from qwen3asr_tools.bench_server import WyomingKind  # noqa: E402
from server_proc import AUDIO, ServerProcess, expected, free_port  # noqa: E402


async def _listening(port: int, server) -> None:
    """Wait (at most 60 s) until Wyoming listens: it starts once the engine is loaded."""
    end = asyncio.get_running_loop().time() + 60
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            await writer.wait_closed()
            return
        except OSError:
            assert asyncio.get_running_loop().time() < end, server.log()
            await asyncio.sleep(0.1)


def test_wyoming_and_http_in_one_process(tmp_path):
    port = free_port()
    with ServerProcess("--wyoming", f"tcp://127.0.0.1:{port}", log_path=str(tmp_path / "server.log")) as s:
        kind = WyomingKind("127.0.0.1", port, realtime=False)

        async def both():
            await _listening(port, s)
            client = openai.AsyncOpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
            with open(os.path.join(AUDIO, "zh_1.wav"), "rb") as f:
                upload = asyncio.ensure_future(client.audio.transcriptions.create(model="qwen3-asr", file=f))
                utterance = await kind.run("en_2.wav")
                return utterance, await upload

        before = s.health()[1]["admitted"]
        utterance, upload = asyncio.run(both())
        assert utterance.status == "ok" and utterance.text == expected("en_2.wav"), utterance
        assert upload.text == expected("zh_1.wav")
        assert s.health()[1]["admitted"] == before + 2  # both went through the one scheduler
        # the Wyoming utterance is counted in /metrics, read by the Prometheus client's own parser
        from prometheus_client import parser

        with urllib.request.urlopen(s.url + "/metrics", timeout=30) as r:
            samples = {(x.name, frozenset(x.labels.items())): x.value
                       for fam in parser.text_string_to_metric_families(r.read().decode()) for x in fam.samples}
        wy = frozenset({"surface": "wyoming"}.items())
        assert samples["qwen3asr_requests_total", frozenset({"surface": "wyoming", "outcome": "ok"}.items())] == 1
        assert samples["qwen3asr_final_latency_seconds_count", wy] == 1
        assert samples["qwen3asr_audio_seconds_total", wy] == pytest.approx(2.38, abs=0.01)
        assert samples["qwen3asr_requests_total", frozenset({"surface": "transcriptions", "outcome": "ok"}.items())] == 1
        assert s.stop() == 0, s.log()


def test_every_live_surface_gives_the_same_final_text(tmp_path, server_engine):
    """The same command through Wyoming (its final passes at 2 s chunks), the WebSocket with
    final passes at 2 s chunks, and the library's create_stream with those options: one final
    text (issue 32: the verified final pass serves them all)."""
    import json

    import numpy as np

    websockets = pytest.importorskip("websockets", reason="the websockets client is needed (the dev extra)")
    from qwen3asr import prepare_audio
    from qwen3asr_tools.bench_server import load_clip

    port = free_port()
    clips = ("en_2.wav", "zh_2.wav", "en_3.wav")
    with ServerProcess("--wyoming", f"tcp://127.0.0.1:{port}", log_path=str(tmp_path / "server.log")) as s:
        kind = WyomingKind("127.0.0.1", port, realtime=False)

        async def live(name):
            pcm, sr = load_clip(name)
            async with websockets.connect(s.url.replace("http", "ws") + "/v1/stream") as ws:
                await ws.send(json.dumps({"type": "start", "sample_rate": sr, "chunk_size": 2.0, "final_pass": True}))
                json.loads(await ws.recv())
                for i in range(0, len(pcm), sr // 10):
                    await ws.send(pcm[i:i + sr // 10].astype(np.int16).tobytes())
                await ws.send(json.dumps({"type": "stop"}))
                msgs = [json.loads(m) async for m in ws]
            return next(m for m in msgs if m["type"] == "final")["text"]

        async def all_of():
            await _listening(port, s)
            return [((await kind.run(c)).text, await live(c)) for c in clips]

        got = asyncio.run(all_of())
        assert s.stop() == 0, s.log()
    for clip, (wyoming, ws) in zip(clips, got):
        st = server_engine.create_stream(chunk_size=2.0, final_pass=True)
        st.feed_audio(prepare_audio(os.path.join(AUDIO, clip)))
        assert wyoming == ws == st.finish().text, clip
