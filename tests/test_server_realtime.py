"""OpenAI Realtime transcription sessions (/v1/realtime) with the official `openai` SDK's
realtime client against a real server process on the bundled model (and its bundled aligner):
the completed transcript is the engine's own stream of the same audio with final passes (the
default, docs/streaming.md), which the deltas add up to unless the final pass revised them;
server VAD cuts items at silence; manual commits; the errors and closes of bad clients, after
which the server goes on serving."""

from __future__ import annotations

import asyncio
import base64
import json

import numpy as np
import pytest

openai = pytest.importorskip("openai", reason="the openai client is needed (pip install -e '.[dev]')")
websockets = pytest.importorskip("websockets", reason="the realtime client needs websockets (the server extra)")
pytest.importorskip("uvicorn", reason="the server extra is needed (pip install '.[server]')")

from server_proc import ServerProcess, expected  # noqa: E402
from qwen3asr_tools.bench_server import load_clip  # noqa: E402

KEY = "k-realtime"
FRAME = 0.1  # seconds of audio per append


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = str(tmp_path_factory.mktemp("realtime") / "server.log")
    with ServerProcess("--api-key", KEY, log_path=log) as s:
        yield s


@pytest.fixture(scope="module")
def engine(server_engine):
    return server_engine


def _client(server, key=KEY):
    return openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def _engine_stream(engine, x: np.ndarray, chunk: float, final_pass: bool = True, **kw):
    """The engine's stream of (n,) float32 16 kHz audio with the settings a realtime item uses."""
    s = engine.create_stream(chunk_size=chunk, final_pass=final_pass, **kw)
    for i in range(0, len(x), 1600):
        s.feed_audio(x[i:i + 1600])
    return s.finish()


def _b64(pcm: np.ndarray) -> str:
    return base64.b64encode(pcm.tobytes()).decode()


def _frames(pcm: np.ndarray, rate: int):
    n = int(rate * FRAME)
    return [pcm[i:i + n] for i in range(0, len(pcm), n)]


async def _events_until(conn, done, timeout=120.0) -> list:
    """Events (as dicts) until ``done(events)`` is true."""
    got = []

    async def read():
        async for ev in conn:
            got.append(ev.to_dict() if hasattr(ev, "to_dict") else ev)
            if done(got):
                return

    await asyncio.wait_for(read(), timeout)
    return got


def _completed(events) -> list:
    return [e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed"]


def _session(fmt=None, turn_detection="keep", **transcription):
    inp = {}
    if fmt is not None:
        inp["format"] = fmt
    if turn_detection != "keep":
        inp["turn_detection"] = turn_detection
    if transcription:
        inp["transcription"] = transcription
    return {"type": "transcription", "audio": {"input": inp}}


async def _manual(server, pcm: np.ndarray, rate: int, session: dict, key=KEY, include=None):
    """One session: settings, the audio in 100 ms appends, a commit; its events up to completed."""
    if include is not None:
        session = {**session, "include": include}
    async with _client(server, key).realtime.connect(extra_query={"intent": "transcription"}) as conn:
        first = await conn.recv()
        assert first.type == "session.created"
        await conn.session.update(session=session)
        updated = (await _events_until(conn, lambda ev: True))[0]
        assert updated["type"] == "session.updated", updated
        for f in _frames(pcm, rate):
            await conn.input_audio_buffer.append(audio=_b64(f))
        await conn.input_audio_buffer.commit()
        return [first.to_dict(), updated] + await _events_until(conn, lambda ev: bool(_completed(ev)))


def _check_item_events(events, revised: bool = False) -> dict:
    """The item events in the SDK's order; returns the completed event. The deltas join to the
    completed transcript, or (``revised``: the final pass changed the streamed text) to text it
    does not continue."""
    kinds = [e["type"] for e in events]
    done = _completed(events)
    assert len(done) == 1
    item = done[0]["item_id"]
    i_commit = kinds.index("input_audio_buffer.committed")
    assert events[i_commit]["item_id"] == item
    assert kinds.index("conversation.item.added") > i_commit
    deltas = [e for e in events if e["type"].endswith("transcription.delta")]
    assert all(d["item_id"] == item for d in deltas)
    joined = "".join(d["delta"] for d in deltas)
    if revised:
        assert joined and not done[0]["transcript"].startswith(joined)
    else:
        assert joined == done[0]["transcript"]
    return done[0]


@pytest.mark.parametrize("name,delay,chunk", [("en_1.wav", "medium", 2.0), ("en_3.wav", "low", 1.0),
                                              ("zh_2.wav", "medium", 2.0)])
def test_deltas_add_up_to_the_completed_text_which_is_the_engines_stream(server, engine, name, delay, chunk):
    pcm, sr = load_clip(name)
    events = asyncio.run(_manual(server, pcm, sr, _session({"type": "audio/pcm", "rate": sr}, None, delay=delay)))
    assert events[0]["session"]["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert events[1]["session"]["audio"]["input"]["turn_detection"] is None
    done = _check_item_events(events)
    ref = _engine_stream(engine, pcm.astype(np.float32) / 32768, chunk)
    assert done["transcript"] == ref.text
    assert done["transcript"] == expected(name)
    assert done["usage"] == {"type": "duration", "seconds": round(len(pcm) / sr, 3)}


def test_the_default_final_pass_revises_the_streamed_deltas(server, engine):
    """zh_2 at the default delay (1 s chunks): the streamed text is wrong, the completed
    transcript is the final pass's, which is right (docs/streaming.md, "Each surface's default")."""
    pcm, sr = load_clip("zh_2.wav")
    events = asyncio.run(_manual(server, pcm, sr, _session({"type": "audio/pcm", "rate": sr}, None)))
    assert events[1]["session"]["audio"]["input"]["transcription"].get("delay", "low") == "low"
    done = _check_item_events(events, revised=True)
    x = pcm.astype(np.float32) / 32768
    streamed = _engine_stream(engine, x, 1.0, final_pass=False).text
    assert done["transcript"] == _engine_stream(engine, x, 1.0).text == expected("zh_2.wav") != streamed


def test_default_24khz_pcm16(server, engine):
    """The SDK's default format: PCM16 at 24 kHz, resampled by the server as qwen3asr.audio does."""
    import soxr

    from qwen3asr.audio import PcmConverter, PcmFormat

    pcm, sr = load_clip("en_3.wav")
    x24 = np.clip(np.round(soxr.resample(pcm.astype(np.float32), sr, 24000)), -32768, 32767).astype(np.int16)
    events = asyncio.run(_manual(server, x24, 24000, _session(None, None, delay="low")))
    done = _check_item_events(events)
    conv = PcmConverter(PcmFormat(24000, 2, 1))  # what the server makes of the same appends
    x16 = np.concatenate([conv.convert(f.tobytes()) for f in _frames(x24, 24000)] + [conv.flush()])
    assert done["transcript"] == _engine_stream(engine, x16, 1.0).text == expected("en_3.wav")


def test_g711_ulaw(server, engine):
    audioop = pytest.importorskip("audioop", reason="the test encodes mu-law with audioop (Python < 3.13)")
    from qwen3asr.audio import PcmConverter, PcmFormat

    pcm, sr = load_clip("en_3.wav")
    import soxr

    x8 = np.round(soxr.resample(pcm.astype(np.float32), sr, 8000)).astype(np.int16)
    ulaw = np.frombuffer(audioop.lin2ulaw(x8.tobytes(), 2), np.uint8)
    events = asyncio.run(_manual(server, ulaw, 8000, {"type": "transcription", "audio": {"input": {
        "format": {"type": "audio/pcmu"}, "turn_detection": None, "transcription": {"delay": "low"}}}}))
    done = _check_item_events(events)
    conv = PcmConverter(PcmFormat(8000, 2, 1))
    back = audioop.ulaw2lin(ulaw.tobytes(), 2)
    x16 = np.concatenate([conv.convert(back[i:i + 1600]) for i in range(0, len(back), 1600)] + [conv.flush()])
    assert done["transcript"] == _engine_stream(engine, x16, 1.0).text


def test_server_vad_cuts_two_utterances_into_two_items(server, engine):
    a, sr = load_clip("en_1.wav")
    b, _ = load_clip("en_3.wav")
    gap = np.zeros(int(1.5 * sr), np.int16)
    pcm = np.concatenate([gap[:sr // 2], a, gap, b, gap])

    async def run():
        async with _client(server).realtime.connect(extra_query={"intent": "transcription"}) as conn:
            await conn.recv()
            await conn.session.update(session=_session({"type": "audio/pcm", "rate": sr},
                                                       {"type": "server_vad", "silence_duration_ms": 500},
                                                       delay="medium"))
            for f in _frames(pcm, sr):
                await conn.input_audio_buffer.append(audio=_b64(f))
            return await _events_until(conn, lambda ev: len(_completed(ev)) == 2)

    events = asyncio.run(run())
    assert events[0]["type"] == "session.updated"
    assert events[0]["session"]["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    starts = [e for e in events if e["type"] == "input_audio_buffer.speech_started"]
    stops = [e for e in events if e["type"] == "input_audio_buffer.speech_stopped"]
    done = _completed(events)
    assert len(starts) == len(stops) == len(done) == 2
    assert [s["item_id"] for s in starts] == [s["item_id"] for s in stops] == [d["item_id"] for d in done]
    committed = [e for e in events if e["type"] == "input_audio_buffer.committed"]
    assert committed[0]["previous_item_id"] is None and committed[1]["previous_item_id"] == done[0]["item_id"]
    x = pcm.astype(np.float32) / 32768
    for s, e, d, name in zip(starts, stops, done, ("en_1.wav", "en_3.wav")):
        item = x[s["audio_start_ms"] * 16:e["audio_end_ms"] * 16]  # the VAD's boundaries are whole ms here
        assert d["transcript"] == _engine_stream(engine, item, 2.0).text == expected(name)
        deltas = [v["delta"] for v in events if v["type"].endswith(".delta") and v["item_id"] == d["item_id"]]
        assert "".join(deltas) == d["transcript"]
    assert stops[0]["audio_end_ms"] <= starts[1]["audio_start_ms"]


@pytest.mark.parametrize("spans", [None, "raw", "checked"])
def test_word_times_extension(server, engine, spans):
    """The words of each completed event are the engine stream's, with the word spans asked for
    (``transcription.word_spans``, this server's extension; absent: ``speech``), echoed back."""
    a, sr = load_clip("en_1.wav")
    b, _ = load_clip("en_3.wav")
    pcm = np.concatenate([a, np.zeros(int(0.6 * sr), np.int16), b])  # a pause: speech spans end before it
    given = {} if spans is None else {"word_spans": spans}
    events = asyncio.run(_manual(server, pcm, sr, _session({"type": "audio/pcm", "rate": sr}, None, delay="medium",
                                                           **given),
                                 include=["item.input_audio_transcription.words"]))
    assert events[1]["session"]["audio"]["input"]["transcription"]["word_spans"] == (spans or "speech")
    done = _check_item_events(events)
    x = pcm.astype(np.float32) / 32768
    ref = _engine_stream(engine, x, 2.0, word_timestamps=True, word_spans=spans or "speech")
    assert done["words"] == [w.to_dict() for s in ref.segments for w in s.words] and done["words"]
    if spans == "raw":  # the official times: not the spans fitted to the speech
        speech = _engine_stream(engine, x, 2.0, word_timestamps=True)
        assert done["words"] != [w.to_dict() for s in speech.segments for w in s.words]


def test_beta_transcription_session_update(server):
    async def run():
        async with _client(server).realtime.connect(extra_query={"intent": "transcription"}) as conn:
            await conn.recv()
            await conn.send({"type": "transcription_session.update", "session": {
                "input_audio_format": "g711_alaw", "turn_detection": None,
                "input_audio_transcription": {"model": "gpt-4o-transcribe", "language": "en", "prompt": "doors",
                                              "word_spans": "raw"},
                "input_audio_noise_reduction": {"type": "near_field"}}})
            return (await _events_until(conn, lambda ev: True))[0]

    ev = asyncio.run(run())
    assert ev["type"] == "transcription_session.updated"
    s = ev["session"]
    assert s["input_audio_format"] == "g711_alaw" and s["turn_detection"] is None
    assert s["input_audio_transcription"]["language"] == "en" and s["input_audio_transcription"]["prompt"] == "doors"
    assert s["input_audio_transcription"]["word_spans"] == "raw"
    assert s["input_audio_noise_reduction"] is None  # asked for, not applied


# ---------------------------------------------------------------------- errors
def _error(ev: dict, code: str) -> str:
    assert ev["type"] == "error", ev
    assert ev["error"]["code"] == code, ev
    return ev["error"]["message"]


def test_wrong_key_is_an_error_event_then_close_1008(server):
    async def run(key):
        async with _client(server, key).realtime.connect(extra_query={"intent": "transcription"}) as conn:
            ev = (await conn.recv()).to_dict()
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await conn.recv()
            return ev, closed.value.rcvd.code

    ev, code = asyncio.run(run("wrong"))
    assert "incorrect API key" in _error(ev, "invalid_api_key") and code == 1008


def test_bad_events_are_errors_and_the_session_goes_on(server, engine):
    pcm, sr = load_clip("en_3.wav")

    async def run():
        async with _client(server).realtime.connect(extra_query={"intent": "transcription"}) as conn:
            await conn.recv()
            out = []
            for event in (
                    {"type": "session.update", "session": _session({"type": "audio/flac"})},
                    {"type": "session.update", "session": _session({"type": "audio/pcm", "rate": 4000})},
                    {"type": "session.update", "session": {"type": "transcription",
                                                           "include": ["item.input_audio_transcription.logprobs"]}},
                    {"type": "session.update", "session": _session(None, {"type": "semantic_vad"})},
                    {"type": "session.update", "session": _session(None, word_spans="exact")},
                    {"type": "session.update", "session": {"type": "realtime"}},
                    {"type": "response.create", "event_id": "e-resp"},
                    {"type": "no.such.event", "event_id": "e-unknown"},
                    {"type": "input_audio_buffer.append", "audio": "not base64!!"},
                    {"type": "input_audio_buffer.commit", "event_id": "e-empty"}):
                await conn.send(event)
                out.append((await _events_until(conn, lambda ev: True))[0])
            await conn._connection.send("{not json")  # what the SDK never sends
            out.append((await _events_until(conn, lambda ev: True))[0])
            await conn.input_audio_buffer.append(audio=_b64(pcm[:8000]))
            await conn.input_audio_buffer.clear()
            out.append((await _events_until(conn, lambda ev: True))[0])
            await conn.session.update(session=_session({"type": "audio/pcm", "rate": sr}, None, delay="low"))
            for f in _frames(pcm, sr):
                await conn.input_audio_buffer.append(audio=_b64(f))
            await conn.input_audio_buffer.commit()
            return out, await _events_until(conn, lambda ev: bool(_completed(ev)))

    out, events = asyncio.run(run())
    assert "audio/pcm" in _error(out[0], "invalid_audio_format")
    assert out[0]["error"]["param"] == "session.audio.input.format.type"
    assert ">= 8000 and <= 192000" in _error(out[1], "invalid_audio_format")
    assert "log probabilities" in _error(out[2], "unsupported_value")
    assert "server_vad" in _error(out[3], "unsupported_value")
    assert "speech, raw, checked" in _error(out[4], "invalid_value")
    assert out[4]["error"]["param"] == "session.audio.input.transcription.word_spans"
    out = out[:4] + out[5:]
    assert "intent=transcription" in _error(out[4], "unsupported_session_type")
    assert "not part of a transcription session" in _error(out[5], "unsupported_event")
    assert out[5]["error"]["event_id"] == "e-resp"
    assert "input_audio_buffer.append" in _error(out[6], "unknown_event") and out[6]["error"]["event_id"] == "e-unknown"
    _error(out[7], "invalid_audio")
    assert "100 ms" in _error(out[8], "input_audio_buffer_commit_empty") and out[8]["error"]["event_id"] == "e-empty"
    _error(out[9], "invalid_json")
    assert out[10]["type"] == "input_audio_buffer.cleared"
    updated = events[0]
    assert updated["type"] == "session.updated" and updated["session"]["audio"]["input"]["format"]["rate"] == sr
    done = _check_item_events(events[1:])
    # the cleared half second is not in the item: the text is the clip's alone
    assert done["transcript"] == _engine_stream(engine, pcm.astype(np.float32) / 32768, 1.0).text


def test_oversize_append_closes_1009_and_others_are_served(server):
    big = np.zeros(800_000, np.int16)  # 1.6 MB of PCM: over the 1 MiB event limit once in base64

    async def run():
        async with _client(server).realtime.connect(extra_query={"intent": "transcription"}) as conn:
            await conn.recv()
            # the server may close while the 2 MB frame is still being sent: the send raises then
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await conn.input_audio_buffer.append(audio=_b64(big))
                await conn.recv()
            return closed.value.rcvd.code

    assert asyncio.run(run()) == 1009
    pcm, sr = load_clip("en_3.wav")
    events = asyncio.run(_manual(server, pcm, sr, _session({"type": "audio/pcm", "rate": sr}, None, delay="low")))
    assert _check_item_events(events)["transcript"] == expected("en_3.wav")


def test_a_client_that_vanishes_mid_item_frees_its_place(server):
    pcm, sr = load_clip("long_mixed.wav")

    async def vanish():
        ws = await websockets.connect(server.ws_url + "/v1/realtime?intent=transcription",
                                      additional_headers={"Authorization": f"Bearer {KEY}"})
        json.loads(await ws.recv())
        await ws.send(json.dumps({"type": "session.update", "session": _session({"type": "audio/pcm", "rate": sr},
                                                                                  None, delay="minimal")}))
        for f in _frames(pcm[:20 * sr], sr):
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": _b64(f)}))
        ws.transport.abort()  # gone without a close frame, mid-item

    asyncio.run(vanish())
    pcm3, _ = load_clip("en_3.wav")
    events = asyncio.run(_manual(server, pcm3, sr, _session({"type": "audio/pcm", "rate": sr}, None, delay="low")))
    assert _check_item_events(events)["transcript"] == expected("en_3.wav")

    async def settle():
        for _ in range(100):
            if server.health()[1]["active"] == 0:
                return True
            await asyncio.sleep(0.1)
        return False

    assert asyncio.run(settle()), server.health()


def test_the_key_as_a_browser_subprotocol(server):
    async def run(key):
        async with websockets.connect(server.ws_url + "/v1/realtime?intent=transcription",
                                      subprotocols=["realtime", f"openai-insecure-api-key.{key}"]) as ws:
            return ws.subprotocol, json.loads(await ws.recv())

    proto, ev = asyncio.run(run(KEY))
    assert proto == "realtime" and ev["type"] == "session.created"
    _, ev = asyncio.run(run("nope"))
    _error(ev, "invalid_api_key")
