"""Board timings of an accounting under unit costs: the cost model's formula and schedule.

    chunk ms = sum(encoder graph ms) + prefill_tokens / prefill rate
               + decode_tokens / decode rate + one decoder-run overhead
    alignment ms = sum(ASR encoder graph ms x aligner/ASR compute ratio) + positions / prefill rate
                   + slot rows x 2 x 1024 x 5000 FLOP / host rate + one run overhead

Serial: the encoder, then the decoder, chunk after chunk. Overlap: a two-stage pipeline where the
encoder of chunk n+1 runs while the decoder works on chunk n (an upper bound on the gain, as the
two share the NPU's memory bandwidth). Alignments run in the decoder's stage, before the decoder
run during which the engine made them. Wall time is for audio that is all there (a file); caption
latency, for a live stream, from a chunk's audio being complete (``ChunkWork.ready``) to the end
of its decoder run. ``predict`` returns a ``Prediction`` with per-chunk and per-alignment parts.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import List, Optional, Sequence, Tuple

from .accounting import Accounting, AlignWork
from .costs import UnitCosts


@dataclasses.dataclass(frozen=True)
class ChunkPrediction:
    start: float  # s
    end: float
    encoder_ms: float
    prefill_ms: float
    decode_ms: float
    run_ms: float  # decoder-run overhead
    latency_s: Optional[float]  # live: chunk audio complete -> its text (None for offline runs)


@dataclasses.dataclass(frozen=True)
class Prediction:
    """Predicted board timings for one accounting on one SoC."""

    label: str
    soc: str
    overlap: bool  # encoder of chunk n+1 during the decoder of chunk n
    audio_seconds: float
    chunks: int
    encoder_s: float  # totals of the unit costs (s)
    prefill_s: float
    decode_s: float
    overhead_s: float
    wall_s: float  # all audio present at t = 0 (a file)
    latency_first_s: Optional[float]  # live stream: first chunk
    latency_median_s: Optional[float]  # median over the later chunks
    latency_max_s: Optional[float]
    per_chunk: Tuple[ChunkPrediction, ...]
    align_s: float = 0.0  # word timestamps: all alignments (part of wall_s)
    per_align: Tuple["AlignPrediction", ...] = ()

    @property
    def rtf(self) -> float:
        return self.wall_s / self.audio_seconds

    @property
    def words_latency_median_s(self) -> Optional[float]:
        """Live: median over the segments of their audio being complete -> their words."""
        lat = [a.latency_s for a in self.per_align if a.latency_s is not None]
        return statistics.median(lat) if lat else None

    @property
    def words_latency_max_s(self) -> Optional[float]:
        lat = [a.latency_s for a in self.per_align if a.latency_s is not None]
        return max(lat) if lat else None


@dataclasses.dataclass(frozen=True)
class AlignPrediction:
    """Predicted cost of one alignment (ms) and, live, when its words come (s after the segment's audio)."""

    start: float
    end: float
    encoder_ms: float  # the aligner's encoder graphs
    prefill_ms: float  # its one RKLLM prefill
    head_ms: float  # the host head on the slot rows
    run_ms: float  # run overhead
    latency_s: Optional[float]

    @property
    def total_ms(self) -> float:
        return self.encoder_ms + self.prefill_ms + self.head_ms + self.run_ms


def align_costs(a: AlignWork, costs: UnitCosts) -> Tuple[float, float, float, float]:
    """(encoder, prefill, head, run) ms of one alignment under ``costs``."""
    return (sum(costs.aligner_graph_ms(part, s) for part, s in a.graphs), a.positions / costs.prefill_tok_s * 1000.0,
            costs.head_ms(a.slots), costs.decoder_run_ms)


def _schedule(ready: Sequence[float], enc: Sequence[float], dec: Sequence[float], overlap: bool,
              before: Sequence[Sequence[float]] = ()) -> Tuple[List[float], List[float]]:
    """Finish times (s): of each chunk's decoder run, and of each alignment. Serial: one resource,
    encoder then decoder of each chunk. Overlap: encoder and decoder stages, chunk n's decoder after
    its encoder and after chunk n-1's decoder; chunk n+1's encoder after its audio and chunk n's
    encoder. ``before[n]``: alignments (s each) run in the decoder's stage just before chunk n's
    decoder run, as the engine aligns a segment when a decoder run commits it; ``before[len(enc)]``:
    after the last chunk (ready with it)."""
    before = list(before) or [[] for _ in range(len(enc) + 1)]
    done, aligned, t_enc, t_dec = [], [], 0.0, 0.0
    steps = list(zip(ready, enc, dec)) + [(ready[-1], 0.0, 0.0)]
    for n, (r, e, d) in enumerate(steps):
        if overlap:
            t_enc = max(r, t_enc) + e
            t_dec = max(t_enc, t_dec)
        else:
            t_dec = max(r, t_dec) + e
        for a in before[n]:
            t_dec += a
            aligned.append(t_dec)
        t_dec += d
        if n < len(enc):
            done.append(t_dec)
    return done, aligned


def predict(acc: Accounting, costs: UnitCosts, overlap: bool = False) -> Prediction:
    """Board timings of ``acc`` under ``costs`` (see the module docstring for the formula)."""
    if not isinstance(acc, Accounting):
        raise ValueError(f"predict needs an Accounting (Accounting.from_dict for JSON), got {type(acc).__name__}")
    per = []
    enc, dec = [], []
    for c in acc.chunks:
        e = sum(costs.graph_ms(part, s) for part, s in c.graphs)
        p = c.prefill_tokens / costs.prefill_tok_s * 1000.0
        g = c.decode_tokens / costs.decode_tok_s * 1000.0
        per.append((c, e, p, g, costs.decoder_run_ms))
        enc.append(e / 1000.0)
        dec.append((p + g + costs.decoder_run_ms) / 1000.0)
    parts = [align_costs(a, costs) for a in acc.alignments]
    before: List[List[float]] = [[] for _ in range(len(enc) + 1)]
    for a, x in zip(acc.alignments, parts):
        before[a.after_runs].append(sum(x) / 1000.0)
    done, aligned = _schedule([0.0] * len(enc), enc, dec, overlap, before)
    wall = max(done + aligned)
    lat: List[Optional[float]] = [None] * len(per)
    alat: List[Optional[float]] = [None] * len(parts)
    if acc.live:
        ready = [c.ready for c in acc.chunks]
        done, aligned = _schedule(ready, enc, dec, overlap, before)
        lat = [d - r for d, r in zip(done, ready)]
        alat = [t - a.ready for t, a in zip(aligned, acc.alignments)]
    chunks = tuple(ChunkPrediction(c.start, c.end, e, p, g, o, l) for (c, e, p, g, o), l in zip(per, lat))
    later = [x for x in lat[1:] if x is not None]
    return Prediction(
        label=acc.label, soc=costs.soc, overlap=overlap, audio_seconds=acc.audio_seconds, chunks=len(per),
        encoder_s=sum(x[1] for x in per) / 1000, prefill_s=sum(x[2] for x in per) / 1000,
        decode_s=sum(x[3] for x in per) / 1000, overhead_s=sum(x[4] for x in per) / 1000, wall_s=wall,
        latency_first_s=lat[0], latency_median_s=statistics.median(later) if later else None,
        latency_max_s=max(x for x in lat if x is not None) if acc.live else None, per_chunk=chunks,
        align_s=sum(sum(x) for x in parts) / 1000,
        per_align=tuple(AlignPrediction(a.start, a.end, *x, latency_s=lt)
                        for a, x, lt in zip(acc.alignments, parts, alat)))
