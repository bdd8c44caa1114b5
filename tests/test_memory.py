"""Memory ceilings of one request (docs/serving.md "Memory ceilings of one request"): the peak
memory of a long file, a long upload and a long live stream is bounded by the settings and does
not grow with the audio.

Each long-audio figure is a peak RSS measured in a fresh subprocess at two lengths of the same
kind of audio (the bundled 77 s clip, then quiet noise: speech, then long stretches for the
chunks to run over); holding the audio whole would add 4 bytes per 16 kHz sample at least, 61 MB
between 4 and 20 minutes, far over the margin allowed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

sf = pytest.importorskip("soundfile")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LONG = os.path.join(ROOT, "audio", "long_mixed.wav")
SR = 16000
# What a peak may grow between the short and the long run: allocator noise and the transcript
# (a few kB). Audio held whole would add 61 MB (4 -> 20 min at 4 bytes a sample) and more.
MARGIN_MB = 16.0
# glibc's malloc raises its mmap threshold after large blocks are freed (up to 32 MB), after which
# freed arrays stay in the heap of the thread that used them and the peak RSS depends on which
# worker thread ran what (tens of MB either way between runs). A fixed threshold returns every
# large array to the system when it is freed, so the peak is what the request holds.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(256 * 1024)}

_PEAK = """
import json, sys
from qwen3asr import Qwen3ASREngine

def peak_mb():  # VmHWM: this process's peak RSS (ru_maxrss would carry the parent's over from fork)
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024

with Qwen3ASREngine() as engine:
    loaded = peak_mb()
    r = engine.transcribe(sys.argv[1], vad=False)
    peak = peak_mb()
print(json.dumps({"loaded_mb": loaded, "peak_mb": peak, "seconds": r.stats.audio_seconds, "text": r.text}))
"""


def long_file(path: str, minutes: float, rate: int = SR) -> str:
    """A WAV file of ``minutes``: the bundled 77 s mixed clip, then quiet noise (-60 dBFS)."""
    x, sr = sf.read(LONG, dtype="int16")
    assert sr == SR
    rng = np.random.default_rng(0)
    rest = (rng.standard_normal(int(minutes * 60 * SR) - x.shape[0]) * 30).astype(np.int16)
    sf.write(path, np.concatenate([x, rest]), SR)
    return path


def peak_of(path: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               **MALLOC_ENV)
    out = subprocess.run([sys.executable, "-c", _PEAK, path], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_long_file_peak_does_not_grow_with_its_length(tmp_path):
    """A 20-minute file peaks within MARGIN_MB of a 4-minute one (the file is read in 10 s
    blocks, the log-mel in 1000-frame blocks, the chunks decoded in a bounded window). Checked
    by hand against the code that read files whole (commit 448482e): 4 min peaked at 160 MB,
    20 min at 226 MB (+66 MB), and this test failed."""
    short = peak_of(long_file(str(tmp_path / "4min.wav"), 4))
    long = peak_of(long_file(str(tmp_path / "20min.wav"), 20))
    assert short["seconds"] == pytest.approx(240) and long["seconds"] == pytest.approx(1200)
    # the same speech is transcribed in both (the clip at the start), so the runs are comparable
    assert len(short["text"]) >= 100 and long["text"][:100] == short["text"][:100], (short, long)
    print(f"\nfile peak RSS: 4 min {short['peak_mb']:.1f} MB, 20 min {long['peak_mb']:.1f} MB "
          f"(after loading {short['loaded_mb']:.1f} / {long['loaded_mb']:.1f} MB)")
    assert long["peak_mb"] - short["peak_mb"] < MARGIN_MB, (short, long)


def _footprints(session, pcm: np.ndarray, repeats: int) -> list:
    """The session's footprint() after each 0.5 s piece of ``pcm`` fed ``repeats`` times over."""
    out = []
    for _ in range(repeats):
        for a in range(0, pcm.shape[0], SR // 2):
            session.feed_audio(pcm[a:a + SR // 2])
            out.append(session.footprint())
    return out


@pytest.mark.slow
def test_live_stream_footprint_stays_flat(monkeypatch):
    """A live stream's footprint() (the bytes it holds) is as large after six passes over the
    77 s clip (~460 s, ~400 chunks, ~150 segments) as during the first ones: its audio is the open
    chunk, its window memory_num chunks, its result a bounded history. The history caps are made
    small here (in use they are reached after about an hour) so the run reaches them; the same
    run with an unbounded history (what a long file keeps) grows, which shows the check can
    fail."""
    from qwen3asr import Qwen3ASREngine, prepare_audio
    from qwen3asr.streaming import StreamSession, committed, tally

    monkeypatch.setattr(committed, "HISTORY_SEGMENTS", 10)
    monkeypatch.setattr(committed, "HISTORY_CHARS", 200)
    monkeypatch.setattr(committed, "HISTORY_TOKENS", 50)
    monkeypatch.setattr(tally, "CHUNK_HISTORY", 20)
    pcm = prepare_audio(LONG)
    with Qwen3ASREngine() as engine:
        bounded = engine.create_stream(chunk_size=1.0)
        sizes = _footprints(bounded, pcm, 6)
        r = bounded.finish()
        third = len(sizes) // 3
        print(f"\nstream footprint, max over the first and last third: {max(sizes[:third]) / 1024:.0f} kB, "
              f"{max(sizes[-third:]) / 1024:.0f} kB")
        assert max(sizes[-third:]) <= 1.05 * max(sizes[:third]), (max(sizes[:third]), max(sizes[-third:]))
        assert r.stats.chunks > 300 and len(r.chunks) == 20
        assert r.dropped_segments > 100 and len(r.segments) == 10
        assert r.dropped_chars > 1000 and len(r.committed) <= 200 and len(r.token_ids) == 50
        control = StreamSession(engine, bounded.options, bounded=False)
        grown = _footprints(control, pcm, 6)
        print(f"unbounded history (the control): {max(grown[:third]) / 1024:.0f} kB, "
              f"{max(grown[-third:]) / 1024:.0f} kB")
        assert max(grown[-third:]) > 1.2 * max(grown[:third]), (max(grown[:third]), max(grown[-third:]))


def _server_peak_mb(server) -> float:
    """The server process's peak RSS so far (VmHWM)."""
    with open(f"/proc/{server.proc.pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


@pytest.mark.slow
def test_server_long_upload_keeps_its_peak(tmp_path):
    """The OpenAI endpoint (the official client) answers a 10-minute upload without raising the
    server's peak RSS by more than MARGIN_MB over a 2-minute one: the upload is spooled to a file
    and decoded in blocks. Checked by hand against the server of commit 448482e, which read
    uploads whole: 177 and 290 MB, and this test failed."""
    openai = pytest.importorskip("openai", reason="the openai client is needed (pip install -e '.[dev]')")
    from server_proc import ServerProcess

    with ServerProcess(log_path=str(tmp_path / "server.log"), env=MALLOC_ENV) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=600)
        peaks, texts = [], []
        for minutes in (2, 10):
            with open(long_file(str(tmp_path / f"{minutes}.wav"), minutes), "rb") as f:
                texts.append(client.audio.transcriptions.create(model="qwen3-asr", file=f, response_format="text"))
            peaks.append(_server_peak_mb(server))
    assert len(texts[0]) >= 100 and texts[1][:100] == texts[0][:100], texts
    print(f"\nserver peak RSS after uploads of 2 and 10 min: {peaks[0]:.1f}, {peaks[1]:.1f} MB")
    assert peaks[1] - peaks[0] < MARGIN_MB, peaks


@pytest.mark.slow
def test_server_long_live_stream_keeps_its_peak(tmp_path):
    """A 12-minute live stream over the WebSocket (the websockets client, audio sent as fast as
    the server takes it) does not raise the server's peak RSS by more than MARGIN_MB over a
    2-minute one: the server stops reading beyond MAX_PENDING_SECONDS of undecoded audio and the
    session keeps a bounded history. A first 2-minute stream warms the server up (its ONNX
    Runtime arenas grow to the shapes a stream uses, then stay). Checked by hand against the
    server of commit 448482e, which queued all received audio: 149 then 272 MB, and this test
    failed."""
    import asyncio

    websockets = pytest.importorskip("websockets", reason="the websockets client is needed (pip install -e '.[dev]')")
    from server_proc import ServerProcess

    async def stream(url, pcm: np.ndarray) -> dict:
        async with websockets.connect(url + "/v1/stream") as ws:
            await ws.send(json.dumps({"type": "start", "sample_rate": SR, "chunk_size": 4.0, "final_pass": False}))
            assert json.loads(await ws.recv())["type"] == "ready"

            async def sender():
                for a in range(0, pcm.shape[0], SR):
                    await ws.send(pcm[a:a + SR].tobytes())
                await ws.send(json.dumps({"type": "stop"}))

            task = asyncio.ensure_future(sender())
            async for raw in ws:
                msg = json.loads(raw)
                if msg["type"] == "final":
                    await task
                    return msg
            raise AssertionError(f"closed without a final message ({ws.close_code})")

    with ServerProcess(log_path=str(tmp_path / "server.log"), env=MALLOC_ENV) as server:
        peaks, finals = [], []
        for minutes in (2, 2, 12):
            x, _ = sf.read(long_file(str(tmp_path / f"{minutes}.wav"), minutes), dtype="int16")
            finals.append(asyncio.run(stream(server.ws_url, x)))
            peaks.append(_server_peak_mb(server))
    assert [f["audio_seconds"] for f in finals] == [120.0, 120.0, 720.0]
    assert len(finals[0]["text"]) >= 100 and finals[2]["text"][:100] == finals[0]["text"][:100], finals
    print(f"\nserver peak RSS after live streams of 2, 2 and 12 min: {', '.join(f'{p:.1f}' for p in peaks)} MB")
    assert peaks[2] - peaks[1] < MARGIN_MB, peaks


def test_wyoming_read_ahead_is_bounded():
    """A Wyoming connection whose handler is busy reads at most READ_AHEAD_BYTES of events ahead
    (then TCP backpressure holds the client), and hands every event over in order once it is free:
    40 MiB of audio chunks sent at once never put more than the bound in the queue."""
    import asyncio

    pytest.importorskip("wyoming", reason="the Wyoming server needs the wyoming package (the server extra)")
    from wyoming.event import Event, async_write_event

    from qwen3asr.server.wyoming.protocol import MAX_PAYLOAD_BYTES, READ_AHEAD_BYTES, EventConnection

    chunk = b"\0" * (1 << 20)
    n_events = 40

    class Held(EventConnection):
        def __init__(self, reader, writer):
            super().__init__(reader, writer)
            self.free = asyncio.Event()
            self.seen, self.most = [], 0

        async def handle(self, event):
            self.most = max(self.most, self.queued_bytes + len(event.payload or b""))
            await self.free.wait()
            self.seen.append(event.data["n"])
            return len(self.seen) < n_events

    async def main():
        conns = []

        async def on_connect(reader, writer):
            conn = Held(reader, writer)
            conns.append(conn)
            await conn.run()

        server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        async def send_all():
            for i in range(n_events):
                await async_write_event(Event("audio-chunk", {"n": i, "rate": SR, "width": 2, "channels": 1},
                                              payload=chunk), writer)

        sender = asyncio.ensure_future(send_all())
        for _ in range(6000):  # until the read-ahead is full (a wait of at most a minute, not a timed assertion)
            if conns and conns[0].queued_bytes >= READ_AHEAD_BYTES - 2 * len(chunk):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the connection never read ahead")
        for _ in range(20):  # the reader has had time to read more, if it would
            await asyncio.sleep(0.01)
        conn = conns[0]
        held = conn.queued_bytes
        assert not sender.done()  # the client is held back by TCP
        conn.free.set()
        await sender
        for _ in range(6000):
            if len(conn.seen) == n_events:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        return held, conn

    held, conn = asyncio.run(main())
    assert held <= READ_AHEAD_BYTES + MAX_PAYLOAD_BYTES and conn.most <= READ_AHEAD_BYTES + MAX_PAYLOAD_BYTES
    assert conn.seen == list(range(n_events))


@pytest.mark.slow
def test_server_refuses_a_websocket_message_over_the_limit(tmp_path):
    """A live client's binary message over MAX_MESSAGE_BYTES (1 MiB) closes its connection with
    1009 (message too big) before the server buffers it; the server then serves the next client."""
    import asyncio

    websockets = pytest.importorskip("websockets", reason="the websockets client is needed (pip install -e '.[dev]')")
    from qwen3asr.server.live import MAX_MESSAGE_BYTES
    from server_proc import ServerProcess, read_until_closed

    async def send(url, size: int):
        async with websockets.connect(url + "/v1/stream", max_size=None) as ws:
            await ws.send(json.dumps({"type": "start", "sample_rate": SR}))
            assert json.loads(await ws.recv())["type"] == "ready"
            await ws.send(b"\0\0" * (size // 2))
            await ws.send(json.dumps({"type": "stop"}))
            msgs = await read_until_closed(ws)
            return ws.close_code, msgs

    with ServerProcess(log_path=str(tmp_path / "server.log")) as server:
        code, _ = asyncio.run(send(server.ws_url, MAX_MESSAGE_BYTES + 2))
        assert code == 1009
        code, msgs = asyncio.run(send(server.ws_url, MAX_MESSAGE_BYTES))  # at the limit: served
        assert code == 1000 and msgs[-1]["type"] == "final" and msgs[-1]["audio_seconds"] == pytest.approx(
            MAX_MESSAGE_BYTES / 2 / SR, abs=1e-3)


def test_a_file_read_in_blocks_gives_the_samples_of_the_whole_file(tmp_path):
    """AudioFile (what transcribe() and the server read files with) gives, 10 s block by block,
    exactly the samples the whole-file loader steps give: channels averaged, soxr VHQ resampling
    of the whole signal, division by a peak over 1, clipping; from a path or a file object, for
    any [start, stop)."""
    import soxr

    from qwen3asr.audio import BLOCK_SECONDS, RESAMPLE_QUALITY, AudioFile, prepare_audio

    rate = 44100
    t = np.arange(int(rate * 2.6 * BLOCK_SECONDS)) / rate  # 26 s: three blocks, the last partial
    rng = np.random.default_rng(1)
    x = np.stack([1.5 * np.sin(2 * np.pi * 440 * t), 0.3 * rng.standard_normal(t.shape[0])], 1).astype(np.float32)
    path = str(tmp_path / "stereo.wav")
    sf.write(path, x, rate, subtype="FLOAT")
    whole = soxr.resample(x.mean(axis=1, dtype=np.float64).astype(np.float32), rate, SR, quality=RESAMPLE_QUALITY)
    want = np.clip(whole / float(np.max(np.abs(whole))), -1.0, 1.0).astype(np.float32)
    with AudioFile(path) as f:
        assert f.n_samples == want.shape[0]
        assert np.array_equal(f.read(), want)
        a, b = 7 * SR + 3, 21 * SR + 5  # across block edges
        assert np.array_equal(np.concatenate(list(f.blocks(a, b))), want[a:b])
        assert max(block.shape[0] for block in f.blocks()) <= BLOCK_SECONDS * SR + 1
    with open(path, "rb") as raw, AudioFile(raw, name="upload") as f:
        assert np.array_equal(f.read(), want)
    # keep=True (prepare_audio's): the same samples from the opening pass's blocks, the file decoded
    # once; a second read decodes it again
    passes = []
    decoded = AudioFile._decoded

    def counted(self):
        passes.append(1)
        yield from decoded(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(AudioFile, "_decoded", counted)
        with AudioFile(path, keep=True) as f:
            assert np.array_equal(f.read(), want) and len(passes) == 1
            assert np.array_equal(f.read(a, b), want[a:b]) and len(passes) == 2
        passes.clear()
        assert np.array_equal(prepare_audio(path), want) and len(passes) == 1


@pytest.mark.slow
def test_transcribe_takes_a_file_object_and_an_audio_file_as_a_path():
    """engine.transcribe reads a path, a binary file object and an open AudioFile the same way
    (one pass, and chunked), and leaves a caller's AudioFile open."""
    from qwen3asr import Qwen3ASREngine
    from qwen3asr.audio import AudioFile

    cases = [(os.path.join(ROOT, "audio", "en_2.wav"), {}),
             (LONG, {"duration": 40.0, "chunk_size": 20.0, "vad": False, "max_new_tokens": 16})]
    with Qwen3ASREngine() as engine:
        for clip, kw in cases:
            by_path = engine.transcribe(clip, **kw)
            with open(clip, "rb") as raw:
                by_file = engine.transcribe(raw, **kw)
            with AudioFile(clip) as f:
                by_reader = engine.transcribe(f, **kw)
                assert f.read(0, 160).shape == (160,)  # still open
            assert by_path.text and by_file.token_ids == by_path.token_ids == by_reader.token_ids
            assert by_file.segments == by_path.segments == by_reader.segments
