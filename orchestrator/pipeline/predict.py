"""The prediction stored beside each measured load point: the same requests through the simulated
engine in virtual time (orch simulate), so a report can show predicted, measured and the error."""

from __future__ import annotations

from typing import Any

from orchestrator.errors import OrchError
from orchestrator.layout import Layout
from orchestrator.plan.planner import PlanInputs
from orchestrator.sim.run import simulate_point
from orchestrator.spec.models import SweepSpec


def predicted_metrics(spec: SweepSpec, inputs: PlanInputs, layout: Layout, rate: float | None,
                      num_requests: int | None, concurrency: int | None = None) -> dict[str, Any]:
    """The simulator on the measured point's own load: its rate under `workload.max_concurrency`
    (the cap the load generator applied), or its closed-loop concurrency."""
    try:
        sp = simulate_point(spec, inputs, layout, rate, num_requests=num_requests, concurrency=concurrency)
    except OrchError as exc:  # e.g. the layout does not fit the model's memory: nothing to predict
        return {"source": "orch simulate (virtual time)", "error": str(exc)}
    m = sp.result.metrics
    return {
        "source": "orch simulate (virtual time)",
        "load": sp.result.point.label,
        "max_concurrency": None if concurrency else spec.workload.max_concurrency,
        "ttft_p50_ms": m.ttft_ms.p50, "ttft_p99_ms": m.ttft_ms.p99,
        "itl_p99_ms": m.itl_chunk_ms.p99, "tpot_p50_ms": m.tpot_ms.p50,
        "output_tokens_per_s_per_gpu": (m.per_gpu or {}).get("output_throughput"),
        "goodput": m.goodput, "passed": sp.result.passed,
    }
