"""Bad input and faults against a real server process: each answered with a clean error
(HTTP status + OpenAI error body, or a WebSocket error message + close code), and the server
keeps serving: killed clients, a full scheduler, SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np
import pytest

websockets = pytest.importorskip("websockets", reason="the websockets client is needed (the dev extra: pip install -e '.[dev]')")
openai = pytest.importorskip("openai", reason="the openai client is needed (the dev extra: pip install -e '.[dev]')")
pytest.importorskip("uvicorn", reason="the server extra is needed (pip install '.[server]')")

from server_proc import AUDIO, ServerProcess, expected, multipart as _multipart, post_raw, read_until_closed  # noqa: E402
from qwen3asr_tools.bench_server import load_clip  # noqa: E402

KEY = "k-faults"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = str(tmp_path_factory.mktemp("faults") / "server.log")
    with ServerProcess("--api-key", KEY, "--max-upload-mb", "3", "--max-audio-seconds", "60", log_path=log) as s:
        yield s


def _post(url, body: bytes, content_type: str, key=KEY, chunked=False):
    return post_raw(url, body, content_type, key=key, chunked=chunked)


def _err(resp, status, code, param=None):
    st, headers, body = resp
    assert st == status, (st, body)
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == code, body
    if param is not None:
        assert body["error"]["param"] == param
    return body["error"]["message"]


def _wav_bytes(name="en_1.wav"):
    with open(os.path.join(AUDIO, name), "rb") as f:
        return f.read()


# ---------------------------------------------------------------------- HTTP bad input
def test_not_multipart(server):
    msg = _err(_post(server.url, b'{"file": "x"}', "application/json"), 400, "invalid_content_type")
    assert "multipart/form-data" in msg


def test_missing_file(server):
    body, ct = _multipart({"model": "qwen3-asr"}, {})
    assert "'file'" in _err(_post(server.url, body, ct), 400, "missing_file", "file")


def test_empty_file(server):
    body, ct = _multipart({}, {"file": ("empty.wav", b"")})
    assert "empty" in _err(_post(server.url, body, ct), 400, "empty_file", "file")


def test_garbage_file(server):
    body, ct = _multipart({}, {"file": ("noise.mp3", os.urandom(20000))})
    msg = _err(_post(server.url, body, ct), 400, "invalid_audio", "file")
    assert "cannot decode 'noise.mp3'" in msg and "ffmpeg" in msg and "BytesIO" not in msg


def test_truncated_wav_header(server):
    body, ct = _multipart({}, {"file": ("cut.wav", _wav_bytes()[:30])})
    _err(_post(server.url, body, ct), 400, "invalid_audio", "file")


def test_malformed_multipart(server):
    msg = _err(_post(server.url, b"--nope\r\ngarbage", "multipart/form-data; boundary=xyz"), 400,
               "invalid_multipart")
    assert "Invalid multipart data" in msg


def test_file_over_the_size_limit(server):
    big = b"RIFF" + os.urandom(4 * 1024 * 1024)
    body, ct = _multipart({}, {"file": ("big.wav", big)})
    assert "3 MB" in _err(_post(server.url, body, ct), 413, "file_too_large", "file")
    # without a Content-Length (chunked) the limit holds while the body streams in
    assert server.health()[0] == 200
    _err(_post(server.url, body, ct, chunked=True), 413, "file_too_large", "file")


def test_audio_over_the_duration_limit(server):
    body, ct = _multipart({}, {"file": ("long.wav", _wav_bytes("long_mixed.wav"))})  # 77 s, 2.4 MB
    assert "60 s" in _err(_post(server.url, body, ct), 413, "audio_too_long", "file")


def test_unknown_response_format_and_bad_fields(server):
    wav = _wav_bytes()
    for fields, code, param in [({"response_format": "xml"}, "invalid_response_format", "response_format"),
                                ({"temperature": "hot"}, "invalid_temperature", "temperature"),
                                ({"temperature": "3"}, "invalid_temperature", "temperature"),
                                ({"stream": "maybe"}, "invalid_stream", "stream"),
                                ({"stream": "true", "response_format": "srt"}, "invalid_response_format",
                                 "response_format"),
                                ({"colour": "red"}, "unknown_field", "colour"),
                                ({"timestamp_granularities[]": "char"}, "unsupported_value",
                                 "timestamp_granularities[]"),
                                # words need verbose_json, as OpenAI's API
                                ({"timestamp_granularities[]": "word"}, "invalid_response_format",
                                 "timestamp_granularities[]"),
                                ({"include[]": "logprobs"}, "unsupported_value", "include[]"),
                                ({"chunking_strategy": "server_vad"}, "unsupported_value", "chunking_strategy")]:
        body, ct = _multipart(fields, {"file": ("a.wav", wav)})
        _err(_post(server.url, body, ct), 400, code, param)


def test_wrong_or_missing_key(server):
    body, ct = _multipart({}, {"file": ("a.wav", _wav_bytes())})
    st, headers, _ = _post(server.url, body, ct, key="nope")
    assert st == 401 and headers.get("www-authenticate") == "Bearer"
    _err(_post(server.url, body, ct, key="nope"), 401, "invalid_api_key")
    _err(_post(server.url, body, ct, key=None), 401, "missing_api_key")


def test_unknown_path_is_a_json_404(server):
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(server.url + "/v1/nothing", timeout=10)
    assert e.value.code == 404 and json.loads(e.value.read())["error"]["code"] == "not_found"


# ---------------------------------------------------------------------- WebSocket bad input
async def _ws_exchange(url, *messages, key=KEY, query=True):
    """Send messages; return (messages received, close code)."""
    target = url + "/v1/stream" + (f"?api_key={key}" if key and query else "")
    got = []
    async with websockets.connect(target, additional_headers=None if query or not key else
                                  {"Authorization": f"Bearer {key}"}) as ws:
        try:
            for m in messages:
                await ws.send(m)
        except websockets.ConnectionClosed:
            pass  # the server closed early: what it sent is still read below
        got += await read_until_closed(ws)
        return got, ws.close_code


START = json.dumps({"type": "start", "sample_rate": 16000, "format": "s16le", "chunk_size": 2.0})


@pytest.mark.parametrize("messages,close,code", [
    ([b"\x00\x01" * 800], 1003, "expected_start"),  # binary before start
    (["{not json"], 1007, "malformed_json"),
    (["[1, 2]"], 1007, "malformed_json"),
    ([json.dumps({"type": "hello"})], 1003, "expected_start"),
    ([json.dumps({"type": "start", "sample_rate": 4})], 1007, "invalid_sample_rate"),
    ([json.dumps({"type": "start", "format": "mp3"})], 1007, "invalid_format"),
    ([json.dumps({"type": "start", "language": "Klingon"})], 1007, "invalid_language"),
    ([json.dumps({"type": "start", "chunk_size": 0.01})], 1007, "invalid_start"),
    ([json.dumps({"type": "start", "bogus": 1})], 1007, "unknown_field"),
    ([json.dumps({"type": "start", "partial_every": 0.01})], 1007, "invalid_partial_every"),
    ([json.dumps({"type": "start", "partial_every": "often"})], 1007, "invalid_partial_every"),
    ([json.dumps({"type": "start", "partial_every": True})], 1007, "invalid_partial_every"),
    ([json.dumps({"type": "start", "first_words": 0})], 1007, "invalid_first_words"),
    ([json.dumps({"type": "start", "words": True, "word_spans": "tight"})], 1007, "invalid_word_spans"),
    ([json.dumps({"type": "start", "word_spans": None})], 1007, "invalid_word_spans"),
    ([START, b"\x00\x01\x02"], 1007, "partial_sample"),  # odd-length s16le
    ([START, "{oops"], 1007, "malformed_json"),
    ([START, json.dumps({"type": "pause"})], 1003, "unknown_message"),
])
def test_ws_bad_input(server, messages, close, code):
    got, closed = asyncio.run(_ws_exchange(server.ws_url, *messages))
    assert closed == close, got
    assert got[-1]["type"] == "error" and got[-1]["code"] == code, got
    assert got[-1]["message"]


def test_ws_bad_frame_while_decoding(server):
    """A protocol error that arrives while chunks are being decoded is still reported."""
    import soundfile as sf

    x, _ = sf.read(os.path.join(AUDIO, "long_mixed.wav"), dtype="int16", frames=16000 * 30)
    got, closed = asyncio.run(_ws_exchange(server.ws_url, START, x.tobytes(), b"\x00\x01\x02"))
    assert closed == 1007 and got[-1]["code"] == "partial_sample", got[-3:]


def test_ws_partial_float_sample(server):
    start = json.dumps({"type": "start", "format": "f32le"})
    got, closed = asyncio.run(_ws_exchange(server.ws_url, start, b"\x00" * 6))
    assert closed == 1007 and got[-1]["code"] == "partial_sample"


def test_ws_wrong_key(server):
    got, closed = asyncio.run(_ws_exchange(server.ws_url, START, key="bad"))
    assert closed == 1008 and got[-1]["code"] == "invalid_api_key"
    got, closed = asyncio.run(_ws_exchange(server.ws_url, START, key=None))
    assert closed == 1008 and got[-1]["code"] == "missing_api_key"


def test_ws_key_as_header(server):
    pcm, _ = load_clip("en_1.wav")
    stop = json.dumps({"type": "stop"})
    got, closed = asyncio.run(_ws_exchange(server.ws_url, START, pcm.tobytes(), stop, query=False))
    assert closed == 1000 and got[-1]["type"] == "final" and got[-1]["text"] == expected("en_1.wav")


# ---------------------------------------------------------------------- killed clients
def _stats(server):
    return server.health()[1]


def _wait(pred, what, timeout=60.0, proc=None):
    end = time.monotonic() + timeout
    while not pred():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the client process ended ({proc.returncode}) before {what}")
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture(scope="module")
def long_wav(tmp_path_factory):
    """long_mixed.wav twice over (154 s): long enough that a killed client dies mid-work."""
    import soundfile as sf

    x, sr = sf.read(os.path.join(AUDIO, "long_mixed.wav"), dtype="int16")
    p = str(tmp_path_factory.mktemp("long") / "long2x.wav")
    sf.write(p, np.concatenate([x, x]), sr, subtype="PCM_16")
    return p


@pytest.fixture(scope="module")
def open_server(tmp_path_factory):
    log = str(tmp_path_factory.mktemp("open") / "server.log")
    with ServerProcess(log_path=log) as s:
        yield s


UPLOADER = """
import sys, openai
client = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="x", max_retries=0, timeout=600)
if sys.argv[3] == "stream":
    for event in client.audio.transcriptions.create(model="qwen3-asr", file=open(sys.argv[2], "rb"), stream=True):
        print(event.type, flush=True)
else:
    client.audio.transcriptions.create(model="qwen3-asr", file=open(sys.argv[2], "rb"))
"""

STREAMER = """
import asyncio, json, sys, websockets, soundfile as sf
async def main():
    x, sr = sf.read(sys.argv[2], dtype="int16")
    async with websockets.connect(sys.argv[1] + "/v1/stream") as ws:
        await ws.send(json.dumps({"type": "start", "chunk_size": 1.0}))
        await ws.recv()
        for i in range(0, len(x), 16000):
            await ws.send(x[i:i + 16000].tobytes())
        print("sent", flush=True)
        await asyncio.sleep(600)
asyncio.run(main())
"""


@pytest.mark.parametrize("mode", ["json", "stream"])
def test_killed_http_client_is_cancelled_and_the_server_keeps_serving(open_server, long_wav, mode):
    s = open_server
    # what the whole file costs in units of model work, run to the end
    before = _stats(s)["units"]
    body, ct = _multipart({}, {"file": ("long.wav", open(long_wav, "rb").read())})
    st, _, full = _post(s.url, body, ct, key=None)
    assert st == 200 and full["text"]
    full_units = _stats(s)["units"] - before
    assert full_units > 20
    base = _stats(s)
    p = subprocess.Popen([sys.executable, "-c", UPLOADER, s.url, long_wav, mode], stdout=subprocess.PIPE, text=True)
    try:
        if mode == "stream":
            assert p.stdout.readline().strip() == "transcript.text.delta"  # the first piece arrived
        _wait(lambda: _stats(s)["active"] == 1 and _stats(s)["units"] > base["units"], "the upload to run", proc=p)
    finally:
        p.kill()
        p.wait()
    _wait(lambda: _stats(s)["active"] == 0, "the killed upload to be released")
    after = _stats(s)
    assert after["cancelled"] == base["cancelled"] + 1
    assert after["units"] - base["units"] < full_units  # its remaining chunks never ran
    with open(os.path.join(AUDIO, "en_2.wav"), "rb") as f:
        r = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0).audio.transcriptions.create(
            model="qwen3-asr", file=f)
    assert r.text == expected("en_2.wav")


def test_killed_ws_client_is_cancelled_and_the_server_keeps_serving(open_server, long_wav):
    s = open_server
    base = _stats(s)
    p = subprocess.Popen([sys.executable, "-c", STREAMER, s.ws_url, long_wav], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "sent"  # 154 s of audio queued: minutes of chunks
        _wait(lambda: _stats(s)["units"] > base["units"] + 2, "the stream to be decoded", proc=p)
    finally:
        p.kill()
        p.wait()
    _wait(lambda: _stats(s)["active"] == 0, "the killed stream to be released")
    after = _stats(s)
    assert after["cancelled"] == base["cancelled"] + 1
    assert after["units"] - base["units"] < 150  # far fewer than its 154 one-second chunks
    pcm, _ = load_clip("en_1.wav")
    got, closed = asyncio.run(_ws_exchange(s.ws_url, START, pcm.tobytes(), json.dumps({"type": "stop"}),
                                           key=None))
    assert got[-1]["text"] == expected("en_1.wav")


# ---------------------------------------------------------------------- busy, SIGTERM
def test_full_scheduler_answers_503_at_once(tmp_path):
    with ServerProcess("--max-clients", "1", log_path=str(tmp_path / "server.log")) as s:
        async def scenario():
            async with websockets.connect(s.ws_url + "/v1/stream") as holder:
                await holder.send(START)
                assert json.loads(await holder.recv())["type"] == "ready"  # holds the only slot
                body, ct = _multipart({}, {"file": ("a.wav", _wav_bytes())})
                st, headers, err = await asyncio.to_thread(_post, s.url, body, ct, None)
                got, closed = await _ws_exchange(s.ws_url, START, key=None)
                client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
                with pytest.raises(openai.InternalServerError) as e, open(os.path.join(AUDIO, "en_1.wav"), "rb") as f:
                    await asyncio.to_thread(client.audio.transcriptions.create, model="qwen3-asr", file=f)
                return st, headers, err, got, closed, e.value

        st, headers, err, got, closed, exc = asyncio.run(scenario())
        assert st == 503 and headers.get("retry-after") == "1" and err["error"]["code"] == "server_busy"
        assert closed == 1013 and got[-1]["code"] == "server_busy"
        assert exc.status_code == 503
        assert _stats(s)["rejected"] == 3
        with open(os.path.join(AUDIO, "en_1.wav"), "rb") as f:  # the slot is free again
            r = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0).audio.transcriptions.create(
                model="qwen3-asr", file=f)
        assert r.text == expected("en_1.wav")


def test_sigterm_finishes_in_flight_work_and_exits_0(tmp_path, long_wav):
    with ServerProcess("--grace-seconds", "60", log_path=str(tmp_path / "server.log")) as s:
        body, ct = _multipart({}, {"file": ("long.wav", open(long_wav, "rb").read())})
        st, _, ref = _post(s.url, body, ct, key=None)  # the single-client result
        assert st == 200
        result = {}
        upload = threading.Thread(target=lambda: result.setdefault("r", _post(s.url, body, ct, key=None)))
        base = _stats(s)["units"]
        upload.start()
        _wait(lambda: _stats(s)["units"] > base + 1, "the upload to run")

        async def live_then_term():
            pcm, _ = load_clip("en_3.wav")
            async with websockets.connect(s.ws_url + "/v1/stream") as ws:
                await ws.send(START)
                assert json.loads(await ws.recv())["type"] == "ready"
                await ws.send(pcm.tobytes())
                await asyncio.sleep(0.3)
                s.proc.send_signal(signal.SIGTERM)
                msgs = [json.loads(m) async for m in ws]
                return msgs, ws.close_code

        msgs, code = asyncio.run(live_then_term())
        upload.join(120)
        assert s.proc.wait(120) == 0, s.log()
        assert msgs[-1]["type"] == "final" and msgs[-1]["reason"] == "the server is shutting down"
        assert msgs[-1]["text"] == expected("en_3.wav") and code == 1001
        st, _, r = result["r"]
        assert st == 200 and r["text"] == ref["text"]  # the in-flight upload finished
        with pytest.raises(OSError):
            urllib.request.urlopen(s.url + "/health", timeout=5)


@pytest.mark.parametrize("stream", [False, True])
def test_sigterm_cancels_work_still_running_when_the_grace_period_ends(tmp_path, long_wav, stream):
    """An upload far longer than the grace period: at its end the upload's work is cancelled and
    its client gets a clean 503 shutting_down (with stream=true: that error event, then
    [DONE]), so a load balancer retries it elsewhere; the process exits 0."""
    import soundfile as sf

    x, sr = sf.read(long_wav, dtype="int16")
    path = str(tmp_path / "long8x.wav")
    sf.write(path, np.tile(x, 4), sr, subtype="PCM_16")  # 10 min: many seconds of work here
    with open(path, "rb") as f:
        body, ct = _multipart({"stream": "true"} if stream else {}, {"file": ("long.wav", f.read())})
    with ServerProcess("--grace-seconds", "0.5", log_path=str(tmp_path / "server.log")) as s:
        result = {}
        t = threading.Thread(target=lambda: result.setdefault("r", _post(s.url, body, ct, key=None)))
        base = _stats(s)["units"]
        t.start()
        _wait(lambda: _stats(s)["units"] > base + 1, "the upload to run")
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(120) == 0, s.log()
        t.join(60)
        log = s.log()
    if stream:
        st, headers, text = result["r"]
        assert st == 200
        blocks = text.strip().split("\n\n")
        assert blocks[-1] == "data: [DONE]"
        err = json.loads(blocks[-2][len("data: "):])
        assert err["type"] == "error" and err["error"]["code"] == "shutting_down", err
    else:
        _err(result["r"], 503, "shutting_down")
        assert result["r"][1].get("retry-after") == "1"
    assert "grace period of 0.5 s is over: cancelling 1 request" in log and "Traceback" not in log, log


def test_model_that_cannot_load_exits_2_with_the_reason(tmp_path):
    p = subprocess.run([sys.executable, "-m", "qwen3asr.server", "--model", str(tmp_path / "nothing"),
                        "--port", "0", "--backend", "onnx"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.path.join(os.path.dirname(AUDIO), "python")})
    assert p.returncode == 2
    assert "error: cannot load the model" in p.stderr and "nothing" in p.stderr
