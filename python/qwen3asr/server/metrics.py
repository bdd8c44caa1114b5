"""``/metrics``: the server's counters in the Prometheus text format (prometheus_client).

One registry per app (not the library's global one), so two apps in one process count apart.
The series and what they mean are listed in docs/serving.md "Metrics"; every surface reports
through :class:`Metrics`:

- ``request(surface, outcome, code)`` once per request (an upload, a live stream, a realtime
  session, an alignment); a refusal (503) and an error also count under their code;
- ``audio(surface, audio_seconds, model_seconds)`` for finished work: audio and the time its
  units held the decoder, whose ratio is the request's real-time factor;
- ``first_text`` / ``final_latency`` for the live surfaces; ``streams(surface)`` the gauge of
  open live connections; the scheduler reports each turn's wait through ``observe_turn``.
"""

from __future__ import annotations

import os
from typing import Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

SURFACES = ("transcriptions", "alignments", "stream", "realtime", "wyoming")
# ok: answered; client_error: refused for its input (4xx); refused: 503 (busy, loading, shutting
# down); error: the server failed (5xx); cancelled: the client left before its answer.
OUTCOMES = ("ok", "client_error", "refused", "error", "cancelled")
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)  # seconds
RTF_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0)  # model seconds per audio second
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)  # seconds


def outcome_of(status: int) -> str:
    """The outcome label of an HTTP status (or the one a WebSocket error stands for)."""
    if status < 400:
        return "ok"
    if status == 503:
        return "refused"
    if status == 499:
        return "cancelled"
    return "client_error" if status < 500 else "error"


class _RuntimeCollector:
    """Gauges read at scrape time: the loaded models and the scheduler's clients."""

    def __init__(self, runtime):
        self.runtime = runtime

    def collect(self):
        rt = self.runtime
        info = GaugeMetricFamily("qwen3asr_model_info", "Models loaded (1), with their backend",
                                 labels=["kind", "model", "backend"])
        engine = rt.engine
        if engine is not None:
            info.add_metric(["asr", rt.settings.model_name, engine.backend], 1)
            aligner = getattr(engine, "aligner_dir", None)
            if aligner:
                info.add_metric(["aligner", os.path.basename(os.path.normpath(aligner)), engine.backend], 1)
        yield info
        stats = rt.scheduler.stats()
        clients = GaugeMetricFamily("qwen3asr_scheduler_clients", "Requests admitted now, by state",
                                    labels=["state"])
        clients.add_metric(["active"], stats.active)
        clients.add_metric(["waiting"], stats.waiting)
        yield clients
        yield GaugeMetricFamily("qwen3asr_scheduler_max_clients", "Requests admitted at once at most (--max-clients)",
                                value=rt.scheduler.max_clients)
        yield GaugeMetricFamily("qwen3asr_ready", "1 when the model is loaded and the server takes requests",
                                value=1 if engine is not None and not rt.draining else 0)


class Metrics:
    """The counters of one server (see the module docstring)."""

    def __init__(self, runtime):
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("qwen3asr_requests", "Requests by surface and outcome", ["surface", "outcome"],
                                registry=r)
        self.refusals = Counter("qwen3asr_refusals", "Requests refused with 503, by reason", ["surface", "code"],
                                registry=r)
        self.errors = Counter("qwen3asr_errors", "Requests answered with an error (4xx, 5xx but 503), by code",
                              ["surface", "code"], registry=r)
        self.audio_seconds = Counter("qwen3asr_audio_seconds", "Audio transcribed or aligned (s)", ["surface"],
                                     registry=r)
        self.model_seconds = Counter("qwen3asr_model_seconds", "Time requests held the decoder (s)", ["surface"],
                                     registry=r)
        self.rtf = Histogram("qwen3asr_real_time_factor", "Per request: decoder time / audio duration",
                             ["surface"], buckets=RTF_BUCKETS, registry=r)
        self.queue_wait = Histogram("qwen3asr_queue_wait_seconds", "Wait for a turn on the decoder, per unit of "
                                    "model work", ["class"], buckets=WAIT_BUCKETS, registry=r)
        self.first_text = Histogram("qwen3asr_first_text_seconds", "Live: first audio received -> first text sent",
                                    ["surface"], buckets=LATENCY_BUCKETS, registry=r)
        self.final_latency = Histogram("qwen3asr_final_latency_seconds", "Live: end of audio (stop, commit, speech "
                                       "end) -> final text sent", ["surface"], buckets=LATENCY_BUCKETS, registry=r)
        self.active_streams = Gauge("qwen3asr_active_streams", "Open live connections", ["surface"], registry=r)
        for s in SURFACES:  # every series present from the start (rate() needs the zero)
            for o in OUTCOMES:
                self.requests.labels(s, o)
            self.audio_seconds.labels(s)
            self.model_seconds.labels(s)
        for s in ("stream", "realtime", "wyoming"):
            self.active_streams.labels(s)
        r.register(_RuntimeCollector(runtime))

    def request(self, surface: str, outcome: str, code: Optional[str] = None) -> None:
        self.requests.labels(surface, outcome).inc()
        if outcome == "refused":
            self.refusals.labels(surface, code or "unknown").inc()
        elif outcome in ("client_error", "error"):
            self.errors.labels(surface, code or "unknown").inc()

    def audio(self, surface: str, audio_seconds: float, model_seconds: float) -> None:
        if audio_seconds <= 0:
            return
        self.audio_seconds.labels(surface).inc(audio_seconds)
        self.model_seconds.labels(surface).inc(model_seconds)
        self.rtf.labels(surface).observe(model_seconds / audio_seconds)

    def streams(self, surface: str) -> Gauge:
        return self.active_streams.labels(surface)

    def observe_turn(self, kind: str, wait_seconds: float) -> None:
        self.queue_wait.labels(kind).observe(wait_seconds)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
