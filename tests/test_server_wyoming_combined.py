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


def test_wyoming_and_http_in_one_process(tmp_path):
    port = free_port()
    with ServerProcess("--wyoming", f"tcp://127.0.0.1:{port}", log_path=str(tmp_path / "server.log")) as s:
        kind = WyomingKind("127.0.0.1", port, realtime=False)

        async def both():
            end = asyncio.get_running_loop().time() + 60
            while True:  # Wyoming starts listening once the engine is loaded
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                    await writer.wait_closed()
                    break
                except OSError:
                    assert asyncio.get_running_loop().time() < end, s.log()
                    await asyncio.sleep(0.1)
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
