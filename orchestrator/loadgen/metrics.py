"""Every load-generator metric, defined once (see DESIGN.md, "Metrics (loadgen/)").

Pure functions over RequestRecords. Definitions (all latencies in milliseconds):

- TTFT: send to the first chunk carrying output.
- E2E: send to end of stream.
- TPOT: (E2E - TTFT) / (N - 1), N = output tokens from the server's usage (fallback: tokens counted
  per chunk; `fallback_token_counts` says how many requests used it). Requests with N < 2 have no TPOT.
- ITL per chunk (`itl_chunk`): gaps between consecutive content chunks (vLLM's convention).
- ITL per token (`itl_token`): each chunk's gap spread evenly over the tokens that chunk carries.
- Percentiles p50/p90/p95/p99 use numpy's linear interpolation (as `vllm bench serve`), plus the mean.
- The measurement window (`measurement_window`): from the first scheduled send plus warm-up to one
  mean send gap past the last send (n sends own n gaps), minus cool-down, half open. The window's
  requests are those *sent* inside it, whenever they end; a request still streaming when the window
  closes counts with its outcome, and the drain after the last send is outside, so a layout is not
  charged for its last request's latency as time. When
  every send falls on one instant (rate inf) or there is one request, the window runs to the last end
  instead (a batch's makespan), and a request counts when it was sent and ended inside it.
- Achieved rate: the window's sends per second of window; scheduled rate: the same over the schedule's
  own window (first scheduled + warm-up to last scheduled - cool-down), so achieved / scheduled is the
  share of the schedule the client delivered (loadgen/delivery.py judges it).
- Goodput: the window's requests that completed meeting every SLO bound, per second of the same
  window, so goodput <= request throughput (the window's completed requests per second) <= achieved
  rate, with equality when every request passes.
- Output (and total) token throughput: tokens the server streamed *during* the window (a request's
  first token at its first content chunk, its other N - 1 evenly from there to its end, as TPOT
  assumes; prompt tokens at the first chunk), per second.
  Production, not arrivals: past capacity it is what the server served, not what was offered; a
  warm-up keeps the start-up ramp out.
- Scheduling lag = sent - scheduled - queue wait (the client's own lateness); queue wait = time waiting
  for a max-concurrency slot, reported apart. Error rate = failed / all requests.
- Sessions (conversation, agentic: records tagged "session" and "turn"): TTFT and ITL per turn class,
  first turns (turn 0) apart from later turns (`ttft_first_turn_ms`, `ttft_later_turns_ms`, ...); an
  SLO bound may name a class (`ttft_later_turns_p99_ms`). Session time: first send to last end of a
  session whose every call completed, over those with a completed call in the window. Sessions completed /
  failed / unfinished (still going when the load point ended) count every session in the records.
- Prefix-cache hit rate from the records (the simulator tags each with `cached_tokens`): cached prompt
  tokens over prompt tokens of the completed requests, in all and per turn class. A served engine's own
  counters are read from its /metrics instead (loadgen/engine_metrics.py).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from orchestrator.loadgen.records import RequestRecord

PERCENTILES = (50, 90, 95, 99)
SLO_METRICS = ("ttft", "tpot", "e2e", "itl", "itl_token", "ttft_first_turn", "ttft_later_turns")
FIRST_TURN = "0"  # RequestRecord.extra["turn"] of a session's first step
SLO_STATS = ("p50", "p90", "p95", "p99", "mean", "max")


@dataclass(frozen=True)
class Distribution:
    """Summary of a set of values in ms; fields are None when there are no values."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None

    def stat(self, name: str) -> float | None:
        value: float | None = getattr(self, name)
        return value


def summarize(values_ms: Iterable[float]) -> Distribution:
    arr = np.asarray(list(values_ms), dtype=np.float64)
    if arr.size == 0:
        return Distribution(0, None, None, None, None, None, None)
    p = np.percentile(arr, PERCENTILES)
    return Distribution(
        count=int(arr.size),
        mean=float(arr.mean()),
        p50=float(p[0]),
        p90=float(p[1]),
        p95=float(p[2]),
        p99=float(p[3]),
        max=float(arr.max()),
    )


def stddev(values: Iterable[float]) -> float | None:
    """Population standard deviation (numpy's default, as `vllm bench serve` reports it); None if empty."""
    arr = np.asarray(list(values), dtype=np.float64)
    return float(arr.std()) if arr.size else None


def parse_slo(slo: Mapping[str, float]) -> list[tuple[str, str, float]]:
    """{"ttft_p99_ms": 2000, "itl_token_p95_ms": 50} -> [("ttft", "p99", 2000.0), ...]."""
    out: list[tuple[str, str, float]] = []
    for key, bound in slo.items():
        if not key.endswith("_ms"):
            raise ValueError(f"SLO key {key!r} must end in _ms (e.g. ttft_p99_ms)")
        metric, _, stat = key[: -len("_ms")].rpartition("_")
        if metric not in SLO_METRICS or stat not in SLO_STATS:
            raise ValueError(
                f"SLO key {key!r}: metric must be one of {SLO_METRICS}, statistic one of {SLO_STATS}"
            )
        out.append((metric, stat, float(bound)))
    return out


def turn_class(rec: RequestRecord) -> str | None:
    """"first" or "later" for a session's call, None for a request outside any session."""
    turn = rec.extra.get("turn")
    return None if turn is None else ("first" if turn == FIRST_TURN else "later")


def request_scalar_s(rec: RequestRecord, metric: str) -> float | None:
    """A scalar SLO metric of one request in seconds (ttft, tpot, e2e, or TTFT of one turn class: none
    for a request of the other class or outside sessions)."""
    if metric in ("ttft_first_turn", "ttft_later_turns"):
        wanted = "first" if metric == "ttft_first_turn" else "later"
        return rec.ttft_s if turn_class(rec) == wanted else None
    return {"ttft": rec.ttft_s, "tpot": rec.tpot_s, "e2e": rec.e2e_s}[metric]


def _request_value_ms(rec: RequestRecord, metric: str, stat: str) -> float | None:
    """The request's own value of `metric`: a scalar, or its `stat` over its own ITL gaps."""
    if metric in ("itl", "itl_token"):
        gaps = rec.itl_chunk_s if metric == "itl" else rec.itl_token_s
        return summarize(g * 1e3 for g in gaps).stat(stat)
    v = request_scalar_s(rec, metric)
    return None if v is None else v * 1e3


def meets_slo(rec: RequestRecord, slo: Mapping[str, float]) -> bool:
    """A completed request meets the SLO when each bound holds for its own value.

    Missing values (no TPOT for a one-token answer, no ITL gaps) do not fail a bound.
    """
    if not rec.ok:
        return False
    for metric, stat, bound in parse_slo(slo):
        v = _request_value_ms(rec, metric, stat)
        if v is not None and v > bound:
            return False
    return True


@dataclass(frozen=True)
class Metrics:
    n_requests: int  # all records given
    n_in_window: int
    n_completed: int  # completed inside the window
    n_failed: int  # failed, all records
    failures: dict[str, int]
    fallback_token_counts: int  # completed requests whose N did not come from usage
    window_s: float
    ttft_ms: Distribution
    tpot_ms: Distribution
    itl_chunk_ms: Distribution
    itl_token_ms: Distribution
    e2e_ms: Distribution
    request_throughput: float  # completed req/s
    output_throughput: float  # output tok/s
    total_throughput: float  # (prompt + output) tok/s
    total_input_tokens: int
    total_output_tokens: int
    gpus: int | None
    per_gpu: dict[str, float] | None
    slo: dict[str, float] = field(default_factory=dict)
    goodput: float | None = None  # req/s meeting every SLO bound
    achieved_rate: float | None = None  # sends/s actually achieved
    scheduled_rate: float | None = None  # sends/s the schedule asked for
    sched_lag_ms: Distribution | None = None
    queue_wait_ms: Distribution | None = None
    # Sessions only (None otherwise); see the module docstring.
    ttft_first_turn_ms: Distribution | None = None
    ttft_later_turns_ms: Distribution | None = None
    itl_first_turn_ms: Distribution | None = None
    itl_later_turns_ms: Distribution | None = None
    session_ms: Distribution | None = None
    sessions_completed: int | None = None
    sessions_failed: int | None = None
    sessions_unfinished: int | None = None  # still going when the load point's duration ended
    # Simulator records only: cached prompt tokens / prompt tokens, in all and per turn class.
    prefix_hit_rate: float | None = None
    prefix_hit_rate_first_turn: float | None = None
    prefix_hit_rate_later_turns: float | None = None

    @property
    def error_rate(self) -> float:
        """Failed requests over all requests (0 when there were none)."""
        return self.n_failed / self.n_requests if self.n_requests else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["error_rate"] = self.error_rate
        return d


def _span_rate(times: Sequence[float]) -> float | None:
    if len(times) < 2:
        return None
    span = max(times) - min(times)
    return (len(times) - 1) / span if span > 0 else math.inf


def _end_of(r: RequestRecord) -> float:
    return r.done_s if r.done_s is not None else r.sent_s


@dataclass(frozen=True)
class Window:
    """The measurement window (module docstring): [start_s, end_s), by the sends, or to the last end
    when the schedule has no span (every request at once, or one request)."""

    start_s: float
    end_s: float
    by_sends: bool  # False: every send at one instant or a single request, so up to the last end

    @property
    def length_s(self) -> float:
        return max(self.end_s - self.start_s, 0.0)

    def holds(self, r: RequestRecord) -> bool:
        """Is `r` one of the window's requests?"""
        if self.by_sends:
            return self.start_s <= r.sent_s < self.end_s
        return r.sent_s >= self.start_s and _end_of(r) <= self.end_s

    def covers(self, t: float) -> bool:
        """Is time `t` (a chunk's arrival) inside the window?"""
        return self.start_s <= t < self.end_s if self.by_sends else self.start_s <= t <= self.end_s


def measurement_window(
    records: Sequence[RequestRecord], warmup_s: float = 0.0, cooldown_s: float = 0.0
) -> Window:
    if not records:
        return Window(0.0, 0.0, True)
    start = min(r.scheduled_s for r in records) + warmup_s
    end = _past_last([r.sent_s for r in records]) - cooldown_s
    if _past_last([r.scheduled_s for r in records]) - cooldown_s > start and end > start:
        return Window(start, end, True)
    return Window(start, max(max(_end_of(r) for r in records) - cooldown_s, start), False)


def in_window(
    records: Sequence[RequestRecord], warmup_s: float = 0.0, cooldown_s: float = 0.0
) -> tuple[float, list[RequestRecord]]:
    """The measurement window's length and its requests (module docstring)."""
    w = measurement_window(records, warmup_s, cooldown_s)
    return w.length_s, [r for r in records if w.holds(r)]


def streamed_until(r: RequestRecord, times: np.ndarray) -> np.ndarray:
    """Output tokens request `r` had streamed by each of `times`: its first token at its first content
    chunk, the other N - 1 evenly from there to its end (its TPOT, as loadgen defines it), so a
    window's count moves smoothly as the request moves and needs only the request's first chunk, end
    and N. Zero for a failed request."""
    first = r.chunk_times_s[0] if r.chunk_times_s else None
    n = r.n_output_tokens
    if not r.ok or first is None or r.done_s is None or n <= 0:
        return np.zeros(len(times))
    span = r.done_s - first
    share = np.clip((times - first) / span, 0.0, 1.0) if span > 0 else (times >= first).astype(np.float64)
    return np.where(times >= first, 1.0 + (n - 1) * share, 0.0)


def streamed_in(r: RequestRecord, w: Window) -> tuple[float, float]:
    """(output tokens, prompt tokens) request `r` streamed inside window `w` (streamed_until); the
    prompt counts at the first chunk."""
    if not r.ok or not r.chunk_times_s:
        return 0.0, 0.0
    lo, hi = streamed_until(r, np.array([w.start_s, w.end_s]))
    prompt = float(r.prompt_tokens or 0) if w.covers(r.chunk_times_s[0]) else 0.0
    return float(hi - lo), prompt


def _past_last(times: Sequence[float]) -> float:
    """One mean gap past the last of `times`: n sends own n gaps, so n / (span + gap) is the familiar
    (n - 1) / span and the last send is inside the window (with one time, or all at one instant, the
    last time itself)."""
    first, last = min(times), max(times)
    return last + (last - first) / (len(times) - 1) if len(times) > 1 else last


def _rate_in(times: Sequence[float], start: float, end: float) -> float | None:
    if end <= start:
        return _span_rate(times)
    return sum(1 for t in times if start <= t < end) / (end - start)


def closed_loop_warmup_s(records: Sequence[RequestRecord], concurrency: int) -> float:
    """The default warm-up of a closed loop: until every client's first request has ended. Clients that
    start together queue their first prompts behind each other (a cold queue no steady state has);
    benchmark tools that publish closed-loop numbers ramp up and measure after it. Only when there
    are at least three requests per client (else there is no steady state to keep)."""
    if concurrency <= 1 or len(records) < 3 * concurrency:
        return 0.0
    first = sorted(records, key=lambda r: r.sent_s)[:concurrency]
    start = min(r.scheduled_s for r in records)
    return max((r.done_s if r.done_s is not None else r.sent_s) for r in first) - start


def point_warmup_s(records: Sequence[RequestRecord], configured_s: float, concurrency: int | None) -> float:
    """The warm-up a point is measured after: the configured one, else a closed loop's default
    (closed_loop_warmup_s). The metrics, their intervals and pooled repeats all use this one window."""
    if configured_s or not concurrency:
        return configured_s
    return closed_loop_warmup_s(records, concurrency)


def compute_metrics(
    records: Sequence[RequestRecord],
    *,
    warmup_s: float = 0.0,
    cooldown_s: float = 0.0,
    gpus: int | None = None,
    slo: Mapping[str, float] | None = None,
) -> Metrics:
    """All metrics over `records`; see the module docstring for each definition."""
    slo_d = dict(slo or {})
    parse_slo(slo_d)  # validate early
    if not records:
        empty = summarize([])
        return Metrics(
            0, 0, 0, 0, {}, 0, 0.0, empty, empty, empty, empty, empty, 0.0, 0.0, 0.0, 0, 0, gpus, None, slo_d
        )

    w = measurement_window(records, warmup_s, cooldown_s)
    window = w.length_s
    inside = [r for r in records if w.holds(r)]
    done = [r for r in inside if r.ok]

    failures = Counter(r.error for r in records if r.error is not None)
    out_tokens = sum(r.n_output_tokens for r in done)
    in_tokens = sum(r.prompt_tokens or 0 for r in done)
    streamed = [streamed_in(r, w) for r in records]
    out_streamed = sum(o for o, _ in streamed)
    in_streamed = sum(p for _, p in streamed)

    def rate(x: float) -> float:
        return x / window if window > 0 else 0.0

    req_tp, out_tp, tot_tp = rate(len(done)), rate(out_streamed), rate(out_streamed + in_streamed)
    per_gpu = None
    if gpus:
        per_gpu = {
            "request_throughput": req_tp / gpus,
            "output_throughput": out_tp / gpus,
            "total_throughput": tot_tp / gpus,
        }
    goodput = rate(sum(1 for r in done if meets_slo(r, slo_d))) if slo_d else None
    sent = [r.sent_s for r in records]
    scheduled = [r.scheduled_s for r in records]
    if w.by_sends:
        achieved = _rate_in(sent, w.start_s, w.end_s)
        planned = _rate_in(scheduled, w.start_s, _past_last(scheduled) - cooldown_s)
    else:
        achieved, planned = _span_rate(sent), _span_rate(scheduled)

    def ms(values: Iterable[float | None]) -> Distribution:
        return summarize(v * 1e3 for v in values if v is not None)

    return Metrics(
        **_session_metrics(records, done),
        **_hit_rates(done),
        n_requests=len(records),
        n_in_window=len(inside),
        n_completed=len(done),
        n_failed=sum(failures.values()),
        failures=dict(sorted(failures.items())),
        fallback_token_counts=sum(1 for r in done if r.output_tokens_source != "usage"),
        window_s=window,
        ttft_ms=ms(r.ttft_s for r in done),
        tpot_ms=ms(r.tpot_s for r in done),
        itl_chunk_ms=ms(g for r in done for g in r.itl_chunk_s),
        itl_token_ms=ms(g for r in done for g in r.itl_token_s),
        e2e_ms=ms(r.e2e_s for r in done),
        request_throughput=req_tp,
        output_throughput=out_tp,
        total_throughput=tot_tp,
        total_input_tokens=in_tokens,
        total_output_tokens=out_tokens,
        gpus=gpus,
        per_gpu=per_gpu,
        slo=slo_d,
        goodput=goodput,
        achieved_rate=achieved,
        scheduled_rate=planned,
        sched_lag_ms=ms(r.scheduling_lag_s for r in records),
        queue_wait_ms=ms(r.queued_s for r in records),
    )


def _session_metrics(records: Sequence[RequestRecord], done: Sequence[RequestRecord]) -> dict[str, Any]:
    if not any("turn" in r.extra for r in records):
        return {}
    first = [r for r in done if turn_class(r) == "first"]
    later = [r for r in done if turn_class(r) == "later"]
    spans: dict[str, list[float]] = {}
    failed: set[str] = set()
    ended: set[str] = set()
    for r in records:
        sid = r.extra.get("session")
        if sid is None:
            continue
        if not r.ok:
            failed.add(sid)
        elif r.extra.get("session_end"):
            ended.add(sid)
        span = spans.setdefault(sid, [r.sent_s, r.done_s or r.sent_s])
        span[0], span[1] = min(span[0], r.sent_s), max(span[1], r.done_s or r.sent_s)
    inside = {r.extra.get("session") for r in done}
    complete = ended - failed
    return {
        "ttft_first_turn_ms": summarize(r.ttft_s * 1e3 for r in first if r.ttft_s is not None),
        "ttft_later_turns_ms": summarize(r.ttft_s * 1e3 for r in later if r.ttft_s is not None),
        "itl_first_turn_ms": summarize(g * 1e3 for r in first for g in r.itl_chunk_s),
        "itl_later_turns_ms": summarize(g * 1e3 for r in later for g in r.itl_chunk_s),
        "session_ms": summarize((spans[s][1] - spans[s][0]) * 1e3 for s in complete if s in inside),
        "sessions_completed": len(complete),
        "sessions_failed": len(failed),
        "sessions_unfinished": len(set(spans) - ended - failed),
    }


def _hit_rates(done: Sequence[RequestRecord]) -> dict[str, Any]:
    tagged = [r for r in done if "cached_tokens" in r.extra and r.prompt_tokens]
    if not tagged:
        return {}

    def rate(rs: Sequence[RequestRecord]) -> float | None:
        prompt = sum(r.prompt_tokens or 0 for r in rs)
        return sum(int(r.extra["cached_tokens"]) for r in rs) / prompt if prompt else None

    return {
        "prefix_hit_rate": rate(tagged),
        "prefix_hit_rate_first_turn": rate([r for r in tagged if turn_class(r) == "first"]),
        "prefix_hit_rate_later_turns": rate([r for r in tagged if turn_class(r) == "later"]),
    }


def slo_violations(metrics: Metrics, slo: Mapping[str, float]) -> list[tuple[str, float, float]]:
    """The bounds the run's distributions break, as (key, measured ms, bound ms)."""
    empty = summarize([])
    dists = {
        "ttft": metrics.ttft_ms,
        "tpot": metrics.tpot_ms,
        "e2e": metrics.e2e_ms,
        "itl": metrics.itl_chunk_ms,
        "itl_token": metrics.itl_token_ms,
        "ttft_first_turn": metrics.ttft_first_turn_ms or empty,
        "ttft_later_turns": metrics.ttft_later_turns_ms or empty,
    }
    out = []
    for metric, stat, bound in parse_slo(slo):
        v = dists[metric].stat(stat)
        if v is not None and v > bound:
            out.append((f"{metric}_{stat}_ms", v, bound))
    return out


def slo_met(metrics: Metrics, slo: Mapping[str, float]) -> bool:
    """Aggregate check: every bound holds on the run's distribution (e.g. p99 TTFT <= 2000 ms)."""
    return not slo_violations(metrics, slo)


def finite(obj: Any) -> Any:
    """A JSON-safe copy: JSON has no infinity or NaN (an all-at-once rate, an empty window), so
    they are written as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj
