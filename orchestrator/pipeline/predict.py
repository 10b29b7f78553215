"""Every call the sweep makes into the simulator, in one place: the virtual-time measurement of a
load point (the default for `engine: sim`), the prediction stored beside each served measurement
(the same requests through the simulated engine, so a report shows predicted, measured and the
error), and the planner's capacity guess that seeds a layout's capacity search."""

from __future__ import annotations

from typing import Any

from orchestrator.errors import OrchError
from orchestrator.layout import Layout
from orchestrator.plan.planner import PlanInputs, PlanRow
from orchestrator.sim.run import SimPoint, simulate_point
from orchestrator.spec.models import SweepSpec

SOURCE = "orch simulate (virtual time)"


def virtual_point(spec: SweepSpec, inputs: PlanInputs, layout: Layout, rate: float | None,
                  num_requests: int | None, concurrency: int | None = None,
                  sample_interval_s: float | None = None) -> SimPoint:
    """The load point through the simulated engine in virtual time: deterministic for a seed. An
    open loop at `rate` (under `workload.max_concurrency`, as the load generator caps it) or a closed
    loop of `concurrency` clients."""
    return simulate_point(spec, inputs, layout, rate, num_requests=num_requests, concurrency=concurrency,
                          sample_interval_s=sample_interval_s)


def prediction_of(sp: SimPoint, spec: SweepSpec, concurrency: int | None = None) -> dict[str, Any]:
    m = sp.result.metrics
    return {
        "source": SOURCE,
        "load": sp.result.point.label,
        "max_concurrency": None if concurrency else spec.workload.max_concurrency,
        "ttft_p50_ms": m.ttft_ms.p50, "ttft_p99_ms": m.ttft_ms.p99,
        "itl_p99_ms": m.itl_chunk_ms.p99, "tpot_p50_ms": m.tpot_ms.p50,
        "output_tokens_per_s_per_gpu": (m.per_gpu or {}).get("output_throughput"),
        "goodput": m.goodput, "passed": sp.result.passed,
    }


def predicted_metrics(spec: SweepSpec, inputs: PlanInputs, layout: Layout, rate: float | None,
                      num_requests: int | None, concurrency: int | None = None) -> dict[str, Any]:
    """The simulator on the measured point's own load: its rate under `workload.max_concurrency`
    (the cap the load generator applied), or its closed-loop concurrency."""
    try:
        sp = virtual_point(spec, inputs, layout, rate, num_requests, concurrency)
    except OrchError as exc:  # e.g. the layout does not fit the model's memory: nothing to predict
        return {"source": SOURCE, "error": str(exc)}
    return prediction_of(sp, spec, concurrency)


#: The planner's decode-only capacity overestimates what meets the SLO: it ignores prefill chunks
#: sharing steps and queueing. Against the simulator's searched capacity on the example specs it was
#: 4-18x too high (qwen72b tp8 54 vs 8.9 req/s, llama70b-h200 tp4x2 89 vs 15), median about 6x, so
#: the search starts at a sixth of it: an overloaded point costs the most (queues grow with the rate),
#: and bracketing upward from below is cheaper than halving down from far above.
PLANNER_OVERESTIMATE = 6.0


def planned_capacity_rate(row: PlanRow, mean_output_tokens: int) -> float | None:
    """Requests/s the cost model sustains within the ITL bound: the best batch's output tokens/s
    over the whole layout divided by the mean answer length, over PLANNER_OVERESTIMATE. A seed for
    the search, not a verdict."""
    best = row.best
    if best is None or mean_output_tokens <= 0:
        return None
    tokens_per_s = best.output_tokens_per_s_per_gpu * row.gpus
    return tokens_per_s / mean_output_tokens / PLANNER_OVERESTIMATE if tokens_per_s > 0 else None
