"""Stored load points -> the selection's view of them (PointOutcome, LayoutOutcome)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from orchestrator.pipeline.context import RunStore
from orchestrator.selection import LayoutOutcome, PointOutcome
from orchestrator.store.extras import SideRecords

FINAL_STATUSES = ("rejected", "failed", "measured", "pruned")
_CONCURRENCY = re.compile(r"concurrency=(\d+)")  # loadgen.bench.LoadPoint.label of a closed loop


def point_outcome(
    label: str,
    rate: float | None,
    passed: bool | None,
    verdict: str | None,
    metrics: dict[str, Any],
    gpus: int,
) -> PointOutcome:
    per_gpu = metrics.get("per_gpu") or {}
    goodput = metrics.get("goodput")
    return PointOutcome(
        label=label,
        rate=rate,
        passed=bool(passed),
        verdict=verdict or "",
        goodput_per_gpu=(goodput or 0.0) / gpus
        if goodput is not None
        else per_gpu.get("request_throughput", 0.0),
        output_tokens_per_s_per_gpu=per_gpu.get("output_throughput", 0.0),
        ttft_p99_ms=(metrics.get("ttft_ms") or {}).get("p99"),
        itl_p99_ms=(metrics.get("itl_chunk_ms") or {}).get("p99"),
        intervals=metrics.get("intervals"),
        slo_margin=metrics.get("slo_margin"),
        concurrency=int(m.group(1)) if (m := _CONCURRENCY.fullmatch(label)) else None,
    )


def outcomes_from_store(
    store: RunStore, run_id: str, layouts: Sequence[str] | None = None
) -> list[LayoutOutcome]:
    rows = store.layouts(run_id)
    if layouts is not None:
        order = {name: i for i, name in enumerate(layouts)}
        rows = sorted((r for r in rows if r.layout in order), key=lambda r: order[r.layout])
    searched = set(SideRecords(store, run_id).capacities())
    out = []
    for r in rows:
        points = tuple(
            point_outcome(p.label, p.rate, p.passed, p.verdict, p.metrics, r.gpus)
            for p in store.points(run_id, r.layout)
        )
        status = r.status if r.status in FINAL_STATUSES else "failed"
        reason = r.reason if r.status != "pending" else "interrupted before it finished"
        out.append(
            LayoutOutcome(r.layout, r.gpus, status, reason, points, r.layout in searched)  # type: ignore[arg-type]
        )
    return out
