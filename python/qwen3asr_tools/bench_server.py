#!/usr/bin/env python3
"""Load a running qwen3asr server with real clients and print throughput and live latency.

    python -m qwen3asr.server --model models/default &
    python scripts/bench_server.py --url http://127.0.0.1:8000 --seconds 30   (qwen3asr_tools.bench_server)

For 1, 4 and 16 concurrent live WebSocket streams (audio sent at real-time pace in 100 ms
frames), and 16 streams mixed with 4 back-to-back uploads (the `openai` client), it prints:
throughput (audio seconds transcribed per wall second, all clients together) and the live
chunk latency p50/p95 (ms from sending the audio that completed a chunk to receiving that
chunk's text). With ``--wyoming HOST:PORT`` (a server started with ``--wyoming``) it adds a row
of Wyoming utterances per stream count (Home Assistant's requests, audio at real-time pace;
latency = audio-stop to transcript). The client kinds are also what tests/test_server_load.py
runs; a new kind is one more class with the same ``run(clip)`` coroutine.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import time
from typing import Dict, List, Optional

import numpy as np

from . import REPO_ROOT as ROOT  # the checkout
AUDIO = os.path.join(ROOT, "audio")
CLIPS = ("en_1.wav", "en_2.wav", "en_3.wav", "zh_1.wav", "zh_2.wav", "zh_3.wav")
FRAME_SECONDS = 0.1  # live audio frame length (s)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one client request got."""

    kind: str  # client kind ("live", "upload", ...)
    clip: str  # audio file name
    status: str  # "ok", "rejected" (a clean 503 / close 1013) or "error"
    text: str = ""  # the final transcript ("ok")
    audio_seconds: float = 0.0  # audio sent
    latencies_ms: tuple = ()  # live: one per decoded chunk
    detail: str = ""  # what went wrong ("error"), the rejection message ("rejected")


def load_clip(name: str) -> tuple[np.ndarray, int]:
    """int16 samples of a bundled clip and its rate."""
    import soundfile as sf

    pcm, sr = sf.read(os.path.join(AUDIO, name), dtype="int16")
    return pcm, sr


class LiveKind:
    """A live WebSocket stream of one clip (16-bit mono frames of FRAME_SECONDS)."""

    name = "live"

    def __init__(self, base_url: str, api_key: Optional[str] = None, chunk_size: float = 1.0, realtime: bool = True):
        self.url = base_url.replace("http://", "ws://").replace("https://", "wss://") + "/v1/stream"
        if api_key:
            self.url += f"?api_key={api_key}"
        self.chunk_size, self.realtime = chunk_size, realtime

    async def run(self, clip: str) -> Outcome:
        import websockets

        pcm, sr = load_clip(clip)
        n = int(sr * FRAME_SECONDS)
        sent: Dict[float, float] = {}
        latencies: List[float] = []
        try:
            async with websockets.connect(self.url, max_size=None, open_timeout=60) as ws:
                await ws.send(json.dumps({"type": "start", "sample_rate": sr, "format": "s16le",
                                          "chunk_size": self.chunk_size}))
                first = json.loads(await ws.recv())
                if first["type"] == "error":
                    status = "rejected" if first["code"] == "server_busy" else "error"
                    return Outcome(self.name, clip, status, detail=f"{first['code']}: {first['message']}")
                final: List[str] = []

                async def reader():
                    async for raw in ws:
                        m = json.loads(raw)
                        if m["type"] == "tail" and m["received_seconds"] in sent:
                            latencies.append((time.perf_counter() - sent[m["received_seconds"]]) * 1000)
                        elif m["type"] == "final":
                            final.append(m["text"])
                        elif m["type"] == "error":
                            raise RuntimeError(f"{m['code']}: {m['message']}")

                task = asyncio.ensure_future(reader())
                t0 = time.perf_counter()
                for k, i in enumerate(range(0, len(pcm), n)):
                    if self.realtime:
                        await asyncio.sleep(max(0.0, t0 + k * FRAME_SECONDS - time.perf_counter()))
                    frame = pcm[i:i + n]
                    sent[round((i + frame.shape[0]) / sr, 3)] = time.perf_counter()
                    await ws.send(frame.tobytes())
                await ws.send(json.dumps({"type": "stop"}))
                await asyncio.wait_for(task, 300)
                if not final:
                    return Outcome(self.name, clip, "error", detail=f"closed {ws.close_code} without a final message")
                return Outcome(self.name, clip, "ok", final[0], len(pcm) / sr, tuple(latencies))
        except Exception as exc:  # a lost request: reported, never hidden
            return Outcome(self.name, clip, "error", detail=f"{type(exc).__name__}: {exc}")


class UploadKind:
    """A file upload with the official openai client (POST /v1/audio/transcriptions)."""

    name = "upload"

    def __init__(self, base_url: str, api_key: Optional[str] = None, model: str = "qwen3-asr"):
        import openai

        self.openai = openai
        self.base_url, self.api_key, self.model = base_url, api_key, model
        self._clients: dict = {}  # one AsyncOpenAI per event loop (its connections belong to the loop)

    def _client(self):
        loop = asyncio.get_running_loop()
        if loop not in self._clients:
            self._clients[loop] = self.openai.AsyncOpenAI(base_url=self.base_url + "/v1",
                                                          api_key=self.api_key or "none", max_retries=0, timeout=300)
        return self._clients[loop]

    async def run(self, clip: str) -> Outcome:
        path = os.path.join(AUDIO, clip)
        import soundfile as sf

        seconds = sf.info(path).duration
        try:
            with open(path, "rb") as f:
                r = await self._client().audio.transcriptions.create(model=self.model, file=f)
            return Outcome(self.name, clip, "ok", r.text, seconds)
        except self.openai.APIStatusError as exc:
            if exc.status_code == 503:
                code = (exc.body or {}).get("code", "") if isinstance(exc.body, dict) else ""
                return Outcome(self.name, clip, "rejected" if code == "server_busy" else "error",
                               detail=f"{code}: {exc.body}")
            return Outcome(self.name, clip, "error", detail=f"HTTP {exc.status_code}: {exc.body}")
        except Exception as exc:
            return Outcome(self.name, clip, "error", detail=f"{type(exc).__name__}: {exc}")


class WyomingKind:
    """One Wyoming utterance as Home Assistant sends it: connect, transcribe, audio-start,
    16-bit mono chunks of FRAME_SECONDS (real-time pace), audio-stop, read until the
    transcript. Needs a server started with --wyoming (``host``/``port`` of that URI)."""

    name = "wyoming"

    def __init__(self, host: str, port: int, realtime: bool = True):
        self.host, self.port, self.realtime = host, port, realtime

    async def run(self, clip: str) -> Outcome:
        from wyoming.client import AsyncTcpClient

        outcome = None
        try:
            async with AsyncTcpClient(self.host, self.port) as client:
                outcome = await self._utterance(client, clip)
        except Exception as exc:  # closing a connection the server already closed may fail
            if outcome is None:
                return Outcome(self.name, clip, "error", detail=f"{type(exc).__name__}: {exc}")
        return outcome

    async def _utterance(self, client, clip: str) -> Outcome:
        from wyoming.asr import Transcribe, Transcript
        from wyoming.audio import AudioChunk, AudioStart, AudioStop
        from wyoming.error import Error

        pcm, sr = load_clip(clip)
        n = int(sr * FRAME_SECONDS)
        t_stop = None
        try:
            await client.write_event(Transcribe().event())
            await client.write_event(AudioStart(rate=sr, width=2, channels=1).event())
            t0 = time.perf_counter()
            for k, i in enumerate(range(0, len(pcm), n)):
                if self.realtime:
                    await asyncio.sleep(max(0.0, t0 + k * FRAME_SECONDS - time.perf_counter()))
                await client.write_event(AudioChunk(rate=sr, width=2, channels=1, audio=pcm[i:i + n].tobytes()).event())
            await client.write_event(AudioStop().event())
            t_stop = time.perf_counter()
        except ConnectionError:
            pass  # the server refused (e.g. busy) and closed: its error event is read below
        while True:
            event = await asyncio.wait_for(client.read_event(), 300)
            if event is None:
                return Outcome(self.name, clip, "error", detail="closed before the transcript")
            if Transcript.is_type(event.type) and t_stop is not None:
                latency = (time.perf_counter() - t_stop) * 1000  # audio-stop -> transcript
                return Outcome(self.name, clip, "ok", Transcript.from_event(event).text, len(pcm) / sr, (latency,))
            if Error.is_type(event.type):
                err = Error.from_event(event)
                status = "rejected" if err.code == "busy" else "error"
                return Outcome(self.name, clip, status, detail=f"{err.code}: {err.text}")


async def run_load(kinds: list, workers: int, seconds: float, clips=CLIPS, offset: int = 0) -> tuple[list, float]:
    """``workers`` concurrent clients for ``seconds``; worker i uses kinds[i % len(kinds)] and
    cycles through clips. Returns (outcomes, wall seconds)."""
    end = time.perf_counter() + seconds
    outcomes: list = []

    async def worker(i: int):
        kind = kinds[i % len(kinds)]
        k = i + offset
        while time.perf_counter() < end:
            out = await kind.run(clips[k % len(clips)])
            outcomes.append(out)
            k += 1
            if out.status == "rejected":
                await asyncio.sleep(0.5)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(workers)))
    return outcomes, time.perf_counter() - t0


def percentile(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else float("nan")


def summarize(outcomes: list, wall: float) -> dict:
    ok = [o for o in outcomes if o.status == "ok"]
    lat = [x for o in ok for x in o.latencies_ms]
    return {"requests": len(outcomes), "ok": len(ok), "rejected": sum(o.status == "rejected" for o in outcomes),
            "errors": sum(o.status == "error" for o in outcomes),
            "throughput": sum(o.audio_seconds for o in ok) / wall if wall > 0 else float("nan"),
            "p50_ms": percentile(lat, 50), "p95_ms": percentile(lat, 95), "chunks": len(lat)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL")
    ap.add_argument("--api-key", default=os.environ.get("QWEN3ASR_API_KEY"))
    ap.add_argument("--seconds", type=float, default=30.0, help="duration of each row (s)")
    ap.add_argument("--chunk-size", type=float, default=1.0, help="live chunk size (s)")
    ap.add_argument("--streams", default="1,4,16", help="live stream counts, comma-separated")
    ap.add_argument("--mix-uploads", type=int, default=4, help="upload clients added to the last row (0: no mix row)")
    ap.add_argument("--wyoming", metavar="HOST:PORT", help="also a row of Wyoming utterances per stream count "
                                                           "(the server's --wyoming address)")
    args = ap.parse_args(argv)
    try:
        counts = [int(n) for n in args.streams.split(",")]
        if not counts or min(counts) < 1:
            raise ValueError
    except ValueError:
        ap.error(f"--streams must be positive integers separated by commas, got {args.streams!r}")
    live = LiveKind(args.url, args.api_key, args.chunk_size)
    upload = UploadKind(args.url, args.api_key)
    rows = [(f"{n} live", [live], n) for n in counts]
    if args.mix_uploads:
        n = counts[-1]
        rows.append((f"{n} live + {args.mix_uploads} upload", [live] * n + [upload] * args.mix_uploads,
                     n + args.mix_uploads))
    if args.wyoming:
        host, _, port = args.wyoming.rpartition(":")
        if not host or not port.isdigit():
            ap.error(f"--wyoming must be HOST:PORT (as the server's --wyoming tcp://HOST:PORT), got {args.wyoming!r}")
        wyo = WyomingKind(host, int(port))
        rows += [(f"{n} wyoming", [wyo], n) for n in counts]
    print(f"{'clients':<22} {'requests':>8} {'ok':>5} {'503':>5} {'err':>4} {'audio s/s':>9} "
          f"{'chunks':>6} {'p50 ms':>7} {'p95 ms':>7}")
    for label, kinds, workers in rows:
        outcomes, wall = asyncio.run(run_load(kinds, workers, args.seconds))
        s = summarize(outcomes, wall)
        print(f"{label:<22} {s['requests']:>8} {s['ok']:>5} {s['rejected']:>5} {s['errors']:>4} "
              f"{s['throughput']:>9.2f} {s['chunks']:>6} {s['p50_ms']:>7.1f} {s['p95_ms']:>7.1f}", flush=True)
        for o in outcomes:
            if o.status == "error":
                print(f"  error: {o.kind} {o.clip}: {o.detail}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
