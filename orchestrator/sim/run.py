"""`orch simulate` without the printing: a spec's workload through simulated replicas in virtual time.

A load point is what `orch bench` would run: an open-loop rate (capped by `workload.max_concurrency`
as the load generator's semaphore caps it) or a closed loop of N clients; for session workloads
(conversation, agentic) a rate of sessions or N sessions in flight (sim/sessions.py). Requests are
spread over the replicas by the spec's routing policy (the first, when it lists several)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.layout import Layout
from orchestrator.loadgen.balance import Balance
from orchestrator.loadgen.bench import CLOSED_LOOP_SPECS, LoadPoint, PointResult
from orchestrator.loadgen.client import RequestSpec, arrival_offsets
from orchestrator.loadgen.columns import RequestColumns, columns_from_records
from orchestrator.loadgen.metrics import metrics_of
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.search import verdict
from orchestrator.loadgen.spec_workload import slo_bounds, workload_factory
from orchestrator.loadgen.window import point_warmup_s
from orchestrator.loadgen.workloads import Workload
from orchestrator.plan.inputs import PlanInputs
from orchestrator.sim.build import replica_engines
from orchestrator.sim.engine import EngineCore
from orchestrator.sim.loops import closed_loop, closed_loop_columns, simulate, simulate_columns
from orchestrator.sim.sessions import simulate_sessions
from orchestrator.sim.virtual import SimRequest, SimSummary
from orchestrator.spec.models import SweepSpec


@dataclass(frozen=True)
class SimPoint:
    layout: Layout
    result: PointResult
    summary: SimSummary
    note: str | None = None  # e.g. sessions cut at max_model_len


def _as_sim(wl: Workload, offsets: list[float]) -> list[SimRequest]:
    """The first len(offsets) requests, prompt tokens as the simulated server counts them (one per
    word of the text; a workload built without text gives its counts), with what each shares."""
    if wl.lengths is not None:
        ins, outs = wl.lengths
        return [SimRequest(f"req-{i}", t, ins[i], outs[i]) for i, t in enumerate(offsets)]
    return _spec_requests(wl.specs, offsets)


def _spec_requests(specs: Sequence[RequestSpec], offsets: list[float]) -> list[SimRequest]:
    """Request specs sent at `offsets`: prompt tokens as the simulated server counts them (one per word
    of the synthetic text)."""
    return [SimRequest(s.request_id, t, s.prompt_tokens or max(len(s.prompt.split()), 1), s.max_tokens,
                       s.content)
            for s, t in zip(specs, offsets, strict=False)]


def routing_of(spec: SweepSpec) -> Balance:
    """The policy one measurement routes by (a spec comparing several is split per policy first)."""
    return spec.routing_policies()[0]


def sim_requests(spec: SweepSpec, rate: float, num_requests: int | None = None,
                 max_model_len: int | None = None) -> list[SimRequest]:
    """The same requests `orch sweep` would send at `rate`, as the engine sees them."""
    w = spec.workload
    n = num_requests or w.num_requests
    duration = None if num_requests else w.duration_s
    offsets = arrival_offsets(n, rate, w.arrival, w.burstiness, w.seed, duration)
    return _as_sim(workload_factory(w, max_model_len, text=False)(len(offsets)), offsets)


def spec_engines(spec: SweepSpec, inputs: PlanInputs, layout: Layout) -> list[EngineCore]:
    """Every engine of the layout: replicas x DP ranks."""
    engines: list[EngineCore] = []
    replica = Layout(tp=layout.tp, pp=layout.pp, dp=layout.dp, ep=layout.ep)
    for _ in range(layout.replicas):
        engines += replica_engines(inputs, replica,
                                   reserve_whole_kv=spec.engine.sim_scheduler == "guaranteed-no-evict")
    return engines


def simulate_point(spec: SweepSpec, inputs: PlanInputs, layout: Layout, rate: float | None = None, *,
                   num_requests: int | None = None, concurrency: int | None = None,
                   sample_interval_s: float | None = None, keep_records: bool = True) -> SimPoint:
    """One load point: open loop at `rate` requests/s, or a closed loop of `concurrency` clients (a
    trace: at its own arrival times, whatever the rate).

    As `orch bench` runs them: `num_requests` replaces the spec's count and duration; a closed loop
    bounded only by a duration cycles through the same 1,000 requests (sessions: plans).
    keep_records=False computes the metrics of request workloads from the simulator's columns and
    keeps no record per request (`orch simulate`: 100,000 requests in megabytes); the metrics are the
    same. Sessions and traces keep their records."""
    w = spec.workload
    engines = spec_engines(spec, inputs, layout)
    factory = workload_factory(w, inputs.max_model_len, text=False)
    balance, dp = routing_of(spec), layout.dp
    n = num_requests or w.num_requests
    duration = None if num_requests else w.duration_s
    note = None
    cols: RequestColumns | None = None
    records: list[RequestRecord] = []
    if w.kind == "trace" and concurrency is None:  # at the trace's own arrival times (time_scale applied)
        wl = factory(n or 0)
        assert wl.offsets_s is not None
        note = wl.note
        records, summary = simulate(engines, _as_sim(wl, list(wl.offsets_s)),
                                    max_concurrency=w.max_concurrency, balance=balance, dp=dp,
                                    sample_interval_s=sample_interval_s)
        point = LoadPoint(trace=True)
    elif concurrency is not None:
        size = n or CLOSED_LOOP_SPECS
        wl = factory(size)
        if wl.sessions is not None:
            note = wl.sessions.note()
            ran = simulate_sessions(engines, wl.sessions.plans[:size], concurrency=concurrency,
                                    duration_s=duration, balance=balance, dp=dp,
                                    sample_interval_s=sample_interval_s)
            records, summary = ran.records, ran.summary
        else:
            count = min(size, len(wl.lengths[0]) if wl.lengths is not None else len(wl.specs))
            reqs = _as_sim(wl, [0.0] * count)
            if keep_records:
                records, summary = closed_loop(engines, reqs, concurrency, duration_s=duration,
                                               sample_interval_s=sample_interval_s, balance=balance, dp=dp)
            else:
                cols, summary = closed_loop_columns(engines, reqs, concurrency, duration_s=duration,
                                                    sample_interval_s=sample_interval_s, balance=balance,
                                                    dp=dp)
            if n is not None:
                records = records[:n]
                cols = cols.head(n) if cols is not None else None
        point = LoadPoint(concurrency=concurrency)
    elif rate is not None:
        offsets = arrival_offsets(n, rate, w.arrival, w.burstiness, w.seed, duration)
        wl = factory(len(offsets))
        if wl.sessions is not None:  # the rate is of sessions
            note = wl.sessions.note()
            plans = wl.sessions.plans[: len(offsets)]
            ran = simulate_sessions(engines, plans, starts=offsets[: len(plans)], balance=balance, dp=dp,
                                    duration_s=duration, sample_interval_s=sample_interval_s)
            records, summary = ran.records, ran.summary
        else:
            reqs = _as_sim(wl, offsets)
            if keep_records:
                records, summary = simulate(engines, reqs, max_concurrency=w.max_concurrency, balance=balance,
                                            dp=dp, sample_interval_s=sample_interval_s)
            else:
                cols, summary = simulate_columns(engines, reqs, max_concurrency=w.max_concurrency,
                                                 balance=balance, dp=dp, sample_interval_s=sample_interval_s)
        point = LoadPoint(rate=rate)
    else:
        raise ValueError("give a rate or a concurrency")
    slo = slo_bounds(spec.slo)
    measured = cols if cols is not None else columns_from_records(records)
    warmup = point_warmup_s(measured, w.warmup_s, concurrency)  # as the load generator measures
    metrics = metrics_of(measured, warmup_s=warmup, gpus=layout.gpus, slo=slo,
                         records=records if cols is None else None)
    why = verdict(metrics, slo, spec.slo.max_error_rate) if slo else None
    return SimPoint(layout, PointResult(point, metrics, tuple(records), why), summary, note)


def sim_requests_from_specs(specs: list[RequestSpec], offsets: list[float] | None = None) -> list[SimRequest]:
    """Request specs as the engine sees them, sent at `offsets` (all at 0 for a closed loop)."""
    return _spec_requests(specs, offsets if offsets is not None else [0.0] * len(specs))


def prefix_cache_of(sp: SimPoint) -> dict[str, Any]:
    """The simulator's prefix-cache counters of a point (vLLM's names), the routing it ran under, and
    what it cut; empty without prefix caching."""
    c = sp.summary.prefix_cache
    out: dict[str, Any] = {} if sp.note is None else {"note": sp.note}
    if c is None:
        return out
    return {**out, "prefix_cache": {
        "queries": c.queries, "hits": c.hits, "hit_rate": c.hit_rate,
        "preempted_queries": c.preempted_queries, "preempted_hits": c.preempted_hits,
        "evicted_blocks": c.evicted_blocks,
    }}
