"""What a finished sweep derives from its stored points and keeps beside them (store run_extras):
"objectives" (per layout: throughput per GPU and cost at its capacity and at the interactivity
target) and "pareto" (the frontier over every point of every layout). Both are recomputed from the
points, so `orch report` on an old run can derive them again."""

from __future__ import annotations

from typing import Any

from orchestrator.objectives import MeasuredPoint, layout_objectives, pareto
from orchestrator.pipeline.context import RunStore
from orchestrator.selection import Selection
from orchestrator.spec.models import SweepSpec
from orchestrator.store.extras import SideRecords


def derive(store: RunStore, run_id: str, spec: SweepSpec, selection: Selection) -> dict[str, Any]:
    gpus = {r.layout: r.gpus for r in store.layouts(run_id)}
    points = [
        MeasuredPoint(p.layout, p.label, p.rate, bool(p.passed), gpus.get(p.layout, 1), p.metrics)
        for p in store.points(run_id)
    ]
    best = {v.layout: v.best_point for v in selection.verdicts}
    max_err = spec.slo.max_error_rate
    objectives = {
        layout: layout_objectives(
            [p for p in points if p.layout == layout],
            best.get(layout),
            interactivity_target=spec.interactivity_tokens_per_s_per_user,
            cost_per_gpu_hour=spec.cost_per_gpu_hour,
            currency=spec.currency,
            max_error_rate=max_err,
        )
        for layout in gpus
        if any(p.layout == layout for p in points)
    }
    front = pareto(points, max_err)
    SideRecords(store, run_id).set_derived(objectives, front)
    return {"objectives": objectives, "pareto": front}
