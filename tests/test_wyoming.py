"""The Wyoming server (qwen3asr.server.wyoming) with the ``wyoming`` package's own client.

As Home Assistant uses it: one connection per request (describe -> info; transcribe,
audio-start, audio-chunks, audio-stop -> transcript). The main cases run against a real
server process (``python -m qwen3asr.server.wyoming``) on the bundled model and clips; the
cases that need to look inside the process (the scheduler's counts, the one-pass final
option) run ``serve``/``serve_wyoming`` in this process's event loop. Loopback only; every
read has a bound, so a hang fails instead of blocking the suite.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import wave

import numpy as np
import pytest

wyoming = pytest.importorskip("wyoming", reason="the Wyoming server needs the 'wyoming' package (server extra)")
pytest.importorskip("onnxruntime", reason="the ONNX backend needs onnxruntime")

from wyoming.asr import Transcribe, Transcript, TranscriptChunk, TranscriptStart, TranscriptStop  # noqa: E402
from wyoming.audio import AudioChunk, AudioStart, AudioStop  # noqa: E402
from wyoming.client import AsyncTcpClient  # noqa: E402
from wyoming.error import Error  # noqa: E402
from wyoming.event import async_read_event  # noqa: E402
from wyoming.info import Describe, Info  # noqa: E402
from wyoming.ping import Ping, Pong  # noqa: E402

from qwen3asr.languages import LANGUAGE_CODES  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_DIR = os.path.join(ROOT, "models", "default")
AUDIO_DIR = os.path.join(ROOT, "audio")
READ_TIMEOUT = 120.0  # bound on any one read (a hang fails the test); never asserted as a latency
with open(os.path.join(AUDIO_DIR, "transcripts.json"), encoding="utf-8") as _f:
    EXPECTED = {c["file"]: c["text"] for c in json.load(_f)["clips"]}
LISTENING = re.compile(r"Wyoming server listening on tcp://127\.0\.0\.1:(\d+)")


def read_wav(name):
    with wave.open(os.path.join(AUDIO_DIR, name)) as w:
        assert (w.getframerate(), w.getsampwidth(), w.getnchannels()) == (16000, 2, 1)
        return np.frombuffer(w.readframes(w.getnframes()), "<i2")


def joined(names, gap_s=1.0):
    """int16 16 kHz clips joined by gap_s of silence (commands separated by pauses)."""
    parts = []
    for n in names:
        parts += [read_wav(n), np.zeros(int(gap_s * 16000), np.int16)]
    return np.concatenate(parts[:-1])


def stereo_44k(pcm16):
    """The clip at 44.1 kHz, 16-bit stereo with unequal channels (left full, right at 0.6)."""
    import soxr

    x = soxr.resample(pcm16.astype(np.float32) / 32768, 16000, 44100, quality="VHQ")
    st = np.stack([x, 0.6 * x], axis=1)
    return np.clip(np.round(st * 32768), -32768, 32767).astype("<i2").tobytes()


def chunks_of(data: bytes, rate, width, channels, seconds=0.1):
    step = int(rate * seconds) * width * channels
    for i in range(0, len(data), step):
        yield AudioChunk(rate=rate, width=width, channels=channels, audio=data[i:i + step]).event()


async def read(client):
    event = await asyncio.wait_for(client.read_event(), READ_TIMEOUT)
    return event


async def utterance(port, data, rate=16000, width=2, channels=1, language=None, **transcribe):
    """One request as Home Assistant makes it; returns the events received, in order."""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Transcribe(language=language, **transcribe).event())
        await client.write_event(AudioStart(rate=rate, width=width, channels=channels).event())
        for ev in chunks_of(data, rate, width, channels):
            await client.write_event(ev)
        await client.write_event(AudioStop().event())
        return await events_until_stop(client)


async def events_until_stop(client):
    events = []
    while True:
        ev = await read(client)
        assert ev is not None, f"connection closed before transcript-stop; got {[e.type for e in events]}"
        events.append(ev)
        if TranscriptStop.is_type(ev.type) or Error.is_type(ev.type):
            return events


def final_text(events):
    finals = [Transcript.from_event(e) for e in events if Transcript.is_type(e.type)]
    assert len(finals) == 1, [e.type for e in events]
    return finals[0]


def check_order(events):
    """transcript-start, transcript-chunk*, transcript, transcript-stop; the chunks join to the transcript."""
    types = [e.type for e in events]
    assert types[0] == "transcript-start" and types[-2:] == ["transcript", "transcript-stop"], types
    assert set(types[1:-2]) <= {"transcript-chunk"}, types
    pieces = "".join(TranscriptChunk.from_event(e).text for e in events if TranscriptChunk.is_type(e.type))
    assert pieces == final_text(events).text


# ---------------------------------------------------------------------------- a real server process
class ServerProcess:
    def __init__(self, *args):
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "qwen3asr.server.wyoming", "--uri", "tcp://127.0.0.1:0", "--model", MODEL_DIR,
             "--backend", "onnx", "--threads", "2", "-v", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines = []
        found = threading.Event()
        self.port = None

        def pump():
            for line in self.proc.stderr:
                self.lines.append(line)
                m = LISTENING.search(line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    found.set()
            found.set()

        threading.Thread(target=pump, daemon=True).start()
        found.wait(READ_TIMEOUT)
        if self.port is None:
            self.proc.kill()
            raise AssertionError("server did not start:\n" + "".join(self.lines))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


@pytest.fixture(scope="module")
def server():
    """The server process shared by this module's tests; at the end it must stop on SIGTERM with
    exit status 0 and no traceback in its log (an exception escaping a connection shows there)."""
    s = ServerProcess()
    try:
        yield s
        assert s.stop() == 0, "".join(s.lines)
        log = "".join(s.lines)
        assert "Traceback" not in log and "exception was never retrieved" not in log, log
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait(30)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 4 * READ_TIMEOUT))


async def describe(port):
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Describe().event())
        return Info.from_event(await read(client))


def test_describe_info(server):
    info = run(describe(server.port))
    assert len(info.asr) == 1 and len(info.asr[0].models) == 1
    program, model = info.asr[0], info.asr[0].models[0]
    assert program.supports_transcript_streaming is True
    assert program.installed and model.installed and program.version and model.attribution.url
    assert model.name == "default"
    assert model.languages == list(LANGUAGE_CODES.values())  # all 30, as codes
    assert {"en", "zh", "yue"} <= set(model.languages)


@pytest.mark.parametrize("clip, language", [("en_1.wav", None), ("zh_1.wav", None), ("zh_2.wav", "zh")])
def test_transcript_16k_mono(server, clip, language):
    events = run(utterance(server.port, read_wav(clip).tobytes(), language=language))
    check_order(events)
    t = final_text(events)
    assert t.text == EXPECTED[clip]
    assert t.language == clip[:2]


@pytest.mark.parametrize("clip", ["en_1.wav", "zh_1.wav"])
def test_transcript_44k_stereo(server, clip):
    events = run(utterance(server.port, stereo_44k(read_wav(clip)), rate=44100, width=2, channels=2))
    check_order(events)
    assert final_text(events).text == EXPECTED[clip]


def test_streaming_chunks_arrive_while_audio_arrives(server):
    """Two commands with a pause: the first is sent as transcript-chunk before audio-stop is sent."""
    pcm = joined(["en_1.wav", "en_2.wav"]).tobytes()
    split = int(4.5 * 16000) * 2  # the first 2 s chunk boundary in the pause commits the first command

    async def go():
        async with AsyncTcpClient("127.0.0.1", server.port) as client:
            await client.write_event(Transcribe().event())
            await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
            for ev in chunks_of(pcm[:split], 16000, 2, 1):
                await client.write_event(ev)
            early = [await read(client)]
            while not TranscriptChunk.is_type(early[-1].type):  # wait (bounded) for the first piece
                assert early[-1].type == "transcript-start", early[-1]
                early.append(await read(client))
            for ev in chunks_of(pcm[split:], 16000, 2, 1):
                await client.write_event(ev)
            await client.write_event(AudioStop().event())
            return early, await events_until_stop(client)

    early, late = run(go())
    assert [e.type for e in early] == ["transcript-start", "transcript-chunk"]
    assert TranscriptChunk.from_event(early[1]).text == "open the back door"
    events = early + late
    check_order(events)
    assert final_text(events).text == "open the back door switch off the bedroom radio"


def test_concurrent_clients_each_get_their_own_text(server):
    clips = ["en_1.wav", "en_2.wav", "zh_1.wav", "zh_3.wav", "en_3.wav", "zh_2.wav"]

    async def go():
        return await asyncio.gather(*(utterance(server.port, read_wav(c).tobytes()) for c in clips))

    for clip, events in zip(clips, run(go())):
        check_order(events)
        assert final_text(events).text == EXPECTED[clip]


def test_silence_gives_empty_transcript(server):
    events = run(utterance(server.port, np.zeros(16000, np.int16).tobytes()))
    check_order(events)
    assert final_text(events).text == ""


def test_biasing_fields_accepted(server):
    events = run(utterance(server.port, read_wav("en_1.wav").tobytes(), language="en-US",
                           transcript_names=["Back Door"], transcript_terms=["door"], context={"turn": 1}))
    check_order(events)
    t = final_text(events)
    assert t.text == EXPECTED["en_1.wav"] and t.language == "en"
    assert t.context == {"turn": 1}  # a context object is copied back
    assert TranscriptStart.from_event(events[0]).language == "en"


def test_names_and_terms_reach_the_model(server, engine):
    """Home Assistant's names and terms are the model's context: the transcript equals the
    engine's own stream with that context (Wyoming's 2 s chunks), which differs from the stream
    without it for this clip (else the test could not tell)."""
    from qwen3asr.server.wyoming import WyomingOptions, biasing_text

    from server_proc import engine_stream

    names, terms = ["Living Room Fan", "Bedroom Radio", "Back Door"], ["thermostat", "garage"]
    pcm = read_wav("zh_2.wav")
    chunk = WyomingOptions().chunk_size
    biased = engine_stream(engine, pcm, chunk, context=biasing_text(None, names, terms))
    assert biased != engine_stream(engine, pcm, chunk)
    events = run(utterance(server.port, pcm.tobytes(), transcript_names=names, transcript_terms=terms))
    check_order(events)
    assert final_text(events).text == biased


# ---------------------------------------------------------------------------- faults (real process)
def test_chunk_before_start_is_an_error_then_the_connection_works(server):
    async def go():
        async with AsyncTcpClient("127.0.0.1", server.port) as client:
            pcm = read_wav("en_1.wav").tobytes()
            for ev in list(chunks_of(pcm, 16000, 2, 1))[:3]:
                await client.write_event(ev)
            await client.write_event(AudioStop().event())
            first = [await read(client), await read(client)]
            await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
            for ev in chunks_of(pcm, 16000, 2, 1):
                await client.write_event(ev)
            await client.write_event(AudioStop().event())
            return first, await events_until_stop(client)

    first, then = run(go())
    assert Error.is_type(first[0].type) and Error.from_event(first[0]).code == "audio-not-started"
    assert "audio-start" in Error.from_event(first[0]).text
    assert Transcript.is_type(first[1].type) and Transcript.from_event(first[1]).text == ""  # one error, then ""
    check_order(then)
    assert final_text(then).text == EXPECTED["en_1.wav"]


async def raw_exchange(port, data: bytes, pause: float = 0.0):
    """Send raw bytes (then wait ``pause`` s before reading); return the events received until
    the server closes (bounded)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        await asyncio.sleep(pause)
        events = []
        while True:
            ev = await asyncio.wait_for(async_read_event(reader), READ_TIMEOUT)
            if ev is None:
                return events
            events.append(ev)
    finally:
        writer.close()


@pytest.mark.parametrize("header, code", [
    ({"type": "audio-chunk", "data": {"rate": 16000, "width": 2, "channels": 1}, "payload_length": 10 ** 12},
     "event-too-large"),
    ({"type": "transcribe", "data_length": 2 ** 40}, "event-too-large"),
    ({"type": "audio-chunk", "payload_length": "lots"}, "bad-event"),
    ([1, 2, 3], "bad-event"),
])
def test_bad_header_is_refused_without_waiting(server, header, code):
    """No body follows the header: the server must answer from the header alone, then close."""
    events = run(raw_exchange(server.port, json.dumps(header).encode() + b"\n"))
    assert [e.type for e in events] == ["error"]
    assert Error.from_event(events[0]).code == code
    assert run(describe(server.port)).asr[0].name == "qwen3asr-rk"  # the server keeps serving


@pytest.mark.parametrize("size, pause", [(200 * 1024, 0.0), (2 * 1024 * 1024, 0.2)])
def test_oversized_header_line_is_refused(server, size, pause):
    """The error reaches the client even when the server stops reading with much of the client's
    data unread and the client reads late (closing on unread input used to reset the
    connection and destroy the error: 10 of 10 times with 2 MiB and a 0.2 s pause)."""
    events = run(raw_exchange(server.port, b'{"type": "' + b"x" * size + b'"}\n', pause))
    assert [(e.type, Error.from_event(e).code) for e in events] == [("error", "event-too-large")]


def test_unknown_events_are_ignored(server):
    async def go():
        async with AsyncTcpClient("127.0.0.1", server.port) as client:
            await client.write_event(wyoming.event.Event(type="frobnicate", data={"x": 1}, payload=b"\x00" * 10))
            await client.write_event(Ping(text="still there?").event())
            return await read(client)

    assert Pong.from_event(run(go())).text == "still there?"


def test_bad_language_and_format_are_errors(server):
    events = run(utterance(server.port, read_wav("en_1.wav").tobytes(), language="Klingon"))
    assert events[0].type == "error" and Error.from_event(events[0]).code == "bad-language"
    assert "English (en)" in Error.from_event(events[0]).text  # names what is accepted

    async def bad_width():
        async with AsyncTcpClient("127.0.0.1", server.port) as client:
            await client.write_event(AudioStart(rate=16000, width=5, channels=1).event())
            await client.write_event(AudioChunk(rate=16000, width=5, channels=1, audio=b"\x00" * 50).event())
            await client.write_event(AudioStop().event())
            return [await read(client), await read(client)]

    err, after = run(bad_width())
    assert Error.from_event(err).code == "bad-audio-format" and "width" in Error.from_event(err).text
    assert Transcript.from_event(after).text == ""  # the refused utterance still ends with a transcript


def test_sigterm_exits_cleanly():
    s = ServerProcess()
    events = run(utterance(s.port, read_wav("zh_1.wav").tobytes()))
    assert final_text(events).text == EXPECTED["zh_1.wav"]
    assert s.stop() == 0, "".join(s.lines)


# ---------------------------------------------------------------------------- in this process
@pytest.fixture(scope="module")
def engine():
    from qwen3asr import Qwen3ASREngine

    return Qwen3ASREngine(MODEL_DIR, backend="onnx", threads=2)


async def in_process(engine, scheduler, scenario, options=None):
    """Run ``scenario(port)`` against serve()/serve_wyoming() in this event loop; then stop the server."""
    from qwen3asr.server.wyoming import serve, serve_wyoming

    stop, ready = asyncio.Event(), asyncio.Event()
    import socket

    with socket.socket() as s:  # a free loopback port (serve logs the real one; here we need it up front)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"tcp://127.0.0.1:{port}"
    if options is None:
        task = asyncio.create_task(serve_wyoming(uri, engine, scheduler, stop=stop, ready=ready))
    else:
        task = asyncio.create_task(serve(uri, engine, scheduler, options, stop=stop, ready=ready))
    await asyncio.wait_for(ready.wait(), READ_TIMEOUT)
    try:
        return await scenario(port)
    finally:
        stop.set()
        await asyncio.wait_for(task, READ_TIMEOUT)


def test_client_gone_mid_utterance_is_cancelled(engine):
    """The client closes after half the audio: its scheduler client is cancelled and closed; the
    server still answers the next client."""
    from qwen3asr.server.scheduler import Scheduler

    scheduler = Scheduler(max_clients=4)
    pcm = joined(["en_1.wav", "en_2.wav", "en_3.wav"]).tobytes()

    async def scenario(port):
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
            assert TranscriptStart.is_type((await read(client)).type)  # admitted
            for ev in list(chunks_of(pcm, 16000, 2, 1))[:45]:
                await client.write_event(ev)
        for _ in range(int(READ_TIMEOUT * 100)):  # bounded wait for the server to notice
            if scheduler.stats().active == 0:
                break
            await asyncio.sleep(0.01)
        stats = scheduler.stats()
        events = await utterance(port, read_wav("en_2.wav").tobytes())
        return stats, events

    stats, events = asyncio.run(in_process(engine, scheduler, scenario))
    assert stats.cancelled == 1 and stats.active == 0 and stats.admitted == 1
    assert final_text(events).text == EXPECTED["en_2.wav"]
    assert scheduler.stats().active == 0 and scheduler.stats().admitted == 2


def test_full_scheduler_is_an_error_then_close_at_audio_stop(engine):
    from qwen3asr.server.scheduler import Scheduler

    scheduler = Scheduler(max_clients=1)

    async def scenario(port):
        async with AsyncTcpClient("127.0.0.1", port) as first:
            await first.write_event(AudioStart(rate=16000, width=2, channels=1).event())
            assert TranscriptStart.is_type((await read(first)).type)  # holds the only slot
            async with AsyncTcpClient("127.0.0.1", port) as second:
                await second.write_event(AudioStart(rate=16000, width=2, channels=1).event())
                error = await read(second)
                # as Home Assistant does, it goes on sending its utterance: no reset mid-send
                for ev in chunks_of(read_wav("en_1.wav").tobytes(), 16000, 2, 1):
                    await second.write_event(ev)
                await second.write_event(AudioStop().event())
                refused = [error, await read(second)]
            for ev in chunks_of(read_wav("zh_1.wav").tobytes(), 16000, 2, 1):
                await first.write_event(ev)
            await first.write_event(AudioStop().event())
            return refused, await events_until_stop(first)

    refused, events = asyncio.run(in_process(engine, scheduler, scenario))
    assert Error.from_event(refused[0]).code == "busy" and "limit 1" in Error.from_event(refused[0]).text
    assert refused[1] is None  # then, at its audio-stop, the server closed the connection
    assert final_text(events).text == EXPECTED["zh_1.wav"]  # the admitted client is unaffected
    assert scheduler.stats().rejected == 1


def test_stalled_utterance_and_event_body_time_out(engine, monkeypatch):
    """An utterance with no event for IDLE_TIMEOUT_S, and a header whose payload never follows
    (BODY_TIMEOUT_S), end with an error event and a closed connection (limits shortened here)."""
    from qwen3asr.server.scheduler import Scheduler
    from qwen3asr.server.wyoming import protocol

    monkeypatch.setattr(protocol, "IDLE_TIMEOUT_S", 0.5)
    monkeypatch.setattr(protocol, "BODY_TIMEOUT_S", 0.5)
    scheduler = Scheduler()

    async def scenario(port):
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(AudioStart(rate=16000, width=2, channels=1).event())
            stalled = [await read(client), await read(client), await read(client)]
        header = {"type": "audio-chunk", "data": {"rate": 16000, "width": 2, "channels": 1}, "payload_length": 100}
        body = await raw_exchange(port, json.dumps(header).encode() + b"\n" + b"\x00" * 10)
        return stalled, body

    stalled, body = asyncio.run(in_process(engine, scheduler, scenario))
    assert [e.type if e else None for e in stalled] == ["transcript-start", "error", None]
    assert Error.from_event(stalled[1]).code == "timeout" and "audio-stop" in Error.from_event(stalled[1]).text
    assert [(e.type, Error.from_event(e).code) for e in body] == [("error", "timeout")]
    assert scheduler.stats().active == 0 and scheduler.stats().cancelled == 1


def test_one_pass_final_option(engine):
    """final="one-pass": the transcript is the engine's one-pass text of the same audio."""
    from qwen3asr.server.scheduler import Scheduler
    from qwen3asr.server.wyoming import WyomingOptions

    pcm = joined(["en_1.wav", "en_2.wav", "en_3.wav"])  # 8.7 s: within the bundled model's 10 s one-pass limit
    x = pcm.astype(np.float32) / 32768
    one_pass = engine.transcribe(x).text
    session = engine.create_stream(chunk_size=WyomingOptions().chunk_size)
    session.feed_audio(x)
    # On this audio the bundled model's one pass and stream differ (docs/wyoming.md), so the
    # transcript shows which of the two made it.
    assert session.finish().text != one_pass

    async def scenario(port):
        return await utterance(port, pcm.tobytes())

    events = asyncio.run(in_process(engine, Scheduler(), scenario, WyomingOptions(final="one-pass")))
    types = [e.type for e in events]
    assert types[0] == "transcript-start" and types[-2:] == ["transcript", "transcript-stop"]
    assert final_text(events).text == one_pass


def test_the_default_final_is_one_pass_per_piece(engine):
    """final="pieces" (the default): a single command is one piece, so its transcript is the
    engine's one-pass text of the whole utterance; commands joined by pauses get one pass per
    command (where one pass over the whole utterance misreads, docs/wyoming.md)."""
    from qwen3asr.server.scheduler import Scheduler
    from qwen3asr.server.wyoming import WyomingOptions

    assert WyomingOptions().final == "pieces"
    single = read_wav("zh_2.wav")
    pcm = joined(["en_1.wav", "en_2.wav", "en_3.wav"])

    async def scenario(port):
        return [await utterance(port, single.tobytes()), await utterance(port, pcm.tobytes())]

    one_events, joined_events = asyncio.run(in_process(engine, Scheduler(), scenario, WyomingOptions()))
    assert final_text(one_events).text == engine.transcribe(single.astype(np.float32) / 32768, one_pass=True).text
    # joined: one pass per command, as the engine's own stream with final passes gives it
    s = engine.create_stream(chunk_size=WyomingOptions().chunk_size, final_pass=True)
    x = pcm.astype(np.float32) / 32768
    for i in range(0, len(x), 1600):
        s.feed_audio(x[i:i + 1600])
    r = s.finish()
    assert r.stats.final_passes == 3 and final_text(joined_events).text == r.text
    assert r.text == " ".join(EXPECTED[n] for n in ("en_1.wav", "en_2.wav", "en_3.wav"))
    assert r.text != engine.transcribe(x, one_pass=True).text  # the whole-utterance pass misreads here


# ---------------------------------------------------------------------------- units without a model
def test_language_and_biasing_helpers():
    from qwen3asr.server.wyoming import UtteranceError, biasing_text, resolve_wyoming_language

    assert resolve_wyoming_language("en") == "English"
    assert resolve_wyoming_language("en-US") == "English"
    assert resolve_wyoming_language("zh_CN") == "Chinese"
    assert resolve_wyoming_language("Cantonese") == "Cantonese"
    assert resolve_wyoming_language(None) is None and resolve_wyoming_language(" ") is None
    with pytest.raises(UtteranceError, match="accepted"):
        resolve_wyoming_language("xx-YY")
    assert biasing_text("Kitchen", ["Back Door", "Garage"], ["thermostat"]) == "Kitchen\nBack Door, Garage\nthermostat"
    assert biasing_text({"conversation": 1}, None, []) == ""
    many = [f"name {i}" for i in range(1000)]
    text = biasing_text(None, many, ["term"])
    assert len(text) <= 2000 and text.startswith("name 0, name 1") and "term" not in text  # names first
