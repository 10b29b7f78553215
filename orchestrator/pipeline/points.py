"""A candidate's load points, as plain functions of the sweep's context: its plan row, the point
function that measures one load point (in virtual time, or against a served deployment), and the one
loop over load points (the spec's rate grid, or the capacity search of pipeline/capacity.py) that
stores every point as it is measured. The same loop runs a lone candidate and each candidate of a
side-by-side wave; only the point function differs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from orchestrator.candidate import AnyCandidate, Candidate, DisaggCandidate
from orchestrator.layout import Layout
from orchestrator.loadgen.bench import LoadPoint, PointResult
from orchestrator.loadgen.delivery import Delivery, check_delivery, delivered_label, undelivered
from orchestrator.loadgen.engine_metrics import metrics_url, series_to_dict, summarize_pools, summarize_series
from orchestrator.loadgen.intervals import point_intervals, slo_margin
from orchestrator.loadgen.metrics import finite
from orchestrator.loadgen.spec_decode_metrics import acceptance_record, scrape_counters
from orchestrator.loadgen.spec_workload import CallShape, call_shape, slo_bounds
from orchestrator.loadgen.window import point_warmup_s
from orchestrator.pipeline.capacity import (
    GROWTH_FROM_PLANNER,
    GROWTH_FROM_SIMULATOR,
    Probe,
    load_axis,
    load_grid,
    load_point,
    search_capacity,
)
from orchestrator.pipeline.context import SweepContext
from orchestrator.pipeline.outcomes import point_outcome
from orchestrator.pipeline.predict import (
    planned_capacity_concurrency,
    planned_capacity_rate,
    predicted_metrics,
    transfer_stats,
    virtual_point,
)
from orchestrator.pipeline.repeats import measure_point, reseeded
from orchestrator.pipeline.serving import Served
from orchestrator.plan.disagg import DisaggRow, plan_pair
from orchestrator.plan.inputs import PlanInputs
from orchestrator.plan.planner import PlanRow, plan_layout
from orchestrator.plan.run import itl_bound_ms
from orchestrator.selection import LayoutOutcome
from orchestrator.sim.pd_run import DisaggSimPoint
from orchestrator.sim.run import SimPoint, prefix_cache_of
from orchestrator.verdict import Verdict

AnyRow = PlanRow | DisaggRow


@dataclass(frozen=True)
class Measured:
    """One measurement of a load point: the result, what is stored beside it, and the engines' gauges
    over it (stored after the point: the point comes first)."""

    result: PointResult
    extra: dict[str, Any]
    series: dict[str, Any] = field(default_factory=dict)


#: (load, try number k: measured with workload seed + k) -> the measurement
PointFn = Callable[[float, int], Measured]


class Bench(Protocol):
    """Runs one load point against served endpoints (in this process, or in a load generator process
    of its own side by side): the result and the scraped engine series."""

    def point(
        self, point: LoadPoint, num_requests: int | None, k: int
    ) -> tuple[PointResult, dict[str, Any]]: ...


def plan_row(ctx: SweepContext, candidate: AnyCandidate) -> AnyRow:
    """The candidate's row of `orch plan`, priced on the workload's mean call (`call_tokens`: a
    session's call prefills its uncached history and holds all of it) (a pair: both pools, the
    transfer, which pool binds)."""
    shape = call_tokens(ctx, candidate)
    prompt, output = round(shape.uncached_tokens), round(shape.output_tokens)
    if isinstance(candidate, DisaggCandidate):
        return plan_pair(ctx.inputs, candidate, prompt_tokens=prompt, output_tokens=output,
                         itl_bound_ms=itl_bound_ms(ctx.spec))
    return plan_layout(
        ctx.inputs.with_settings(candidate.settings), candidate.layout, prompt_tokens=prompt,
        context_tokens=round(shape.prompt_tokens) + output // 2, itl_bound_ms=itl_bound_ms(ctx.spec),
        output_tokens=output,  # charge the prefill, as `orch plan` does
    )


def call_tokens(ctx: SweepContext, candidate: AnyCandidate) -> CallShape:
    """The workload's mean call on this candidate's engines: how likely a session's call finds its
    history where its earlier calls went (prefix-aware routing keeps a session on its replica; other
    policies, and a replica's DP ranks, spread it), with the engines' block size and caching."""
    if isinstance(candidate, DisaggCandidate):  # the prefill pool computes (and caches) the prompts
        layout, settings = candidate.prefill.layout, candidate.prefill.settings
        affine = False  # the pair's router balances by load
    else:
        layout, settings = candidate.layout, candidate.settings
        affine = ctx.spec.routing_policies()[0] == "prefix_aware"
    spread = layout.dp if affine else layout.replicas * layout.dp
    return call_shape(ctx.spec.workload, same_engine=1 / max(spread, 1), block_size=settings.block_size,
                      prefix_caching=settings.enable_prefix_caching, max_model_len=settings.max_model_len)


def sim_target(ctx: SweepContext, candidate: AnyCandidate) -> tuple[PlanInputs, Layout | DisaggCandidate]:
    """What the simulator runs for a candidate: (inputs with its settings, its layout), or a pair
    itself (each pool takes its own settings from it)."""
    if isinstance(candidate, DisaggCandidate):
        return ctx.inputs, candidate
    return ctx.inputs.with_settings(candidate.settings), candidate.layout


def engine_summary(series: dict[str, Any]) -> dict[str, Any]:
    """The engines' gauges over a point: all engines, and per pool when they have roles."""
    pools = summarize_pools(series)
    return {**summarize_series(series), **({"pools": pools} if pools else {})}


def virtual_point_fn(ctx: SweepContext, candidate: AnyCandidate) -> PointFn:
    """The candidate's point function in virtual time: the simulated engine, deterministic for a seed,
    with its own gauges sampled as a served run scrapes /metrics (per pool for a pair, with its KV
    transfers)."""
    interval_s = ctx.opts.engine_metrics_interval_s
    inputs, what = sim_target(ctx, candidate)

    def run(load: float, k: int) -> Measured:
        point = load_point(ctx.spec.workload, load)
        sp = virtual_point(reseeded(ctx.spec, k), inputs, what, point.rate,
                           ctx.opts.num_requests, point.concurrency, sample_interval_s=interval_s)
        s = sp.summary
        sim: dict[str, Any] = {"steps": s.steps, "preemptions": s.preemptions, "rejected": s.rejected,
                               "virtual_s": s.virtual_s,
                               **(prefix_cache_of(sp) if isinstance(sp, SimPoint) else {})}
        roles: list[str] = []
        extra: dict[str, Any] = {"measured_in": "virtual time", "sim": sim}
        if isinstance(sp, DisaggSimPoint) and isinstance(candidate, DisaggCandidate):
            extra["kv_transfer"] = {**transfer_stats(sp), "source": "simulated"}
            roles = [pool.role for pool in candidate.pools
                     for _ in range(pool.layout.replicas * pool.layout.dp)]
        series = series_to_dict(list(s.engine_samples), interval_s, roles=roles)
        extra["engine"] = engine_summary(series)
        if isinstance(candidate, Candidate) and candidate.settings.speculative is not None:
            # the simulator runs the assumed acceptance
            extra["speculative"] = acceptance_record(candidate.settings.speculative, None, None)
        return Measured(sp.result, extra, series)

    return run


def served_point_fn(ctx: SweepContext, candidate: AnyCandidate, served: Served, bench: Bench,
                    beside: Mapping[str, Any] | None = None) -> PointFn:
    """The candidate's point function on a served deployment: the load point through `bench`, the
    engines checked alive after it, and the simulator's prediction of the same point stored beside it
    (`beside`: more to store, e.g. which layouts ran alongside)."""

    inputs, what = sim_target(ctx, candidate)

    speculative = candidate.settings.speculative if isinstance(candidate, Candidate) else None
    # only speculation reads the engines' counters around a point
    urls = [metrics_url(c.base_url) for c in served.clients] if speculative is not None else []

    def run(load: float, k: int) -> Measured:
        point, n = load_point(ctx.spec.workload, load), ctx.opts.num_requests
        # The engines' acceptance counters around the point (loadgen/spec_decode_metrics.py).
        before = asyncio.run(scrape_counters(urls)) if speculative is not None else None
        result, series = bench.point(point, n, k)
        served.check_alive()
        # A point is a measurement at its load only if the client sent it (loadgen/delivery.py).
        delivered = check_delivery(result.metrics, point.rate)
        if not delivered.delivered and result.judgement.judged:
            result = replace(result, verdict=delivered.short_because)
        engines = engine_summary(series)
        extra = {
            "predicted": predicted_metrics(reseeded(ctx.spec, k), inputs, what, point.rate, n,
                                           point.concurrency),
            "engine": engines,
            "delivery": delivered.to_dict(),
            **(beside or {}),
        }
        if speculative is not None:
            extra["speculative"] = acceptance_record(speculative, before, asyncio.run(scrape_counters(urls)))
        if isinstance(candidate, DisaggCandidate) and engines.get("kv_transfers"):
            # what the pool servers counted (the decode side times each read of KV it pulls)
            extra["kv_transfer"] = {"transfers": engines["kv_transfers"],
                                    "transfer_ms_mean": engines.get("kv_transfer_ms_mean"),
                                    "source": "engine metrics"}
        return Measured(result, extra, series)

    return run


def judge(ctx: SweepContext, result: PointResult, gpus: int) -> dict[str, Any]:
    """The point's intervals and how surely its SLO verdict holds (loadgen/intervals.py)."""
    slo = slo_bounds(ctx.spec.slo)
    warmup_s = point_warmup_s(result.records, ctx.spec.workload.warmup_s, result.point.concurrency)
    iv = point_intervals(result.records, warmup_s=warmup_s, gpus=gpus, slo=slo, seed=ctx.spec.workload.seed)
    return {"intervals": finite(iv), "slo_margin": slo_margin(iv, slo) if slo else None}


def probe_of(result: PointResult, load: float) -> Probe:
    v = result.judgement
    return Probe(load, v.passed, v.text, judged=v.judged)


def measure_candidate(ctx: SweepContext, candidate: AnyCandidate, row: AnyRow, point_fn: PointFn) -> float:
    """Measure and store the candidate's load points (the grid, or the capacity search with its
    stored points reused); returns the seconds spent in load points."""
    name, spec, gpus = candidate.name, ctx.spec, candidate.gpus
    stored = {p.label: p for p in ctx.store.points(ctx.run_id, name)}
    # A point the client did not deliver is stored under what it received (loadgen/delivery.py); a
    # resumed search finds it by its asked rate, and steps around it as it did the first time.
    short = {p.rate: p for p in stored.values() if p.rate is not None and undelivered(p.label)}
    by = load_axis(spec.workload)
    spent = [0.0]

    def probe(load: float) -> Probe:
        label = load_point(spec.workload, load).label
        prior = stored.get(label) or (short.get(load) if by == "rate" else None)
        if prior is not None:
            v = Verdict.of(prior.passed, prior.verdict)
            return Probe(load, v.passed, v.text, judged=v.judged,
                         sure=prior.metrics.get("slo_margin") != "close")
        ctx.obs.phase(name, f"bench {label}")
        t0 = time.monotonic()
        series: list[dict[str, Any]] = [{}]

        def attempt(k: int) -> tuple[PointResult, dict[str, Any]]:
            m = point_fn(load, k)
            series[0] = m.series
            return m.result, m.extra

        # measured again when unjudged, repeated when close to the SLO (pipeline/repeats.py)
        result, extra, judged = measure_point(
            attempt, lambda r: judge(ctx, r, gpus), spec, gpus,
            lambda what: ctx.obs.phase(name, f"bench {label} {what}"),
        )
        elapsed = time.monotonic() - t0
        ctx.tally.point_s.append(elapsed)
        spent[0] += elapsed
        metrics = {**finite(result.metrics.to_dict()), **finite(extra), **judged}
        if result.note:  # what the workload left out (sessions cut at max_model_len ...)
            metrics["note"] = result.note
        rate = load_point(spec.workload, load).rate
        if (shortfall := extra.get("delivery")) is not None:
            label = delivered_label(label, Delivery.from_dict(shortfall))  # never the target's label
        # The point first: if the store fails, the journal has the measurement itself.
        ctx.store.add_point(ctx.run_id, name, label, rate, result.passed, result.verdict, metrics,
                            result.records)
        if series[0]:
            ctx.store.add_engine_metrics(ctx.run_id, name, label, series[0])
        ctx.save_progress()
        ctx.obs.point_done(name, result)
        p = probe_of(result, load)
        return Probe(p.load, p.passed, p.verdict, p.judged, sure=judged.get("slo_margin") != "close")

    grid = load_grid(spec.workload, ctx.opts.rates)
    if grid:
        for load in grid:
            probe(load)
        return spent[0]
    seed, source, growth = search_seed(ctx, candidate, row)
    cap = search_capacity(name, probe, spec.workload.search, seed, source, growth, by)
    ctx.records.set_capacity(name, cap.to_dict())
    return spent[0]


def predict_outcome(ctx: SweepContext, candidate: AnyCandidate, row: AnyRow) -> LayoutOutcome:
    """The candidate's load points (grid or capacity search) through the simulator, not stored; its
    predicted capacity is kept for the served search to start from."""
    name, run = candidate.name, virtual_point_fn(ctx, candidate)
    results: dict[float, PointResult] = {}
    by = load_axis(ctx.spec.workload)

    def probe(load: float) -> Probe:
        results[load] = run(load, 0).result
        return probe_of(results[load], load)

    grid = load_grid(ctx.spec.workload, ctx.opts.rates)
    if grid:
        for load in grid:
            probe(load)
    else:
        seed, source, growth = planner_seed(ctx, candidate, row)
        cap = search_capacity(name, probe, ctx.spec.workload.search, seed, source, growth, by)
        ctx.tally.predicted_capacity[name] = cap.capacity
    gpus = candidate.gpus
    points = tuple(
        point_outcome(r.point.label, r.point.rate, r.passed, r.verdict, finite(r.metrics.to_dict()), gpus)
        for r in results.values()
    )
    return LayoutOutcome(name, gpus, "measured", None, points, searched=not grid)


def search_seed(ctx: SweepContext, candidate: AnyCandidate, row: AnyRow) -> tuple[float, str, float]:
    """Where a capacity search starts: served runs from the simulator's own capacity search (seconds
    in virtual time, so the real engine spends its minutes near the answer), virtual runs from the
    planner's estimate."""
    if not ctx.served:
        return planner_seed(ctx, candidate, row)
    if candidate.name not in ctx.tally.predicted_capacity:
        predict_outcome(ctx, candidate, row)
    cap = ctx.tally.predicted_capacity.get(candidate.name)
    if cap is None:
        return planner_seed(ctx, candidate, row)
    return cap, "simulator (virtual-time capacity search)", GROWTH_FROM_SIMULATOR


def planner_seed(ctx: SweepContext, candidate: AnyCandidate, row: AnyRow) -> tuple[float, str, float]:
    w = ctx.spec.workload
    # the engines that hold sequences while they decode: a pair's decode pool
    layout = candidate.decode.layout if isinstance(candidate, DisaggCandidate) else candidate.layout
    search = w.search
    if load_axis(w) == "concurrency":
        conc = planned_capacity_concurrency(row, layout.replicas * layout.dp)
        if conc is None:
            return search.min_concurrency * 8, "search bounds", GROWTH_FROM_PLANNER
        return conc, "planner (best batch within the ITL bound, all engines)", GROWTH_FROM_PLANNER
    shape = call_tokens(ctx, candidate)  # a session workload's rate counts sessions
    calls, planned = shape.calls, planned_capacity_rate(row, round(shape.output_tokens))
    if planned is None:
        return search.min_rate_per_s * 10, "search bounds", GROWTH_FROM_PLANNER
    why = "planner (throughput within the ITL bound, prefill charged)"
    return planned / calls, why, GROWTH_FROM_PLANNER


__all__ = [
    "AnyRow", "Bench", "Measured", "PointFn", "call_tokens", "measure_candidate", "plan_row", "planner_seed",
    "predict_outcome",
    "search_seed", "served_point_fn", "virtual_point_fn",
]
