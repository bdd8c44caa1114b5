"""Live captions over the WebSocket with the `websockets` client against a real server
process: the protocol's messages, the final text of bundled clips, rates and formats."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

websockets = pytest.importorskip("websockets", reason="the websockets client is needed (the dev extra: pip install -e '.[dev]')")
pytest.importorskip("uvicorn", reason="the server extra is needed (pip install '.[server]')")

from server_proc import ServerProcess, engine_stream, engine_stream_pieces, engine_stream_result, expected  # noqa: E402
from qwen3asr_tools.bench_server import load_clip  # noqa: E402


@pytest.fixture(scope="module")
def aligner():
    """A random-weight official aligner for the word messages (compared with the engine's own)."""
    bundles = pytest.importorskip("bundles")
    pytest.importorskip("torch", reason="the random aligner checkpoint is built with the official code (torch)")
    return bundles.aligner_bundle()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory, aligner):
    with ServerProcess("--aligner", aligner, log_path=str(tmp_path_factory.mktemp("live") / "server.log")) as s:
        yield s


async def _stream(url, start, frames):
    """Send the start message and frames, then stop; returns (all messages, close code)."""
    msgs = []
    async with websockets.connect(url + "/v1/stream") as ws:
        await ws.send(json.dumps(start))
        msgs.append(json.loads(await ws.recv()))
        assert msgs[0]["type"] == "ready", msgs[0]

        async def reader():
            async for raw in ws:
                msgs.append(json.loads(raw))

        task = asyncio.ensure_future(reader())
        for f in frames:
            await ws.send(f)
            await asyncio.sleep(0.005)
        await ws.send(json.dumps({"type": "stop"}))
        await asyncio.wait_for(task, 120)
        return msgs, ws.close_code


def _frames(x: np.ndarray, rate: int, seconds: float = 0.1):
    n = int(rate * seconds)
    return [x[i:i + n].tobytes() for i in range(0, len(x), n)]


@pytest.fixture(scope="module")
def engine(aligner):
    from qwen3asr import Qwen3ASREngine
    from server_proc import MODEL

    return Qwen3ASREngine(MODEL, backend="onnx", aligner=aligner)


def test_words_come_with_every_finished_segment_and_the_final(server, engine):
    x, sr = load_clip("long_mixed.wav")
    assert sr == 16000
    x = x[:20 * 16000]
    msgs, code = asyncio.run(_stream(server.ws_url, {"type": "start", "sample_rate": 16000, "chunk_size": 2.0,
                                                     "words": True}, _frames(x, 16000)))
    assert code == 1000 and msgs[0]["words"] is True
    ref = engine_stream_result(engine, x, 2.0, word_timestamps=True)
    want = [{"start": round(s.start, 3), "end": round(s.end, 3), "text": s.text, "language": s.language,
             "words": [w.to_dict() for w in s.words]} for s in ref.segments]
    assert len(want) >= 4 and all(w["words"] for w in want)
    segs = [{k: v for k, v in m.items() if k != "type"} for m in msgs if m["type"] == "segment"]
    assert segs == want  # each finished segment once, in order, before the final message
    assert [m["type"] for m in msgs].index("final") > max(i for i, m in enumerate(msgs) if m["type"] == "segment")
    final = msgs[-1]
    assert final["type"] == "final" and final["segments"] == want and final["text"] == ref.text
    # "word_spans" as the engine's TranscribeOptions.word_spans (raw: the official aligner's times)
    msgs, code = asyncio.run(_stream(server.ws_url, {"type": "start", "sample_rate": 16000, "chunk_size": 2.0,
                                                     "words": True, "word_spans": "raw"}, _frames(x, 16000)))
    raw = engine_stream_result(engine, x, 2.0, word_timestamps=True, word_spans="raw")
    assert code == 1000 and msgs[0]["word_spans"] == "raw"
    assert msgs[-1]["segments"] == [{"start": round(s.start, 3), "end": round(s.end, 3), "text": s.text,
                                     "language": s.language, "words": [w.to_dict() for w in s.words]}
                                    for s in raw.segments] != want
    # without "words" and final passes nothing of this is sent
    msgs, _ = asyncio.run(_stream(server.ws_url, {"type": "start", "sample_rate": 16000, "chunk_size": 2.0,
                                                  "final_pass": False}, _frames(x[:5 * 16000], 16000)))
    assert not [m for m in msgs if m["type"] == "segment"] and "words" not in msgs[-1]["segments"][0]


# chunk_size 2 s: the bundled model streams every bundled clip right; at 1 s it misreads some
# Mandarin clips (an engine matter): there the server must still equal the engine's own stream.
@pytest.mark.parametrize("name,chunk", [("en_1.wav", 2.0), ("en_3.wav", 1.0), ("zh_2.wav", 2.0),
                                        ("zh_2.wav", 1.0), ("zh_3.wav", 0.5)])
def test_live_16k_s16le_in_100ms_frames(server, engine, name, chunk):
    pcm, sr = load_clip(name)
    assert sr == 16000
    msgs, code = asyncio.run(_stream(server.ws_url, {"type": "start", "sample_rate": sr, "format": "s16le",
                                                     "chunk_size": chunk}, _frames(pcm, sr)))
    assert code == 1000
    kinds = [m["type"] for m in msgs]
    assert kinds[0] == "ready" and kinds[-1] == "final"
    assert msgs[0]["final_pass"] is True  # the default (docs/streaming.md, "Each surface's default")
    assert set(kinds[1:-1]) <= {"committed", "tail", "segment"}
    final = msgs[-1]
    assert final["text"] == engine_stream(engine, pcm, chunk)  # final passes: one pass per finished piece
    if chunk == 2.0 or name.startswith("en"):
        assert final["text"] == expected(name)
    committed = "".join(m["text"] for m in msgs if m["type"] == "committed")
    assert committed == engine_stream_pieces(engine, pcm, chunk)  # the streamed pieces
    # each finished piece's one-pass text replaces its streamed pieces: the segments make the final text
    assert " ".join(m["text"] for m in msgs if m["type"] == "segment") == final["text"]
    tails = [m for m in msgs if m["type"] == "tail"]
    if len(pcm) / sr > chunk + 0.1:
        assert tails, "no tail message before the end of a clip longer than a chunk"
    assert all(t["received_seconds"] <= len(pcm) / sr + 1e-3 for t in tails)
    assert [t["chunks"] for t in tails] == sorted(t["chunks"] for t in tails)


def test_live_48k_float32_is_resampled(server):
    import soxr

    pcm, sr = load_clip("en_3.wav")
    x48 = soxr.resample(pcm.astype(np.float32) / 32768, sr, 48000).astype("<f4")
    msgs, code = asyncio.run(_stream(server.ws_url, {"type": "start", "sample_rate": 48000, "format": "f32le",
                                                     "chunk_size": 2.0, "language": "en"}, _frames(x48, 48000)))
    assert code == 1000
    assert msgs[-1]["text"] == expected("en_3.wav")
    assert msgs[-1]["audio_seconds"] == pytest.approx(len(pcm) / sr, abs=0.01)


def test_live_frames_of_any_size_give_the_same_text(server):
    """Odd frame sizes (whole samples) and a stop right after the last frame."""
    pcm, sr = load_clip("zh_2.wav")
    sizes = [1, 7, 333, 1601, 4000]
    frames, i, k = [], 0, 0
    while i < len(pcm):
        n = sizes[k % len(sizes)]
        frames.append(pcm[i:i + n].tobytes())
        i, k = i + n, k + 1
    msgs, code = asyncio.run(_stream(server.ws_url, {"type": "start", "chunk_size": 2.0}, frames))
    assert msgs[-1]["text"] == expected("zh_2.wav")


def test_two_streams_at_once_keep_their_own_text(server):
    async def both():
        a, b = load_clip("en_2.wav")[0], load_clip("zh_3.wav")[0]
        return await asyncio.gather(
            _stream(server.ws_url, {"type": "start", "chunk_size": 2.0}, _frames(a, 16000)),
            _stream(server.ws_url, {"type": "start", "chunk_size": 2.0}, _frames(b, 16000)))

    (ma, _), (mb, _) = asyncio.run(both())
    assert ma[-1]["text"] == expected("en_2.wav")
    assert mb[-1]["text"] == expected("zh_3.wav")


# A context that changes what the bundled model streams for zh_2.wav ("把" -> "八"), so that a
# context that reached the session shows in the text (the test checks that it still does).
BIAS = "Living Room Fan, Bedroom Radio, Back Door\nthermostat, garage"


def _segments(segs):
    return [(round(s["start"], 2), round(s["end"], 2), s["text"]) for s in segs]


def test_context_and_vad_in_the_start_message_reach_the_session(server, engine):
    pcm, sr = load_clip("zh_2.wav")
    biased = engine_stream(engine, pcm, 2.0, context=BIAS)
    assert biased != engine_stream(engine, pcm, 2.0)
    msgs, code = asyncio.run(_stream(server.ws_url, {"type": "start", "chunk_size": 2.0, "context": BIAS},
                                     _frames(pcm, sr)))
    assert code == 1000 and msgs[-1]["text"] == biased

    # VAD: a clip between 1.5 s of silence; with VAD the silence is never decoded and the
    # segment starts at the speech (what the engine's own stream with vad=True gives)
    en, _ = load_clip("en_1.wav")
    pad = np.zeros(int(1.5 * sr), dtype=np.int16)
    x = np.concatenate([pad, en, pad])
    with_vad = engine_stream_result(engine, x, 2.0, vad=True)
    without = engine_stream_result(engine, x, 2.0)
    want = [(round(s.start, 2), round(s.end, 2), s.text) for s in with_vad.segments]
    assert want != [(round(s.start, 2), round(s.end, 2), s.text) for s in without.segments]
    msgs, code = asyncio.run(_stream(server.ws_url, {"type": "start", "chunk_size": 2.0, "vad": True},
                                     _frames(x, sr)))
    assert code == 1000 and msgs[0]["vad"] is True
    assert msgs[-1]["text"] == with_vad.text == expected("en_1.wav")
    assert _segments(msgs[-1]["segments"]) == want


@pytest.mark.slow
def test_a_long_upload_does_not_starve_a_live_stream(server, engine, tmp_path):
    """A 5-minute upload runs unit by unit; a live stream that starts while it runs gets its
    turns between the upload's units and finishes long before the upload does (without fair
    turns it would wait for the whole file), and both texts are right."""
    import threading
    import time

    import openai
    import soundfile as sf

    long_pcm, sr = load_clip("long_mixed.wav")
    path = str(tmp_path / "long4.wav")
    sf.write(path, np.tile(long_pcm, 4), sr, subtype="PCM_16")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)
    upload: dict = {}

    def run_upload():
        try:
            with open(path, "rb") as f:
                upload["text"] = client.audio.transcriptions.create(model="qwen3-asr", file=f).text
        except Exception as exc:  # reported by the assertion below
            upload["error"] = exc

    units0 = server.health()[1]["units"]
    thread = threading.Thread(target=run_upload, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120  # a bound, not a latency: the upload must be running first
    while server.health()[1]["units"] < units0 + 3 and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert thread.is_alive(), f"the upload ran to its end without giving up the turn between units: {upload}"
    pcm, _ = load_clip("en_1.wav")
    msgs, code = asyncio.run(_stream(server.ws_url, {"type": "start", "chunk_size": 2.0}, _frames(pcm, sr)))
    upload_running_at_live_end = thread.is_alive()
    units_at_live_end = server.health()[1]["units"]
    thread.join(600)
    assert code == 1000 and msgs[-1]["text"] == expected("en_1.wav")
    assert "error" not in upload, upload
    units_total = server.health()[1]["units"]
    assert upload_running_at_live_end, "the live stream waited for the whole upload"
    assert units_at_live_end < units_total  # upload units were still to run when the live stream ended
    assert upload["text"] == engine.transcribe(path).text


async def _stream_waiting_for_words(url, start, pcm, sr, wait_for_words, first_s=1.2, pause_s=0.0):
    """Stream ``pcm`` (int16) with ``start``: the first ``first_s`` seconds, then (with
    ``wait_for_words``) wait for a tail message with text, or else read what comes for
    ``pause_s`` seconds, then the rest and stop; all messages (the first is "ready")."""
    first = int(first_s * sr)
    msgs = []
    async with websockets.connect(url + "/v1/stream") as ws:
        await ws.send(json.dumps(start))
        msgs.append(json.loads(await ws.recv()))
        for f in _frames(pcm[:first], sr):
            await ws.send(f)
        while wait_for_words and not (msgs[-1]["type"] == "tail" and msgs[-1]["text"]):
            msgs.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
        deadline = asyncio.get_running_loop().time() + pause_s
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            try:
                msgs.append(json.loads(await asyncio.wait_for(ws.recv(), left)))
            except asyncio.TimeoutError:
                break
        for f in _frames(pcm[first:], sr):
            await ws.send(f)
        await ws.send(json.dumps({"type": "stop"}))
        async for raw in ws:
            msgs.append(json.loads(raw))
        assert ws.close_code == 1000
    return msgs


@pytest.mark.parametrize("start,echo", [
    ({"partial_every": 0.5, "first_words": None}, ("partial_every", 0.5)),  # previews all along, asked for
    ({}, ("first_words", 0.5)),  # the caption surfaces' default: the first words previewed
])
def test_previews_show_words_before_the_first_chunk(server, engine, start, echo):
    """With 2 s chunks and 1.2 s of en_2 sent, a tail with words arrives before any chunk is
    decoded; the final text is the one without previews."""
    pcm, sr = load_clip("en_2.wav")
    msgs = asyncio.run(_stream_waiting_for_words(server.ws_url, {"type": "start", "chunk_size": 2.0, **start},
                                                 pcm, sr, True))
    assert msgs[0][echo[0]] == echo[1]
    preview = next(m for m in msgs if m["type"] == "tail" and m["text"])
    assert preview["received_seconds"] <= 1.2 and preview["chunks"] == 0
    assert msgs[-1]["type"] == "final" and msgs[-1]["text"] == engine_stream(engine, pcm, 2.0)


@pytest.mark.parametrize("first_words", [None, 0.5])
def test_first_words_off_with_null(server, engine, first_words):
    """1.2 s of en_2 sent, then 3 s of waiting: with first_words null no text comes before the
    first 2 s chunk; with 0.5 (the check that this wait lets a preview come) it does."""
    pcm, sr = load_clip("en_2.wav")
    msgs = asyncio.run(_stream_waiting_for_words(server.ws_url, {"type": "start", "chunk_size": 2.0,
                                                                 "first_words": first_words}, pcm, sr, False,
                                                 pause_s=3.0))
    assert msgs[0]["first_words"] == first_words and msgs[0]["partial_every"] is None
    early = [m for m in msgs if m["type"] == "tail" and m["text"] and m["chunks"] == 0]
    assert bool(early) == (first_words is not None), early
    assert msgs[-1]["text"] == engine_stream(engine, pcm, 2.0)


def test_stop_tells_the_scheduler_the_final_comes_next():
    """The stop message sets the stream's scheduler client ``ending`` (its previews give way from
    then: Work.newer, tests/test_scheduler.py). The app in this process, so the test sees the
    client; a real websockets client drives it."""
    import threading
    import time

    import uvicorn

    from qwen3asr import Qwen3ASREngine
    from qwen3asr.server.app import create_app
    from qwen3asr.server.scheduler import Scheduler
    from server_proc import MODEL, free_port

    engine = Qwen3ASREngine(MODEL, backend="onnx")  # the app closes it
    sched = Scheduler(4)
    clients, admit = [], sched.admit
    sched.admit = lambda *a, **k: clients.append(admit(*a, **k)) or clients[-1]
    app = create_app(engine, sched)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        end = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < end
            time.sleep(0.02)
        pcm, sr = load_clip("en_1.wav")

        async def go():
            async with websockets.connect(f"ws://127.0.0.1:{port}/v1/stream") as ws:
                await ws.send(json.dumps({"type": "start", "chunk_size": 2.0}))
                assert json.loads(await ws.recv())["type"] == "ready"
                for f in _frames(pcm, sr):
                    await ws.send(f)
                assert len(clients) == 1 and not clients[0].ending.is_set()
                await ws.send(json.dumps({"type": "stop"}))
                return [json.loads(raw) async for raw in ws]

        msgs = asyncio.run(go())
        assert msgs[-1]["type"] == "final" and msgs[-1]["text"] == "open the back door"
        assert clients[0].ending.is_set()
    finally:
        server.should_exit = True
        thread.join(30)
        app.state.runtime.close()
