"""The load generator's open and closed loops in virtual time, over one `VirtualRun` (sim/virtual.py):
open loop, each request sent at its arrival (under an optional concurrency cap); closed loop,
`concurrency` clients each sending its next request when its previous one ends, started together or
ramped, once through the requests or cycled for a duration. Each gives records, or columns for runs
too large for one record per request. Session workloads drive the same run: sim/sessions.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from orchestrator.loadgen.balance import Balance
from orchestrator.loadgen.columns import RequestColumns
from orchestrator.loadgen.records import RequestRecord
from orchestrator.sim.engine import EngineCore
from orchestrator.sim.virtual import SimRequest, SimSummary, VirtualRun


def simulate(engines: Sequence[EngineCore], requests: Sequence[SimRequest], *,
             balance: Balance = "least_outstanding",
             max_concurrency: int | None = None,
             sample_interval_s: float | None = None,
             dp: int = 1) -> tuple[list[RequestRecord], SimSummary]:
    """Open loop: run `requests` (each sent at its arrival) to completion; one record per request,
    in request order. `engines` are replicas of `dp` engines each, replica after replica.

    `max_concurrency` caps the requests in flight as the load generator's semaphore does: a request
    that arrives while every slot is taken waits, in arrival order, until one frees; that wait is its
    `queued_s` and its TTFT starts when it is sent. With `sample_interval_s`, the engines' running,
    waiting, KV usage and preemption counter are sampled every that many virtual seconds.
    """
    run = VirtualRun(engines, balance, max_concurrency, closed=False, sample_s=sample_interval_s, dp=dp)
    return run.go(requests, None)


def simulate_columns(engines: Sequence[EngineCore], requests: Sequence[SimRequest], *,
                     balance: Balance = "least_outstanding", max_concurrency: int | None = None,
                     sample_interval_s: float | None = None,
                     dp: int = 1) -> tuple[RequestColumns, SimSummary]:
    """simulate, with the requests as columns (loadgen.columns) instead of one record each: the gaps
    of a step are held once for every request running in it (what `orch simulate` of 100,000
    requests needs to fit in memory)."""
    run = VirtualRun(engines, balance, max_concurrency, closed=False, sample_s=sample_interval_s, dp=dp)
    _, summary = run.go(requests, None, records=False)
    return run.columns(), summary


def closed_loop(engines: Sequence[EngineCore], requests: Sequence[SimRequest], concurrency: int, *,
                duration_s: float | None = None,
                balance: Balance = "least_outstanding",
                sample_interval_s: float | None = None,
                dp: int = 1,
                ramp_s: float = 0.0) -> tuple[list[RequestRecord], SimSummary]:
    """Closed loop: `concurrency` clients, each sending its next request when its previous one ends
    (arrival times in `requests` are ignored). Without `duration_s` each request is sent once; with
    it, `requests` are cycled (ids suffixed "#k") and none is sent at or after `duration_s`. Records
    come in send order, as the load generator's closed loop returns them.

    `ramp_s` > 0 starts the clients one by one, evenly over that many seconds, instead of all at
    t=0 (benchmark tools ramp up this way); requests after each client's first go out from the ramp's
    end on. Clients started together with equal lengths stay in lockstep, every wave prefilling at
    once; staggered over about one request's time they reach the steady state a long run settles in.
    """
    run, timed = _closed(engines, requests, concurrency, balance, sample_interval_s, ramp_s, dp)
    return run.go(timed, duration_s)


def closed_loop_columns(engines: Sequence[EngineCore], requests: Sequence[SimRequest], concurrency: int, *,
                        duration_s: float | None = None, balance: Balance = "least_outstanding",
                        sample_interval_s: float | None = None, dp: int = 1,
                        ramp_s: float = 0.0) -> tuple[RequestColumns, SimSummary]:
    """closed_loop, with the requests as columns (see simulate_columns)."""
    run, timed = _closed(engines, requests, concurrency, balance, sample_interval_s, ramp_s, dp)
    _, summary = run.go(timed, duration_s, records=False)
    return run.columns(), summary


def _closed(engines: Sequence[EngineCore], requests: Sequence[SimRequest], concurrency: int, balance: Balance,
            sample_interval_s: float | None, ramp_s: float, dp: int) -> tuple[VirtualRun, list[SimRequest]]:
    """A closed loop's run and its requests timed by the ramp (closed_loop's docstring)."""
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if ramp_s < 0:
        raise ValueError("ramp_s must be >= 0")
    first = min(concurrency, len(requests))
    starts = [k * ramp_s / first if k < first else ramp_s for k in range(len(requests))]
    timed = [replace(r, arrival_s=t) for r, t in zip(requests, starts, strict=True)]
    return VirtualRun(engines, balance, concurrency, closed=True, sample_s=sample_interval_s, dp=dp), timed


def single_request_s(engine: EngineCore, prompt_tokens: int, output_tokens: int) -> float:
    """One request alone on `engine`, send to last token: the request overhead, its prefill, and its
    output at batch 1 (the length of a closed-loop ramp that spreads clients over one request)."""
    cost = engine.cost
    decode = cost.round_s(1, prompt_tokens, prompt_tokens + 1, 1)
    return (cost.request_overhead_s + cost.prefill(prompt_tokens).total_s
            + max(output_tokens - 1, 0) * decode)
