"""Every load-generator metric, defined once (see DESIGN.md, "Metrics (loadgen/)").

Pure functions over RequestRecords. Definitions (all latencies in milliseconds):

- TTFT: send to the first chunk carrying output.
- E2E: send to end of stream.
- TPOT: (E2E - TTFT) / (N - 1), N = output tokens from the server's usage (fallback: tokens counted
  per chunk; `fallback_token_counts` says how many requests used it). Requests with N < 2 have no TPOT.
- ITL per chunk (`itl_chunk`): gaps between consecutive content chunks (vLLM's convention).
- ITL per token (`itl_token`): each chunk's gap spread evenly over the tokens that chunk carries.
- Percentiles p50/p90/p95/p99 use numpy's linear interpolation (as `vllm bench serve`), plus the mean;
  computed once per point over arrays of every request (orchestrator.loadgen.columns).
- The measurement window (`measurement_window`, loadgen/window.py): from the first scheduled send
  plus warm-up to one mean send gap past the last send (n sends own n gaps), minus cool-down, half
  open. The window's requests are those *sent* inside it, whenever they end; a request still
  streaming when the window closes counts with its outcome, and the drain after the last send is
  outside, so a layout is not charged for its last request's latency as time. When
  every send falls on one instant (rate inf) or there is one request, the window runs to the last end
  instead (a batch's makespan), and a request counts when it was sent and ended inside it.
- Achieved rate: the window's sends per second of window; scheduled rate: the same over the schedule's
  own window (first scheduled + warm-up to last scheduled - cool-down), so achieved / scheduled is the
  share of the schedule the client delivered (loadgen/delivery.py judges it).
- Goodput: the window's requests that completed meeting every SLO bound (each on its own value:
  loadgen/slo.py), per second of the same window, so goodput <= request throughput (the window's
  completed requests per second) <= achieved rate, with equality when every request passes.
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

from orchestrator.loadgen.columns import (
    STAT_PERCENTS,
    GapSet,
    RequestColumns,
    columns_from_records,
    turn_class,
    weighted_summary,
)
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.slo import parse_slo, slo_mask
from orchestrator.loadgen.window import past_last, rate_in, span_rate, streamed_in, window_of

PERCENTILES = tuple(STAT_PERCENTS.values())  # 50, 90, 95, 99


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
    return distribution(np.asarray(list(values_ms), dtype=np.float64))


def distribution(values_ms: Any, weights: Any = None) -> Distribution:
    """The Distribution of an array of values (each repeated `weights` times when given)."""
    count, mean, pct, top = weighted_summary(values_ms, weights)
    return Distribution(count, mean, pct["p50"], pct["p90"], pct["p95"], pct["p99"], top)


def stddev(values: Iterable[float]) -> float | None:
    """Population standard deviation (numpy's default, as `vllm bench serve` reports it); None if empty."""
    arr = np.asarray(list(values), dtype=np.float64)
    return float(arr.std()) if arr.size else None


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


def compute_metrics(
    records: Sequence[RequestRecord],
    *,
    warmup_s: float = 0.0,
    cooldown_s: float = 0.0,
    gpus: int | None = None,
    slo: Mapping[str, float] | None = None,
) -> Metrics:
    """All metrics over `records`; see the module docstring for each definition."""
    return metrics_of(columns_from_records(records), warmup_s=warmup_s, cooldown_s=cooldown_s, gpus=gpus,
                      slo=slo, records=records)


def metrics_of(
    cols: RequestColumns,
    *,
    warmup_s: float = 0.0,
    cooldown_s: float = 0.0,
    gpus: int | None = None,
    slo: Mapping[str, float] | None = None,
    records: Sequence[RequestRecord] | None = None,
) -> Metrics:
    """All metrics over the requests of `cols` (one array per field; see loadgen.columns), each
    statistic computed once over every request. Session metrics need the `records` of `cols` (their
    session tags); the simulator's columns hold no sessions."""
    slo_d = dict(slo or {})
    parse_slo(slo_d)  # validate early
    if not len(cols):
        empty = summarize([])
        return Metrics(
            0, 0, 0, 0, {}, 0, 0.0, empty, empty, empty, empty, empty, 0.0, 0.0, 0.0, 0, 0, gpus, None, slo_d
        )

    ends = np.where(np.isnan(cols.done_s), cols.sent_s, cols.done_s)
    w = window_of(cols.scheduled_s, cols.sent_s, ends, warmup_s, cooldown_s)
    window = w.length_s
    inside = w.contains(cols.sent_s, ends)
    done = inside & cols.ok
    n_done = int(done.sum())

    failures = Counter(e for e in cols.errors if e is not None)
    out_tokens = int(cols.output_tokens[done].sum())
    in_tokens = int(cols.prompt_tokens[done].sum())
    out_streamed, in_streamed = streamed_in(cols, w)

    def rate(x: float) -> float:
        return x / window if window > 0 else 0.0

    req_tp, out_tp, tot_tp = rate(n_done), rate(out_streamed), rate(out_streamed + in_streamed)
    per_gpu = None
    if gpus:
        per_gpu = {
            "request_throughput": req_tp / gpus,
            "output_throughput": out_tp / gpus,
            "total_throughput": tot_tp / gpus,
        }
    goodput = rate(int((slo_mask(cols, slo_d) & done).sum())) if slo_d else None
    if w.by_sends:
        achieved = rate_in(cols.sent_s, w.start_s, w.end_s)
        planned = rate_in(cols.scheduled_s, w.start_s, past_last(cols.scheduled_s) - cooldown_s)
    else:
        achieved, planned = span_rate(cols.sent_s), span_rate(cols.scheduled_s)

    def ms(values_s: Any) -> Distribution:
        values_s = values_s[~np.isnan(values_s)]
        return distribution(values_s * 1e3)

    def gaps_ms(gaps: GapSet) -> Distribution:
        return distribution(gaps.values * 1e3, gaps.coverage(done))

    itl_chunk = gaps_ms(cols.itl_chunk)
    # One token a chunk (the simulator): the per-token gaps are the same values, computed once.
    itl_token = itl_chunk if cols.itl_token is cols.itl_chunk else gaps_ms(cols.itl_token)

    return Metrics(
        **({} if records is None else _session_metrics(records, [r for r, k in zip(records, done, strict=True)
                                                                  if k])),
        **_hit_rates(cols, done),
        n_requests=len(cols),
        n_in_window=int(inside.sum()),
        n_completed=n_done,
        n_failed=sum(failures.values()),
        failures=dict(sorted(failures.items())),
        fallback_token_counts=int((done & ~cols.usage_counted).sum()),
        window_s=window,
        ttft_ms=ms(cols.ttft_s()[done]),
        tpot_ms=ms(cols.tpot_s()[done]),
        itl_chunk_ms=itl_chunk,
        itl_token_ms=itl_token,
        e2e_ms=ms(cols.e2e_s()[done]),
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
        sched_lag_ms=ms(cols.sent_s - cols.scheduled_s - cols.queued_s),
        queue_wait_ms=ms(cols.queued_s),
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
        # In the sessions' first-record order, not the set's (string hashing changes it from run to run,
        # and with it the last digit of a float mean).
        "session_ms": summarize((span[1] - span[0]) * 1e3 for s, span in spans.items()
                                if s in complete and s in inside),
        "sessions_completed": len(complete),
        "sessions_failed": len(failed),
        "sessions_unfinished": len(set(spans) - ended - failed),
    }


def _hit_rates(cols: RequestColumns, done: Any) -> dict[str, Any]:
    cached = cols.cached_tokens
    if cached is None:
        return {}
    tagged = done & (cached >= 0) & (cols.prompt_tokens > 0)
    if not tagged.any():
        return {}

    def rate(mask: Any) -> float | None:
        prompt = int(cols.prompt_tokens[mask].sum())
        return int(cached[mask].sum()) / prompt if prompt else None

    turns = np.array(cols.turns if cols.turns is not None else [None] * len(cols), dtype=object)
    return {
        "prefix_hit_rate": rate(tagged),
        "prefix_hit_rate_first_turn": rate(tagged & (turns == "first")),
        "prefix_hit_rate_later_turns": rate(tagged & (turns == "later")),
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
