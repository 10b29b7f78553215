"""The sweep's load-point function in virtual time (the default for `engine: sim` on the local
target): one load point of a layout through the simulated engine, with the simulator's own gauges
stored beside it as a served run stores its scraped /metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.layout import Layout
from orchestrator.loadgen.bench import PointResult
from orchestrator.loadgen.engine_metrics import series_to_dict, summarize_series
from orchestrator.pipeline.capacity import load_point
from orchestrator.pipeline.predict import prefix_cache_of, virtual_point
from orchestrator.pipeline.repeats import reseeded
from orchestrator.plan.planner import PlanInputs
from orchestrator.spec.models import SweepSpec

#: (load, try number k: measured with workload seed + k) -> the point and what to store beside it
PointFn = Callable[[float, int], tuple[PointResult, dict[str, Any]]]


def virtual_point_fn(
    spec: SweepSpec,
    inputs: PlanInputs,
    layout: Layout,
    num_requests: int | None,
    interval_s: float,
    keep_series: Callable[[dict[str, Any]], None],
) -> PointFn:
    """The layout's PointFn in virtual time; `keep_series` receives each point's engine series (the
    sweep stores it after the point, as it does a served run's scrape)."""

    def run(load: float, k: int) -> tuple[PointResult, dict[str, Any]]:
        point = load_point(spec.workload, load)
        sp = virtual_point(
            reseeded(spec, k), inputs, layout, point.rate, num_requests, point.concurrency,
            sample_interval_s=interval_s,
        )
        s = sp.summary
        sim = {"steps": s.steps, "preemptions": s.preemptions, "rejected": s.rejected,
               "virtual_s": s.virtual_s, **prefix_cache_of(sp)}
        series = series_to_dict(list(s.engine_samples), interval_s)
        keep_series(series)
        return sp.result, {"measured_in": "virtual time", "sim": sim, "engine": summarize_series(series)}

    return run
