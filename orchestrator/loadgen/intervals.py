"""Bootstrap intervals over requests for a load point's SLO percentiles, goodput and throughput.

The unit of resampling is the request (the measurement window's requests, as loadgen.metrics counts
them): a replicate draws as many requests with replacement and recomputes each statistic, so a
pooled metric (ITL gaps) keeps the correlation of one request's gaps. Replicates use a weighted
inverted-CDF percentile (each value weighted by how often its request was drawn), which differs from
the point estimate's linear interpolation by under one sample: fine for an interval, and what makes
200 replicates over 50k ITL gaps take milliseconds. Seeded, so the same records give the same
interval. The interval is the central `confidence` share of the replicates (percentile bootstrap).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from orchestrator.loadgen.metrics import in_window, meets_slo, parse_slo, request_scalar_s
from orchestrator.loadgen.records import RequestRecord

RESAMPLES = 200
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def to_list(self) -> list[float]:
        return [self.low, self.high]


def _values(rec: RequestRecord, metric: str) -> list[float]:
    """The request's values of `metric` in ms (one for scalars, its gaps for ITL)."""
    if metric == "itl":
        return [g * 1e3 for g in rec.itl_chunk_s]
    if metric == "itl_token":
        return [g * 1e3 for g in rec.itl_token_s]
    v = request_scalar_s(rec, metric)
    return [] if v is None else [v * 1e3]


def _stat_replicates(values: np.ndarray, owners: np.ndarray, counts: np.ndarray, stat: str) -> np.ndarray:
    """`stat` of the pooled values under each replicate's request counts (rows of `counts`)."""
    order = np.argsort(values, kind="stable")
    v, o = values[order], owners[order]
    out = np.empty(counts.shape[0])
    q = None if stat in ("mean", "max") else float(stat[1:]) / 100
    for i, c in enumerate(counts):
        w = c[o].astype(np.float64)
        total = w.sum()
        if total <= 0:
            out[i] = np.nan
        elif stat == "mean":
            out[i] = float((w * v).sum() / total)
        elif stat == "max":
            out[i] = float(v[np.nonzero(w)[0][-1]])
        else:
            assert q is not None
            cum = np.cumsum(w)
            out[i] = float(v[min(int(np.searchsorted(cum, q * total)), len(v) - 1)])
    return out


def bootstrap_intervals(
    records: Sequence[RequestRecord],
    *,
    warmup_s: float = 0.0,
    cooldown_s: float = 0.0,
    gpus: int | None = None,
    slo: Mapping[str, float] | None = None,
    seed: int = 0,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
) -> dict[str, Any]:
    """Intervals by name: each SLO key (e.g. 'itl_p99_ms'), 'goodput' and 'output_throughput'
    (per second; '_per_gpu' versions with `gpus`), plus the method's parameters."""
    window, inside = in_window(records, warmup_s, cooldown_s)
    done = [r for r in inside if r.ok]
    out: dict[str, Any] = {
        "method": "percentile bootstrap over requests",
        "resamples": resamples,
        "confidence": confidence,
        "seed": seed,
        "requests": len(done),
    }
    if not done or window <= 0:
        return out
    rng = np.random.default_rng(seed)
    n = len(done)
    counts = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(resamples)])
    lo_q, hi_q = (1 - confidence) / 2 * 100, (1 + confidence) / 2 * 100

    def interval(reps: np.ndarray) -> list[float] | None:
        reps = reps[np.isfinite(reps)]
        if reps.size == 0:
            return None
        lo, hi = np.percentile(reps, [lo_q, hi_q])
        return Interval(float(lo), float(hi)).to_list()

    slo_d = dict(slo or {})
    for metric, stat, _bound in parse_slo(slo_d):
        per_request = [_values(r, metric) for r in done]
        owners = np.repeat(np.arange(n), [len(v) for v in per_request])
        values = np.fromiter((x for v in per_request for x in v), dtype=np.float64, count=len(owners))
        if values.size:
            out[f"{metric}_{stat}_ms"] = interval(_stat_replicates(values, owners, counts, stat))
    tokens = np.array([r.n_output_tokens for r in done], dtype=np.float64)
    rates = {"output_throughput": counts @ tokens / window}
    if slo_d:
        good = np.array([meets_slo(r, slo_d) for r in done], dtype=np.float64)
        rates["goodput"] = counts @ good / window
    for name, reps in rates.items():
        out[name] = interval(reps)
        if gpus:
            out[f"{name}_per_gpu"] = interval(reps / gpus)
    return out


def slo_margin(intervals: Mapping[str, Any], slo: Mapping[str, float]) -> str:
    """'holds' when every bound holds over its whole interval, 'breaks' when some interval lies
    wholly above its bound, else 'close' (the verdict could go either way under noise)."""
    verdicts = []
    for key, bound in slo.items():
        iv = intervals.get(key)
        if not iv:
            continue
        lo, hi = iv
        verdicts.append("breaks" if lo > bound else ("holds" if hi <= bound else "close"))
    if "breaks" in verdicts:
        return "breaks"
    return "close" if "close" in verdicts else "holds"


def straddled_bounds(intervals: Mapping[str, Any], slo: Mapping[str, float]) -> list[str]:
    """Each SLO bound whose interval straddles it, as 'itl_p99_ms [97.2, 104.1] around 100': the
    bounds that make slo_margin 'close'."""
    out = []
    for key, bound in slo.items():
        iv = intervals.get(key)
        if iv and iv[0] <= bound < iv[1]:
            out.append(f"{key} [{iv[0]:.4g}, {iv[1]:.4g}] around {bound:g}")
    return out
