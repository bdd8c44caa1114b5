"""The cost model against the reference design's published figures (docs/reference_design.md).

Its RK3576 runs are published as an RTF band per chunk size (``PUBLISHED_RTF``) and a caption
latency at 4 s chunks (``PUBLISHED_LATENCY_S``). Under Rockchip's published decoder costs the
latency is reproduced, the RTF is not (docs/board.md, "Cost model"), so ``fit_prefill_rate``
finds the RK3576 prefill rate at which the reference design's settings reproduce its RTF
(committed as ``costs.RK3576_PREFILL_TOK_S_FIT``); ``fit_prefill_to_latency`` and
``rate_needed`` solve for the rate that gives a latency or an RTF.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, Mapping, Optional, Tuple

from .accounting import Accounting
from .costs import UnitCosts, unit_costs
from .predict import predict

PUBLISHED_RTF = {  # reference design, RK3576, clocks locked: chunk seconds -> (low, high) published
    2.0: (0.55, 0.58), 3.0: (0.55, 0.58), 4.0: (0.57, 0.57), 5.0: (0.55, 0.58)}
PUBLISHED_LATENCY_S = (1.8, 1.4)  # reference design at 4 s chunks: first chunk, later chunks


def band_error(rtf: float, chunk_s: float) -> float:
    """Relative distance of ``rtf`` from the published band at ``chunk_s`` (0 inside it)."""
    if chunk_s not in PUBLISHED_RTF:
        raise ValueError(f"no published RTF for {chunk_s} s chunks; accepted: {', '.join(map(str, PUBLISHED_RTF))}")
    lo, hi = PUBLISHED_RTF[chunk_s]
    return rtf / hi - 1 if rtf > hi else (rtf / lo - 1 if rtf < lo else 0.0)


@dataclasses.dataclass(frozen=True)
class Fit:
    """The fitted RK3576 prefill rate and how the calibration runs come out with it."""

    prefill_tok_s: float
    rows: Tuple[Tuple[float, float, float], ...]  # (chunk s, predicted RTF, rate alone: RTF = band middle)

    def errors(self) -> Dict[float, float]:
        """Chunk seconds -> relative distance from the published band (0 inside it)."""
        return {s: band_error(p, s) for s, p, _ in self.rows}

    @property
    def worst_error(self) -> float:
        """Largest |distance from the published band| over the rows."""
        return max(abs(e) for e in self.errors().values())


def published_target(chunk_s: float) -> float:
    """The middle of the reference design's published RTF band at ``chunk_s``."""
    band_error(0.5, chunk_s)  # validates chunk_s
    lo, hi = PUBLISHED_RTF[chunk_s]
    return (lo + hi) / 2


def _rate_for(acc: Accounting, base: UnitCosts, target: float) -> float:
    """Prefill rate at which ``acc`` predicts ``target`` RTF (inf if other costs already exceed it)."""
    rest = predict(acc, dataclasses.replace(base, prefill_tok_s=1e12)).wall_s
    tokens = sum(c.prefill_tokens for c in acc.chunks)
    budget = target * acc.audio_seconds - rest
    return tokens / budget if budget > 0 else math.inf


def _golden(f, lo: float, hi: float) -> float:
    """Minimum of a unimodal f on [lo, hi]."""
    for _ in range(200):
        m1, m2 = lo + (hi - lo) * 0.382, lo + (hi - lo) * 0.618
        if f(m1) < f(m2):
            hi = m2
        else:
            lo = m1
    return (lo + hi) / 2


def fit_prefill_rate(runs: Mapping[float, Accounting], base: Optional[UnitCosts] = None) -> Fit:
    """Fit the RK3576 prefill rate to the reference design's published RTF.

    ``runs``: chunk seconds -> accounting of the reference design's settings at that chunk size.
    Published is a band, 0.55-0.58 over 2-5 s chunks (which size gave which value is not
    said) and 0.57 at 4 s; the loss is the sum of squared log distances from the band
    (0 inside it), then the squared log distance from the band's middle as a tie-break. The
    reference design runs fixed-shape encoders: the default ``base`` has dynamic_scale 1."""
    base = base or unit_costs("rk3576", dynamic_scale=1.0)
    for s in runs:
        band_error(0.5, s)

    def loss(log_rate: float) -> float:
        c = dataclasses.replace(base, prefill_tok_s=math.exp(log_rate))
        total = 0.0
        for s, a in runs.items():
            rtf = predict(a, c).rtf
            total += math.log1p(band_error(rtf, s)) ** 2 + 1e-6 * math.log(rtf / published_target(s)) ** 2
        return total

    rate = math.exp(_golden(loss, math.log(1.0), math.log(1e5)))
    fitted = dataclasses.replace(base, prefill_tok_s=rate)
    rows = tuple((s, predict(a, fitted).rtf, _rate_for(a, base, published_target(s)))
                 for s, a in sorted(runs.items()))
    return Fit(prefill_tok_s=rate, rows=rows)


def fit_prefill_to_latency(acc: Accounting, target_s: float, base: Optional[UnitCosts] = None) -> float:
    """Prefill rate at which the median caption latency of ``acc``'s later chunks is ``target_s``
    (the reference design's published 1.4 s at 4 s chunks); inf if unreachable."""
    base = base or unit_costs("rk3576", dynamic_scale=1.0)  # the reference design: fixed shapes
    if not acc.live:
        raise ValueError("latency needs a live accounting (record_stream)")

    def lat(rate: float) -> float:
        return predict(acc, dataclasses.replace(base, prefill_tok_s=rate)).latency_median_s

    if lat(1e9) > target_s:
        return math.inf
    lo, hi = 1.0, 1e9
    for _ in range(200):  # bisection in log rate; latency falls as the rate rises
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if lat(mid) > target_s else (lo, mid)
    return math.sqrt(lo * hi)


def rate_needed(acc: Accounting, base: UnitCosts, target_rtf: float, overlap: bool = False) -> float:
    """Smallest prefill rate (tok/s) at which ``acc`` reaches ``target_rtf``; inf if no rate does."""
    def rtf(rate: float) -> float:
        return predict(acc, dataclasses.replace(base, prefill_tok_s=rate), overlap).rtf

    if rtf(1e9) > target_rtf:
        return math.inf
    lo, hi = 1.0, 1e9
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if rtf(mid) > target_rtf else (lo, mid)
    return math.sqrt(lo * hi)
