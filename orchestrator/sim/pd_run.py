"""`orch simulate` for a prefill/decode candidate: the spec's workload through both pools in virtual time.

The same load point as an aggregated layout (sim/run.py): an open-loop rate capped by the workload's
max_concurrency, or a closed loop of N clients; the same requests, the same metric code. Per GPU means
per GPU of both pools."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.candidate import DisaggCandidate
from orchestrator.disagg import DisaggLayout, one_node
from orchestrator.errors import SpecError
from orchestrator.loadgen.bench import CLOSED_LOOP_SPECS, LoadPoint, PointResult
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.loadgen.search import verdict
from orchestrator.loadgen.spec_workload import slo_bounds, workload_factory
from orchestrator.loadgen.window import point_warmup_s
from orchestrator.plan.disagg import inputs_of, shape_of
from orchestrator.plan.inputs import PlanInputs
from orchestrator.plan.kv_transfer import transfer_link, transfer_time_fn
from orchestrator.sim.pd_engines import DecodeCore, PrefillCore, pool_engines
from orchestrator.sim.pd_virtual import DisaggSummary, closed_loop_disagg, simulate_disagg
from orchestrator.sim.run import sim_requests, sim_requests_from_specs
from orchestrator.spec.models import SweepSpec


@dataclass(frozen=True)
class DisaggSimPoint:
    layout: DisaggLayout
    result: PointResult
    summary: DisaggSummary


def pd_engines(inputs: PlanInputs, cand: DisaggCandidate,
               ) -> tuple[list[PrefillCore], list[DecodeCore], Callable[[int], float]]:
    """Both pools' engines (replicas x DP ranks each, with each pool's own settings and redundant
    experts) and the KV transfer time per prompt length."""
    pd = cand.layout
    p_in, d_in = inputs_of(inputs, cand.prefill), inputs_of(inputs, cand.decode)
    prefill = [e for e in pool_engines(p_in, shape_of(pd.prefill), "prefill", pd.prefill.replicas)
               if isinstance(e, PrefillCore)]
    decode = [e for e in pool_engines(d_in, shape_of(pd.decode), "decode", pd.decode.replicas)
              if isinstance(e, DecodeCore)]
    link = transfer_link(inputs.gpu.intra_node, inputs.gpu.inter_node,
                         same_node=one_node(pd, inputs.cluster.gpus_per_node))
    seconds = transfer_time_fn(inputs.cfg, inputs.kv_bytes_per_value, shape_of(pd.prefill),
                               shape_of(pd.decode), link)
    return prefill, decode, seconds


def simulate_pair_point(spec: SweepSpec, inputs: PlanInputs, cand: DisaggCandidate,
                        rate: float | None = None, *, num_requests: int | None = None,
                        concurrency: int | None = None,
                        sample_interval_s: float | None = None) -> DisaggSimPoint:
    """One load point of a disaggregated candidate: open loop at `rate` requests/s or a closed loop
    of `concurrency` clients, its router picking engines by the candidate's policy."""
    w, pd, policy = spec.workload, cand.layout, cand.router_policy
    if w.kind in ("conversation", "agentic", "trace"):
        # the pair's virtual time runs independent requests at a rate or concurrency; sessions (turns that
        # wait for answers, prefix reuse across turns) and trace timestamps are modelled for aggregated
        # layouts only (sim/sessions.py): refuse rather than price a different workload
        raise SpecError(f"layout {pd}: workload.kind {w.kind} is not simulated for prefill/decode pairs; "
                        "measure the pair served (orch sweep --served) or use kind random, sharegpt or "
                        "prefix")
    prefill, decode, seconds = pd_engines(inputs, cand)
    front = inputs.gpu.request_overhead_s
    if concurrency is not None:
        n = num_requests or w.num_requests
        duration = None if num_requests else w.duration_s
        specs = list(workload_factory(w)(n or CLOSED_LOOP_SPECS).specs[: n or CLOSED_LOOP_SPECS])
        records, summary = closed_loop_disagg(prefill, decode, sim_requests_from_specs(specs), seconds,
                                              concurrency, duration_s=duration, policy=policy, front_s=front,
                                              sample_interval_s=sample_interval_s)
        if n is not None:
            records = records[:n]
        point = LoadPoint(concurrency=concurrency)
    elif rate is not None:
        records, summary = simulate_disagg(prefill, decode, sim_requests(spec, rate, num_requests), seconds,
                                           policy=policy, max_concurrency=w.max_concurrency, front_s=front,
                                           sample_interval_s=sample_interval_s)
        point = LoadPoint(rate=rate)
    else:
        raise ValueError("give a rate or a concurrency")
    slo = slo_bounds(spec.slo)
    warmup = point_warmup_s(records, w.warmup_s, concurrency)  # one rule with aggregated points
    metrics = compute_metrics(records, warmup_s=warmup, gpus=cand.gpus, slo=slo)
    why = verdict(metrics, slo, spec.slo.max_error_rate) if slo else None
    return DisaggSimPoint(pd, PointResult(point, metrics, tuple(records), why), summary)
