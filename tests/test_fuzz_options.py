"""Bad values for every option of every surface (issue 26, item 2).

The options are discovered, never listed: the fields of the options dataclasses, the keyword
arguments of the engine's entry points (inspect.signature), the flags of every program named in
pyproject.toml's [project.scripts] (its build_parser()._actions), the fields of the WebSocket
start message and the data fields of the Wyoming events (the wyoming package's own dataclasses),
so a new option is covered without editing this file. Each gets BAD values (0, negative, huge,
NaN, infinities, wrong types, a 1 MB string) and must give a clear error that names the field
(one short line: never a 1 MB echo, never a bare comparison error), or, where the value is legal,
a sane answer; never a traceback, a hang (every call runs under a deadline) or an allocation in
proportion to the number (every library call runs under a traced-memory ceiling). The servers
(one real process: HTTP, WebSocket and Wyoming) answer every bad value with their error (400 with
``param``, an error message and close 1007, an error event), log no traceback, and answer a good
request correctly afterwards.

The library takes the full set of values; the programs and the servers a smaller one (what their
own parsing adds), so the module stays well under two minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import inspect
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import tomllib
import tracemalloc
import wave

import pytest

from qwen3asr import Qwen3ASREngine, TranscribeOptions
from qwen3asr.backends import BackendOptions, PrefixCacheOptions, RKOptions
from qwen3asr.decoding import DecodingOptions, RepetitionGuard
from qwen3asr.errors import Qwen3ASRError
from qwen3asr.options import ALIASES
from qwen3asr.vad import VADOptions
from server_proc import AUDIO, ROOT, ServerProcess, expected, free_port, multipart, post_raw, read_until_closed

CLIP = os.path.join(AUDIO, "en_1.wav")
HUGE = "x" * 1_000_000  # a 1 MB string
BAD = {"0": 0, "-1": -1, "1e9": 1e9, "1e300": 1e300, "2**63": 2**63, "nan": math.nan, "inf": math.inf,
       "-inf": -math.inf, "str": "x", "list": [1], "dict": {"a": 1}, "bool": True, "1MB": HUGE}
# what a program's flag or an HTTP form field receives: text
BAD_TEXT = {"-1": "-1", "nan": "nan", "inf": "inf", "1e300": "1e300", "2**63": str(2**63), "str": "x",
            "1MB": HUGE}
# what the servers' JSON fields receive (NaN and infinities as Python's json writes them)
BAD_JSON = {k: BAD[k] for k in ("-1", "nan", "1e300", "2**63", "str", "list", "1MB")}
DEADLINE_S = 30.0  # bound on any one call or exchange (a hang fails the test); not a latency
PEAK_MB = 200  # traced Python/numpy memory one library call may allocate
MAX_MESSAGE = 2000  # characters of a clear error (a list of the accepted languages fits)
ERRORS = (ValueError, TypeError, Qwen3ASRError)

OPTION_CLASSES = (TranscribeOptions, DecodingOptions, RepetitionGuard, VADOptions, RKOptions, BackendOptions,
                  PrefixCacheOptions)
# Engine keyword arguments spelled as the reference design does: their errors name the option they set.
ENGINE_ALIASES = {"platform": "soc", "enabled_cpus": "cpus", **ALIASES}
# Program flags whose errors name the library field they set.
FLAG_FIELDS = {"start": "start_second", "rkllm_lib": "lib_path", "rkllm_abi": "abi", "uri": "URI",
               "wyoming": "URI", "model": "model directory"}


class Hang(Exception):
    pass


@contextlib.contextmanager
def guarded(what: str, seconds: float = DEADLINE_S, peak_mb: float | None = PEAK_MB):
    """Run the block under a deadline (SIGALRM: a hang fails) and, with ``peak_mb``, a ceiling on
    the memory it allocates (tracemalloc: numpy and Python objects)."""
    def alarm(signum, frame):
        raise Hang(f"{what}: no answer within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    if peak_mb is not None:
        tracemalloc.start()
    try:
        yield
        if peak_mb is not None:
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            assert peak < peak_mb, f"{what}: allocated {peak:.0f} MB"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if peak_mb is not None:
            tracemalloc.stop()


def assert_clear(exc: BaseException, *names: str, what: str) -> None:
    """``exc`` is a clear error: a ValueError/TypeError (or the library's own error) whose one short
    line names one of ``names``."""
    msg = str(exc)
    assert isinstance(exc, ERRORS), f"{what}: {type(exc).__name__}: {msg[:300]}"
    assert len(msg) < MAX_MESSAGE and "\n" not in msg, f"{what}: message of {len(msg)} chars: {msg[:300]}"
    low = msg.lower()
    assert any(n.lower() in low or n.lower().replace("_", " ") in low for n in names), \
        f"{what}: the message does not name {names}: {msg}"


def call(what: str, fn, *names: str, **kw):
    """``fn(**kw)`` under guard: its result, or None after a clear error naming one of ``names``."""
    try:
        with guarded(what):
            return fn(**kw)
    except Hang:
        raise
    except AssertionError:
        raise
    except BaseException as exc:  # noqa: BLE001 - anything but a clear error fails below
        assert_clear(exc, *names, what=what)
        return None


def cases(names, values=BAD):
    return [(n, k) for n in names for k in values]


@pytest.fixture(scope="module")
def engine():
    e = Qwen3ASREngine(backend="onnx", threads=1)
    yield e
    e.close()


@pytest.fixture(scope="module")
def clip():
    import soundfile as sf

    x, sr = sf.read(CLIP, dtype="float32")
    assert sr == 16000
    return x


# ---------------------------------------------------------------------- options objects
@pytest.mark.parametrize("cls", OPTION_CLASSES, ids=lambda c: c.__name__)
def test_options_objects(cls):
    """Every field of every options dataclass, every bad value: a clear error naming the field
    (ValueError, or TypeError for a wrong type), or a legal value kept."""
    checked = 0
    for f in dataclasses.fields(cls):
        for label, value in BAD.items():
            obj = call(f"{cls.__name__}({f.name}={label})", cls, f.name, **{f.name: value})
            checked += 1
            if obj is not None:
                assert isinstance(obj, cls)
    assert checked >= len(BAD)


def test_server_options_objects():
    """The same for the servers' options objects (they need the server extra)."""
    pytest.importorskip("starlette", reason="the server extra is needed (pip install '.[server]')")
    pytest.importorskip("wyoming", reason="the Wyoming server needs the 'wyoming' package (server extra)")
    from qwen3asr.server.settings import ServerSettings
    from qwen3asr.server.wyoming.utterance import UtteranceOptions, WyomingOptions

    for cls in (ServerSettings, WyomingOptions, UtteranceOptions):
        for f in dataclasses.fields(cls):
            for label, value in BAD.items():
                call(f"{cls.__name__}({f.name}={label})", cls, f.name, **{f.name: value})


def test_start_message_fields():
    """Every field of the WebSocket start message, parsed as the server does: LiveProtocolError
    (sent as an error message, then close 1007 or 1003) naming the field, or a legal start."""
    pytest.importorskip("starlette", reason="the server extra is needed (pip install '.[server]')")
    from qwen3asr.server.live import LiveProtocolError, StartMessage

    for f in dataclasses.fields(StartMessage):
        for label, value in BAD.items():
            what = f"start {f.name}={label}"
            try:
                with guarded(what):
                    StartMessage.parse(json.dumps({"type": "start", f.name: value}))
            except LiveProtocolError as exc:
                assert exc.close_code in (1003, 1007) and exc.code, what
                assert_clear(ValueError(exc.message), f.name, what=what)


# ---------------------------------------------------------------------- the engine's entry points
def _keywords(fn) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"]


TRANSCRIBE_FIELDS = [f.name for f in dataclasses.fields(TranscribeOptions)]


@pytest.mark.parametrize("name", _keywords(Qwen3ASREngine.transcribe) + TRANSCRIBE_FIELDS)
def test_transcribe_arguments(engine, clip, name):
    """engine.transcribe(audio, **{name: bad}): a clear error, or a Transcription."""
    for label, value in BAD.items():
        kw = {"audio": clip, name: value}
        r = call(f"transcribe({name}={label})", engine.transcribe, name, ENGINE_ALIASES.get(name, name), **kw)
        if r is not None:
            assert isinstance(r.text, str) and r.stats.audio_seconds > 0


@pytest.mark.parametrize("name", _keywords(Qwen3ASREngine.create_stream) + TRANSCRIBE_FIELDS)
def test_stream_arguments(engine, clip, name):
    """engine.create_stream(**{name: bad}) then 1.8 s of audio in 0.1 s pieces: a clear error
    (at creation), or a stream that finishes; with a huge VAD time the stream keeps no more audio
    than the VAD bound allows."""
    for label, value in BAD.items():
        s = call(f"create_stream({name}={label})", engine.create_stream, name, **{name: value})
        if s is None:
            continue
        with guarded(f"stream with {name}={label}"):
            for i in range(0, len(clip), 1600):
                s.feed_audio(clip[i:i + 1600])
            assert s.finish().finished


def test_vad_options_in_a_stream(engine, clip):
    """Every legal VADOptions value runs in a stream."""
    for f in dataclasses.fields(VADOptions):
        for label, value in BAD.items():
            vad = call(f"VADOptions({f.name}={label})", VADOptions, f.name, **{f.name: value})
            if vad is None:
                continue
            with guarded(f"stream with VADOptions({f.name}={label})"):
                s = engine.create_stream(vad=vad, chunk_size=1.0)
                for i in range(0, len(clip), 1600):
                    s.feed_audio(clip[i:i + 1600])
                s.finish()


@pytest.mark.parametrize("name", _keywords(Qwen3ASREngine.__init__))
def test_engine_arguments(clip, name, monkeypatch, tmp_path):
    """Qwen3ASREngine(**{name: bad}) on the bundled model: a clear error before anything loads,
    or an engine that transcribes."""
    monkeypatch.chdir(tmp_path)  # a text taken as a relative directory (prepacked_cache) is made here
    for label, value in BAD.items():
        kw = {"backend": "onnx", "threads": 1, name: value}
        e = call(f"Qwen3ASREngine({name}={label})", Qwen3ASREngine, name, ENGINE_ALIASES.get(name, name), **kw)
        if e is not None:
            with e, guarded(f"transcribe on Qwen3ASREngine({name}={label})"):
                assert isinstance(e.transcribe(clip).text, str)


def test_align_arguments(clip):
    """engine.align(audio, text, **{name: bad}) with a forced aligner (a random-weight official
    model, exported): a clear error, or words."""
    pytest.importorskip("torch", reason="the aligner bundle is built from a random official checkpoint (torch)")
    import bundles

    _, aligner = bundles.aligner_bundle("fa-tiny-a", decoders=("fp32",))
    with Qwen3ASREngine(backend="onnx", threads=1, aligner=aligner) as e:
        assert e.aligner is not None  # loaded first: memory tracing would slow the load tenfold
        for name in _keywords(Qwen3ASREngine.align):
            for label, value in BAD.items():
                kw = {"audio": clip, "text": "open the back door", "language": "English", name: value}
                words = call(f"align({name}={label})", e.align, name, **kw)
                if words is not None:
                    assert isinstance(words, list)


# ---------------------------------------------------------------------- the programs
def _programs() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["scripts"]


PROGRAMS = _programs()
BASE_ARGV = ["--backend", "onnx", "--threads", "1"]


class _Served(Exception):
    pass


@pytest.fixture
def programs(monkeypatch):
    """The programs' main() in this process, stopped where a good command line would start
    serving or capturing: a server's serve step raises _Served, the microphone has no device."""
    pytest.importorskip("uvicorn", reason="the server extra is needed (pip install '.[server]')")
    pytest.importorskip("wyoming", reason="the Wyoming server needs the 'wyoming' package (server extra)")
    from qwen3asr.cli import mic
    from qwen3asr.server import cli as serve_cli
    from qwen3asr.server.wyoming import __main__ as wyoming_main

    async def served(*args, **kwargs):
        for a in args:  # the Wyoming program loaded its engine first
            if isinstance(a, Qwen3ASREngine):
                a.close()
        raise _Served()

    def no_device():
        raise SystemExit("error: no capture device (fuzz test)")

    monkeypatch.setattr(serve_cli, "_serve", served)
    monkeypatch.setattr(wyoming_main, "serve", served)
    monkeypatch.setattr(mic, "_import_sounddevice", no_device)


def _run(main, argv, capsys, what):
    """(exit status, stderr) of main(argv) in this process."""
    with guarded(what, peak_mb=None):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
        except _Served:
            rc = 0
    out = capsys.readouterr()
    return rc, out.err


SUBCOMMAND_PROGRAMS = ("qwen3asr-models",)  # flags under subcommands: test_subcommand_flags


@pytest.mark.parametrize("script", sorted(set(PROGRAMS) - set(SUBCOMMAND_PROGRAMS)))
def test_program_flags(script, programs, capsys, monkeypatch, tmp_path):
    """Every flag that takes a value, every bad text: exit 2 with an ``error:`` line naming the
    flag (no traceback), or a run that gets as far as a good command line does."""
    monkeypatch.chdir(tmp_path)  # a text taken as a relative directory (--prepacked-cache) is made here
    module, func = PROGRAMS[script].split(":")
    mod = importlib.import_module(module)
    main = getattr(mod, func)
    needs_audio = script == "qwen3asr-transcribe"
    actions = [a for a in mod.build_parser()._actions if a.option_strings and a.nargs != 0]
    assert actions
    for action in actions:
        flag = action.option_strings[-1]
        for label, text in BAD_TEXT.items():
            argv = [f"{flag}={text}", *BASE_ARGV]
            if needs_audio:
                argv += ["--audio", CLIP, "--duration", "0.5"]
            argv = _last_wins(argv)
            what = f"{script} {flag}={label}"
            rc, err = _run(main, argv, capsys, what)
            assert "Traceback" not in err, f"{what}: {err[-2000:]}"
            if rc == 0 or (isinstance(rc, str) and "no capture device" in rc):
                continue  # legal: it ran (or reached the device / the server)
            assert rc == 2, f"{what}: exit {rc!r}: {err[-500:]}"
            line = err.strip().splitlines()[-1]
            assert "error:" in line and len(line) < MAX_MESSAGE, f"{what}: {line[:300]}"
            names = (flag, action.dest, FLAG_FIELDS.get(action.dest, action.dest))
            assert any(n.lower() in line.lower() for n in names), f"{what}: {line}"


def _last_wins(argv: list) -> list:
    """argv with each flag given once (the fuzzed one, which comes first, wins)."""
    seen, out = set(), []
    i = 0
    while i < len(argv):
        a = argv[i]
        flag = a.split("=", 1)[0]
        takes = "=" not in a
        if flag not in seen:
            seen.add(flag)
            out += argv[i:i + (2 if takes else 1)]
        i += 2 if takes else 1
    return out


@pytest.mark.parametrize("argv", [
    [sys.executable, os.path.join(ROOT, "python", "transcribe.py"), "--audio", CLIP, "--chunk-size", "1e9"],
    [sys.executable, os.path.join(ROOT, "python", "transcribe.py"), "--audio", CLIP, "--duration", "inf"],
    [sys.executable, os.path.join(ROOT, "python", "transcribe.py"), "--audio", CLIP, "--chunk-size", "1",
     "--memory-num", "100000000", "--stream"],
    [sys.executable, "-m", "qwen3asr.server", "--port", "70000"],
    [sys.executable, "-m", "qwen3asr.server.wyoming", "--max-clients", "100000"],
], ids=["chunk-size", "duration", "memory-num", "serve-port", "wyoming-max-clients"])
def test_programs_in_their_own_process(argv):
    """The reported command lines as a user runs them: one error line, exit 2, no traceback."""
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "python")}
    p = subprocess.run(argv + ["--backend", "onnx"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and re.match(r"(qwen3asr-\w+: )?error: ", lines[0]), p.stderr


# ---------------------------------------------------------------------- the servers
def _wav(seconds: float) -> bytes:
    import soundfile as sf

    x, _ = sf.read(CLIP, dtype="int16", frames=int(16000 * seconds))
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(x.tobytes())
    return buf.getvalue()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("uvicorn", reason="the server extra is needed (pip install '.[server]')")
    pytest.importorskip("websockets", reason="the websockets client is needed (the dev extra)")
    pytest.importorskip("wyoming", reason="the Wyoming server needs the 'wyoming' package (server extra)")
    log = str(tmp_path_factory.mktemp("fuzz") / "server.log")
    wyoming_port = free_port()
    s = ServerProcess("--wyoming", f"tcp://127.0.0.1:{wyoming_port}", log_path=log)
    s.wyoming_port = wyoming_port
    with s:
        yield s
        assert s.proc.poll() is None, s.log()
    with open(log) as f:
        text = f.read()
    assert "Traceback" not in text, text[-4000:]


def test_http_fields(server):
    """Every field of POST /v1/audio/transcriptions (openai_api.FIELDS), every bad text: 400
    with ``param`` naming it, or an answer; then a good request is transcribed correctly."""
    from qwen3asr.server.openai_api import FIELDS

    wav = _wav(0.5)
    for name in FIELDS:
        if name == "file":
            continue
        for label, text in BAD_TEXT.items():
            body, ctype = multipart({name: text}, {"file": ("a.wav", wav)})
            with guarded(f"HTTP {name}={label}", peak_mb=None):
                status, _, answer = post_raw(server.url, body, ctype)
            if status == 200:
                continue
            assert status == 400, (name, label, status, str(answer)[:300])
            err = answer["error"]
            assert err["param"] == name and len(err["message"]) < MAX_MESSAGE, (name, label, str(err)[:300])
    body, ctype = multipart({}, {"file": ("en_1.wav", open(CLIP, "rb").read())})
    status, _, answer = post_raw(server.url, body, ctype)
    assert status == 200 and answer["text"] == expected("en_1.wav")


async def _ws(url: str, start: dict, audio: bytes = b"") -> tuple[list, int]:
    import websockets

    got = []
    async with websockets.connect(url + "/v1/stream", max_size=None) as ws:
        await ws.send(json.dumps(start))
        first = json.loads(await ws.recv())
        got.append(first)
        if first["type"] == "ready":
            if audio:
                await ws.send(audio)
            await ws.send(json.dumps({"type": "stop"}))
        got += await read_until_closed(ws)
    return got, ws.close_code


def test_websocket_start_fields(server):
    """Every field of the start message, every bad value, on a real connection: an error message
    naming it and close 1007 (or 1003), or a stream that ends with its final message and 1000;
    then a good stream gets the right text."""
    from qwen3asr.server.live import StartMessage

    for f in dataclasses.fields(StartMessage):
        for label, value in BAD_JSON.items():
            what = f"WebSocket start {f.name}={label}"
            with guarded(what, peak_mb=None):
                got, code = asyncio.run(_ws(server.ws_url, {"type": "start", f.name: value}))
            if got[0]["type"] == "ready":
                assert got[-1]["type"] == "final" and code == 1000, (what, got[-1], code)
                continue
            assert got[-1]["type"] == "error" and code in (1003, 1007), (what, got, code)
            assert f.name in got[-1]["message"] and len(got[-1]["message"]) < MAX_MESSAGE, (what, got[-1])
    with open(CLIP, "rb") as fh:
        import soundfile as sf

        pcm, _ = sf.read(fh, dtype="int16")
    got, code = asyncio.run(_ws(server.ws_url, {"type": "start", "chunk_size": 2.0}, pcm.tobytes()))
    assert code == 1000 and got[-1]["text"] == expected("en_1.wav")


async def _wyoming(port: int, transcribe: dict, start: dict, audio: bytes) -> list:
    from wyoming.client import AsyncTcpClient
    from wyoming.event import Event

    events = []
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Event(type="transcribe", data=transcribe))
        await client.write_event(Event(type="audio-start", data=start))
        fmt = {k: start.get(k) for k in ("rate", "width", "channels")}
        for i in range(0, len(audio), 3200):
            await client.write_event(Event(type="audio-chunk", data=fmt, payload=audio[i:i + 3200]))
        await client.write_event(Event(type="audio-stop", data={}))
        while True:
            ev = await client.read_event()
            if ev is None:
                return events
            events.append(ev)
            if ev.type in ("transcript-stop", "error"):
                return events


def test_wyoming_event_data(server):
    """Every data field of the transcribe and audio-start events (the wyoming package's
    dataclasses), every bad value: an error event (the connection answered, never just dropped)
    or a transcript; then a good utterance is transcribed correctly."""
    from wyoming.asr import Transcribe
    from wyoming.audio import AudioStart

    good_start = {"rate": 16000, "width": 2, "channels": 1}
    audio = _wav(0.5)[44:]
    for cls, event in ((Transcribe, "transcribe"), (AudioStart, "audio-start")):
        for f in dataclasses.fields(cls):
            for label, value in BAD_JSON.items():
                what = f"Wyoming {event} {f.name}={label}"
                transcribe = {"language": "en", f.name: value} if cls is Transcribe else {"language": "en"}
                start = {**good_start, f.name: value} if cls is AudioStart else good_start
                with guarded(what, peak_mb=None):
                    events = asyncio.run(_wyoming(server.wyoming_port, transcribe, start, audio))
                assert events, f"{what}: the connection was dropped without an answer"
                assert events[-1].type in ("transcript-stop", "error"), (what, [e.type for e in events])
                if events[-1].type == "error":
                    assert len(events[-1].data.get("text", "")) < MAX_MESSAGE, what
    with wave.open(CLIP) as w:
        pcm = w.readframes(w.getnframes())
    events = asyncio.run(_wyoming(server.wyoming_port, {"language": "en"}, good_start, pcm))
    text = [e.data["text"] for e in events if e.type == "transcript"]
    assert text == [expected("en_1.wav")], [e.type for e in events]


@pytest.mark.parametrize("script", SUBCOMMAND_PROGRAMS)
def test_subcommand_flags(script, capsys, monkeypatch, tmp_path):
    """Every flag of every subcommand, every bad text, with the hub unreachable (offline, an empty
    cache, a loopback endpoint nobody listens on): exit 0, 2 or 3 (a conversion step missing)
    with an ``error:`` / ``not done:`` line and no traceback; nothing reaches a network."""
    import argparse

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("QWEN3ASR_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # a text taken as a relative --out directory is made here, not in the checkout
    module, func = PROGRAMS[script].split(":")
    mod = importlib.import_module(module)
    main = getattr(mod, func)
    sub = next(a for a in mod.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    tried = 0
    for name, parser in sub.choices.items():
        base = [name] + (["0.6b"] if any(a.dest == "names" and a.nargs == "+" for a in parser._actions) else [])
        if any(a.required for a in parser._actions if a.option_strings):
            base += ["--target", "rk3588"]
        for action in [a for a in parser._actions if a.option_strings and a.nargs != 0]:
            flag = action.option_strings[-1]
            for label, text in BAD_TEXT.items():
                what = f"{script} {name} {flag}={label}"
                rc, err = _run(main, _last_wins([f"{flag}={text}", *base[1:]]) and [name] + _last_wins(
                    [f"{flag}={text}", *base[1:]]), capsys, what)
                tried += 1
                assert "Traceback" not in err, f"{what}: {err[-2000:]}"
                assert rc in (0, 2, 3), f"{what}: exit {rc!r}: {err[-500:]}"
                if rc:
                    line = err.strip().splitlines()[-1]
                    assert ("error:" in line or "not done:" in line) and len(line) < MAX_MESSAGE, f"{what}: {line}"
    assert tried

