"""The metrics' inputs for many requests at once: arrays instead of one record object per request.

Per request: its times, token counts and error. Inter-token gaps: one array of values, and for each
request the ranges [start, end) of that array holding its gaps, each value standing for `weights`
tokens. A measured run makes one range per request (columns_from_records). The simulator's requests
share its engines' steps: a gap between two steps is one value however many requests were running
then, and a request's gaps are the ranges of the steps it was in (sim.virtual); 100,000 requests of
hundreds of tokens then take megabytes, not gigabytes, and each statistic is computed once over all
of them. Definitions stay in orchestrator.loadgen.metrics; this module computes them exactly as
numpy's percentile (linear interpolation) would on the expanded values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from orchestrator.loadgen.records import RequestRecord

if TYPE_CHECKING:
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float64]
    IntArray = npt.NDArray[np.int64]
    BoolArray = npt.NDArray[np.bool_]

STAT_PERCENTS = {"p50": 50, "p90": 90, "p95": 95, "p99": 99}
FIRST_TURN = "0"  # RequestRecord.extra["turn"] of a session's first step


def turn_class(rec: RequestRecord) -> str | None:
    """"first" or "later" for a session's call, None for a request outside any session."""
    turn = rec.extra.get("turn")
    return None if turn is None else ("first" if turn == FIRST_TURN else "later")


@dataclass(frozen=True)
class GapSet:
    """Gaps of many requests: `values` (seconds), `weights` (tokens each value stands for; None = 1),
    and ranges: request `req[k]` has the gaps values[start[k]:end[k]] (a request may have several
    ranges, or none)."""

    values: FloatArray
    weights: IntArray | None
    req: IntArray
    start: IntArray
    end: IntArray

    def head(self, n: int) -> GapSet:
        """The ranges of requests 0 .. n-1 only (the values stay: others' ranges no longer point there)."""
        keep = self.req < n
        return GapSet(self.values, self.weights, self.req[keep], self.start[keep], self.end[keep])

    def coverage(self, selected: BoolArray) -> IntArray:
        """How many tokens each value stands for among the selected requests' ranges."""
        keep = selected[self.req] & (self.end > self.start)
        diff = np.zeros(len(self.values) + 1, dtype=np.int64)
        np.add.at(diff, self.start[keep], 1)
        np.add.at(diff, self.end[keep], -1)
        counts = np.cumsum(diff[:-1])
        return counts if self.weights is None else counts * self.weights


@dataclass(frozen=True)
class RequestColumns:
    """One entry per request, in the records' order; NaN where a time is unknown (no chunk, no end)."""

    scheduled_s: FloatArray
    sent_s: FloatArray
    done_s: FloatArray
    first_s: FloatArray  # first content chunk
    queued_s: FloatArray
    output_tokens: IntArray  # N: usage count, else tokens counted per chunk
    prompt_tokens: IntArray  # 0 when unknown
    usage_counted: BoolArray  # N came from the server's usage
    errors: tuple[str | None, ...]
    itl_chunk: GapSet
    itl_token: GapSet
    turns: tuple[str | None, ...] | None = None  # sessions: each request's turn_class; None without sessions
    cached_tokens: IntArray | None = None  # the simulator's prefix-cache hits; -1 untold; None: none told

    def __len__(self) -> int:
        return len(self.sent_s)

    def head(self, n: int) -> RequestColumns:
        """The first n requests (as records[:n])."""
        return RequestColumns(
            self.scheduled_s[:n], self.sent_s[:n], self.done_s[:n], self.first_s[:n], self.queued_s[:n],
            self.output_tokens[:n], self.prompt_tokens[:n], self.usage_counted[:n], self.errors[:n],
            self.itl_chunk.head(n), self.itl_token.head(n), None if self.turns is None else self.turns[:n],
            None if self.cached_tokens is None else self.cached_tokens[:n])

    @cached_property
    def ok(self) -> BoolArray:
        return np.fromiter((e is None for e in self.errors), dtype=np.bool_, count=len(self.errors))

    def ttft_s(self) -> FloatArray:
        return self.first_s - self.sent_s

    def e2e_s(self) -> FloatArray:
        return self.done_s - self.sent_s

    def tpot_s(self) -> FloatArray:
        """(E2E - TTFT) / (N - 1), NaN where N < 2 or a time is missing (as RequestRecord.tpot_s)."""
        n = self.output_tokens
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (self.e2e_s() - self.ttft_s()) / (n - 1)
        return np.where(n >= 2, out, np.nan)


def columns_from_records(records: Sequence[RequestRecord]) -> RequestColumns:
    """The columns of measured records (one gap range per request)."""
    n = len(records)
    nan = float("nan")
    scheduled = np.fromiter((r.scheduled_s for r in records), np.float64, n)
    sent = np.fromiter((r.sent_s for r in records), np.float64, n)
    done = np.fromiter((nan if r.done_s is None else r.done_s for r in records), np.float64, n)
    first = np.fromiter((r.chunk_times_s[0] if r.chunk_times_s else nan for r in records), np.float64, n)
    queued = np.fromiter((r.queued_s for r in records), np.float64, n)
    out_tokens = np.fromiter((r.n_output_tokens for r in records), np.int64, n)
    in_tokens = np.fromiter((r.prompt_tokens or 0 for r in records), np.int64, n)
    usage = np.fromiter((r.output_tokens_source == "usage" for r in records), np.bool_, n)
    gaps: list[float] = []
    tokens: list[int] = []
    starts = np.zeros(n, dtype=np.int64)
    for i, r in enumerate(records):
        starts[i] = len(gaps)
        t, k = r.chunk_times_s, r.chunk_tokens
        gaps.extend(t[j] - t[j - 1] for j in range(1, len(t)))
        tokens.extend(max(k[j], 1) for j in range(1, len(t)))
    ends = np.append(starts[1:], len(gaps)).astype(np.int64) if n else starts
    values = np.asarray(gaps, dtype=np.float64)
    weights = np.asarray(tokens, dtype=np.int64)
    req = np.arange(n, dtype=np.int64)
    chunk = GapSet(values, None, req, starts, ends)
    # Per token: each chunk's gap spread evenly over the tokens it carries.
    token = GapSet(values / np.maximum(weights, 1), weights, req, starts, ends)
    turns = tuple(turn_class(r) for r in records) if any("turn" in r.extra for r in records) else None
    cached = None
    if any("cached_tokens" in r.extra for r in records):
        cached = np.fromiter((int(r.extra.get("cached_tokens", -1)) for r in records), np.int64, n)
    return RequestColumns(scheduled, sent, done, first, queued, out_tokens, in_tokens, usage,
                          tuple(r.error for r in records), chunk, token, turns, cached)


def _lerp(a: FloatArray, b: FloatArray, t: FloatArray) -> FloatArray:
    """numpy's own linear interpolation (numpy.lib._function_base_impl._lerp), for identical results."""
    diff = b - a
    out = a + diff * t
    return np.where(t >= 0.5, b - diff * (1 - t), out)


Summary = tuple[int, float | None, dict[str, float | None], float | None]  # count, mean, percentiles, max


def weighted_summary(values: FloatArray, weights: IntArray | None) -> Summary:
    """(count, mean, {p50..p99}, max) of `values` each repeated `weights` times, exactly as numpy's
    percentile (method linear) and max would give on the expanded array; the mean is the weighted mean."""
    if weights is not None:
        keep = weights > 0
        values, weights = values[keep], weights[keep]
        count = int(weights.sum())
    else:
        count = int(values.size)
    if count == 0:
        return 0, None, dict.fromkeys(STAT_PERCENTS), None
    if weights is None or bool(np.all(weights == 1)):
        pct = np.percentile(values, list(STAT_PERCENTS.values()))
        return count, float(values.mean()), dict(zip(STAT_PERCENTS, map(float, pct), strict=True)), \
            float(values.max())
    order = np.argsort(values, kind="stable")
    v, w = values[order], weights[order]
    cum = np.cumsum(w)  # expanded index j holds v[k] for the first k with cum[k] > j
    qs = np.true_divide(list(STAT_PERCENTS.values()), 100)  # as np.percentile does
    virtual = (count - 1) * qs
    prev = np.floor(virtual)
    gamma = virtual - prev
    nxt = np.minimum(prev + 1, count - 1)
    a = v[np.searchsorted(cum, prev.astype(np.int64), side="right")]
    b = v[np.searchsorted(cum, nxt.astype(np.int64), side="right")]
    pct = _lerp(a, b, gamma)
    mean = float(np.dot(v, w) / count)
    return count, mean, dict(zip(STAT_PERCENTS, map(float, pct), strict=True)), float(v[-1])


def _range_sums(gs: GapSet, per_value: Any, n: int) -> FloatArray:
    """Sum of per_value over each request's ranges (0 for a request without gaps)."""
    cum = np.concatenate(([0], np.cumsum(per_value)))
    out = np.zeros(n, dtype=np.float64)
    np.add.at(out, gs.req, cum[gs.end] - cum[gs.start])
    return out


def gaps_within(gs: GapSet, n: int, stat: str, bound_ms: float) -> BoolArray:
    """Per request: is `stat` (p50/p90/p95/p99/mean/max) of its own gaps, in ms, at most bound_ms?
    A request without gaps passes (a missing value does not fail a bound). Percentiles by counting
    the gaps above the bound (no sort per request); only a request whose percentile falls between
    its last gap below the bound and its first above it is interpolated."""
    ms = gs.values * 1e3
    w = np.ones(len(ms), dtype=np.int64) if gs.weights is None else gs.weights
    m = _range_sums(gs, w, n)  # gaps (tokens) per request
    if stat == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = _range_sums(gs, ms * w, n) / m
        return np.asarray((m == 0) | (mean <= bound_ms), dtype=np.bool_)
    above = _range_sums(gs, np.where(ms > bound_ms, w, 0), n)
    if stat == "max":
        return np.asarray(above == 0, dtype=np.bool_)
    q = STAT_PERCENTS[stat] / 100
    virtual = (m - 1) * q
    prev = np.floor(virtual).astype(np.int64)
    gamma = virtual - prev
    below = m - above  # the sorted gaps 0 .. below-1 are within the bound
    ok = (m == 0) | (prev + 1 < below) | ((gamma == 0) & (prev < below))
    unsure = ~ok & (m > 0) & (prev == below - 1) & (gamma > 0)
    if unsure.any():  # interpolate between the largest gap within and the smallest above
        ranges = np.flatnonzero(unsure[gs.req] & (gs.end > gs.start))
        bounds = np.empty(2 * len(ranges), dtype=np.int64)  # reduceat over each [start, end) alone
        bounds[0::2], bounds[1::2] = gs.start[ranges], gs.end[ranges]
        within = np.append(np.where(ms <= bound_ms, ms, -np.inf), -np.inf)
        beyond = np.append(np.where(ms > bound_ms, ms, np.inf), np.inf)
        lo = np.full(n, -np.inf)
        hi = np.full(n, np.inf)
        np.maximum.at(lo, gs.req[ranges], np.maximum.reduceat(within, bounds)[0::2])
        np.minimum.at(hi, gs.req[ranges], np.minimum.reduceat(beyond, bounds)[0::2])
        idx = np.flatnonzero(unsure)
        ok[idx] = _lerp(lo[idx], hi[idx], gamma[idx]) <= bound_ms
    return np.asarray(ok, dtype=np.bool_)
