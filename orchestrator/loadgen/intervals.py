"""Intervals for a load point's SLO percentiles, goodput and throughput: what a rerun would change.

A rerun with another workload seed draws other arrival times, prompts and lengths, so it changes how
many requests land in the window, which of them pass, and how the slow ones cluster in time (a burst
of arrivals makes a burst of slow requests, and the engine's queue and KV cache carry it for seconds).
Resampling single requests sees none of that: a goodput whose requests all passed came out as a
point, and in bench/interval_coverage.py the former request bootstrap covered a rerun's centre 7-62%
of the time for a 95% interval. So, batch means (sectioning, for the statistics that are not means):

- The measurement window (loadgen.window.measurement_window) is cut into `k` equal time batches
  (BATCHES, fewer when a batch would hold fewer than MIN_PER_BATCH requests; no interval below 2).
  A request belongs to the batch it was sent in, a streamed token to the batch it streamed in.
- Rates (goodput, output throughput): batch means. Each batch's rate; the interval is the window's
  estimate -+ t(k-1) s / sqrt(k), s the batches' standard deviation (Student's t, 95%).
- SLO percentiles (and means, maxima): the delete-one-batch jackknife. The statistic over the window
  less one batch, for each batch; se = sqrt((k-1)/k sum (x_i - mean)^2), the interval the estimate
  -+ t(k-1) se. For a rate this is batch means exactly; for a tail percentile it beats the percentile
  of each short batch (too wide: a batch has or has not a burst) and a bootstrap over the batches
  (too narrow), in bench/interval_coverage.py.
- Few long batches, because the load's memory is long (the engine's queue and KV cache carry a burst
  for seconds): with 10 or 20 batches the spread of ITL p99 came out well below what reruns showed,
  with 5 it matched.
- Goodput also covers its pass fraction's uncertainty: the Wilson score interval of (requests
  passing) / (window's requests) times the achieved rate (when every request passes, the batches see
  only the arrivals vary; 17 of 17 passing still allows a pass fraction near 0.82). Hull of the two.
- Percentiles are also widened, as a floor for the sample's size, to the distribution-free
  order-statistic interval (ranks n q -+ z sqrt(n q (1 - q)), clamped to the sample).
- Every interval contains its point estimate; a rate's never goes below 0.

`requests` counts the window's requests; `enough` says whether there are MIN_REQUESTS_TO_SEPARATE of
them (MIN_BATCHES_TO_SEPARATE full batches), below which selection does not call two layouts apart:
with fewer batches the spread is estimated on too few degrees of freedom to trust its own width.
docs/decision.md "Confidence" has the reasoning and the coverage measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from orchestrator.loadgen.columns import columns_from_records
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.slo import parse_slo, request_scalar_s, slo_mask
from orchestrator.loadgen.window import Window, measurement_window, streamed_until

BATCHES = 5
MIN_PER_BATCH = 5
MIN_BATCHES_TO_SEPARATE = 5
MIN_REQUESTS_TO_SEPARATE = MIN_BATCHES_TO_SEPARATE * MIN_PER_BATCH
CONFIDENCE = 0.95
Z_95 = 1.959964
# Student's t, two-sided 95%, by degrees of freedom (k - 1 for k batches).
T_95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
        10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101,
        19: 2.093}
METHOD = (
    f"95%, over up to {BATCHES} equal time batches of the measurement window (Student's t): batch means "
    "for rates (goodput widened to the Wilson interval of its pass fraction), the delete-one-batch "
    "jackknife for SLO percentiles (widened to the order-statistic interval)"
)


def batch_count(requests: int, batches: int = BATCHES) -> int:
    """How many batches a window with `requests` requests is cut into (0: too few for an interval)."""
    k = min(batches, requests // MIN_PER_BATCH)
    return k if k >= 2 else 0


def enough_to_separate(intervals: Mapping[str, Any] | None) -> bool:
    """Did the point have enough requests for its interval to call two layouts apart?"""
    if not intervals:
        return False
    return int(intervals.get("requests") or 0) >= MIN_REQUESTS_TO_SEPARATE


def _values(rec: RequestRecord, metric: str) -> list[float]:
    """The request's values of `metric` in ms (one for scalars, its gaps for ITL)."""
    if metric == "itl":
        return [g * 1e3 for g in rec.itl_chunk_s]
    if metric == "itl_token":
        return [g * 1e3 for g in rec.itl_token_s]
    v = request_scalar_s(rec, metric)
    return [] if v is None else [v * 1e3]


def _stat(values: np.ndarray, stat: str) -> float:
    """`stat` as loadgen.metrics.summarize computes it (numpy's linear interpolation)."""
    if stat == "mean":
        return float(values.mean())
    if stat == "max":
        return float(values.max())
    return float(np.percentile(values, float(stat[1:])))


def order_statistic_interval(values: np.ndarray, q: float) -> tuple[float, float]:
    """Distribution-free interval of the q-quantile of independent values: the order statistics at
    ranks n q -+ z sqrt(n q (1 - q)), clamped to the sample (so with few values its ends are the
    sample's extremes, not a point), and moved out past ties (a simulated engine's step times repeat
    exactly, so the ranks can land on one value: the percentile is then known only to the next
    distinct values on either side)."""
    v = np.sort(values)
    n = len(v)
    half = Z_95 * math.sqrt(n * q * (1 - q))
    lo = max(math.floor(n * q - half) - 1, 0)
    hi = max(min(math.ceil(n * q + half) - 1, n - 1), lo)
    point = float(np.percentile(v, q * 100))
    if v[lo] >= point:
        lo = max(int(np.searchsorted(v, point, side="left")) - 1, 0)
    if v[hi] <= point:
        hi = min(int(np.searchsorted(v, point, side="right")), n - 1)
    return float(v[lo]), float(v[hi])


def wilson(passed: int, n: int) -> tuple[float, float]:
    """Wilson score interval of a proportion (95%); never a point for n > 0."""
    if n <= 0:
        return 0.0, 1.0
    p, z2 = passed / n, Z_95 * Z_95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z_95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(centre - half, 0.0), min(centre + half, 1.0)


def batch_means(estimate: float, per_batch: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """estimate -+ t(k-1) s / sqrt(k), s the standard deviation of the k batches' values."""
    k = len(per_batch)
    half = T_95[k - 1] * float(np.std(per_batch, ddof=1)) / math.sqrt(k)
    return estimate - half, estimate + half


def jackknife(estimate: float, left_out: Sequence[float]) -> tuple[float, float]:
    """estimate -+ t(k-1) se, se the delete-one-batch jackknife's: sqrt((k-1)/k sum (x_i - mean)^2)
    over the k estimates that each leave one batch out. For a rate (a sum over the window) this is
    batch_means exactly; unlike a percentile of each short batch, it keeps a tail percentile's
    estimate from 4/5 of the window, not 1/5."""
    k = len(left_out)
    x = np.asarray(left_out, dtype=np.float64)
    half = T_95[k - 1] * math.sqrt((k - 1) / k * float(((x - x.mean()) ** 2).sum()))
    return estimate - half, estimate + half


def _batch_of(times: np.ndarray, w: Window, k: int) -> np.ndarray:
    """Batch index of each time (-1 outside the window)."""
    length = w.length_s / k
    idx = np.floor((times - w.start_s) / length).astype(np.int64)
    if not w.by_sends:  # the window's end is a request's end: it belongs to the last batch
        idx = np.where(times <= w.end_s, np.minimum(idx, k - 1), -1)
    return np.where((idx >= 0) & (idx < k), idx, -1)


def _streamed(records: Sequence[RequestRecord], w: Window, k: int) -> np.ndarray:
    """Output tokens streamed in each batch (loadgen.window.streamed_until at the batch edges)."""
    edges = w.start_s + np.arange(k + 1) * (w.length_s / k)
    total = np.zeros(k + 1)
    for r in records:
        total += streamed_until(r, edges)
    return np.diff(total)


def _hull(iv: tuple[float, float], *points: float, floor: float | None = None) -> list[float]:
    lo, hi = min(iv[0], *points), max(iv[1], *points)
    return [lo if floor is None else max(lo, floor), hi]


def point_intervals(
    records: Sequence[RequestRecord],
    *,
    warmup_s: float = 0.0,
    cooldown_s: float = 0.0,
    gpus: int | None = None,
    slo: Mapping[str, float] | None = None,
    seed: int = 0,
    batches: int = BATCHES,
) -> dict[str, Any]:
    """Intervals by name: each SLO key (e.g. 'itl_p99_ms'), 'goodput' and 'output_throughput' (per
    second; '_per_gpu' versions with `gpus`), plus the method's parameters (module docstring).
    `seed` is the workload seed, kept with the method (the method itself draws nothing at random);
    `batches` other than BATCHES is for bench/interval_coverage.py's comparison."""
    if batches > max(T_95) + 1:
        raise ValueError(f"at most {max(T_95) + 1} batches")
    w = measurement_window(records, warmup_s, cooldown_s)
    inside = [r for r in records if w.holds(r)]
    k = batch_count(len(inside), batches)
    out: dict[str, Any] = {
        "method": METHOD,
        "batches": k,
        "confidence": CONFIDENCE,
        "seed": seed,
        "requests": len(inside),
        "enough": len(inside) >= MIN_REQUESTS_TO_SEPARATE,
    }
    slo_d = dict(slo or {})
    if slo_d:
        out["slo"] = slo_d  # the bounds the intervals are held against (selection interpolates to them)
    done = [r for r in inside if r.ok]
    if not k or not done or w.length_s <= 0:
        return out
    length = w.length_s / k
    # A request's batch: when it was sent (the arrivals vary between reruns); when every send fell on
    # one instant, when it ended.
    when = np.array([r.sent_s if w.by_sends else (r.done_s or r.sent_s) for r in inside])
    batch = _batch_of(when, w, k)

    rates: dict[str, list[float]] = {}
    streamed = _streamed(records, w, k)
    estimate = float(streamed.sum()) / w.length_s
    rates["output_throughput"] = _hull(batch_means(estimate, streamed / length), estimate, floor=0.0)
    if slo_d:
        # meets_slo of each request, over one set of columns (one per request cost 0.5 ms each)
        good = np.asarray(slo_mask(columns_from_records(inside), slo_d), dtype=np.float64)
        inb = batch >= 0
        per_batch = np.bincount(batch[inb], weights=good[inb], minlength=k) / length
        goodput = float(good.sum()) / w.length_s
        achieved = len(inside) / w.length_s
        p_lo, p_hi = wilson(int(good.sum()), len(inside))
        bm = batch_means(goodput, per_batch)
        rates["goodput"] = _hull((min(bm[0], achieved * p_lo), max(bm[1], achieved * p_hi)), goodput,
                                 floor=0.0)
    for name, iv in rates.items():
        out[name] = iv
        if gpus:
            out[f"{name}_per_gpu"] = [x / gpus for x in iv]

    done_batch = np.array([b for r, b in zip(inside, batch, strict=True) if r.ok])
    for metric, stat, _bound in parse_slo(slo_d):
        per_request = [_values(r, metric) for r in done]
        owners = np.repeat(done_batch, [len(v) for v in per_request])
        values = np.fromiter((x for v in per_request for x in v), dtype=np.float64, count=len(owners))
        if not values.size:
            continue
        point = _stat(values, stat)
        left_out = [_stat(values[owners != b], stat) for b in range(k) if np.any(owners != b)]
        lo, hi = jackknife(point, left_out) if len(left_out) == k else (point, point)
        if stat not in ("mean", "max"):
            os_lo, os_hi = order_statistic_interval(values, float(stat[1:]) / 100)
            lo, hi = min(lo, os_lo), max(hi, os_hi)
        out[f"{metric}_{stat}_ms"] = _hull((lo, hi), point, floor=0.0)
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
