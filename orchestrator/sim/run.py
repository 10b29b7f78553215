"""`orch simulate` without the printing: a spec's workload through simulated replicas in virtual time."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.layout import Layout
from orchestrator.loadgen.bench import LoadPoint, PointResult
from orchestrator.loadgen.client import arrival_offsets
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.loadgen.search import verdict
from orchestrator.loadgen.spec_workload import slo_bounds, workload_factory
from orchestrator.plan.planner import PlanInputs
from orchestrator.sim.build import replica_engines
from orchestrator.sim.virtual import SimRequest, SimSummary, simulate
from orchestrator.spec.models import SweepSpec


@dataclass(frozen=True)
class SimPoint:
    layout: Layout
    result: PointResult
    summary: SimSummary


def sim_requests(spec: SweepSpec, rate: float, num_requests: int | None = None) -> list[SimRequest]:
    """The same requests `orch sweep` would send at `rate`, as the engine sees them. Prompt tokens are
    counted as the simulated server counts them (one per word of the synthetic text)."""
    w = spec.workload
    n = num_requests or w.num_requests
    duration = None if num_requests else w.duration_s
    offsets = arrival_offsets(n, rate, w.arrival, w.burstiness, w.seed, duration)
    specs = workload_factory(w)(len(offsets)).specs[: len(offsets)]
    return [SimRequest(s.request_id, t, s.prompt_tokens or max(len(s.prompt.split()), 1), s.max_tokens)
            for s, t in zip(specs, offsets, strict=False)]


def simulate_point(spec: SweepSpec, inputs: PlanInputs, layout: Layout, rate: float, *,
                   num_requests: int | None = None) -> SimPoint:
    engines = []
    replica = Layout(tp=layout.tp, pp=layout.pp, dp=layout.dp, ep=layout.ep)
    for _ in range(layout.replicas):
        engines += replica_engines(inputs, replica, max_num_seqs=spec.engine.max_num_seqs,
                                   max_num_batched_tokens=spec.engine.max_num_batched_tokens)
    records, summary = simulate(engines, sim_requests(spec, rate, num_requests))
    slo = slo_bounds(spec.slo)
    metrics = compute_metrics(records, warmup_s=spec.workload.warmup_s, gpus=layout.gpus, slo=slo)
    why = verdict(metrics, slo, spec.slo.max_error_rate) if slo else None
    return SimPoint(layout, PointResult(LoadPoint(rate=rate), metrics, tuple(records), why), summary)
