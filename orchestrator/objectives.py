"""Objectives people compare layouts by, beside goodput per GPU, and the Pareto frontier.

Definitions (each once):
- interactivity, output tokens/s per user = 1000 / TPOT p50 ms: the speed one stream is written at.
- throughput per GPU = output tokens/s per GPU over the measurement window.
- throughput per GPU at an interactivity target: the highest throughput per GPU among a layout's
  load points that meet the SLO and whose interactivity meets the target (a point past the SLO is
  not a way to serve, however fast its streams; where only such points reach the target, the
  verdict says so and names the best of them).
- cost per million output tokens = cost_per_gpu_hour / (throughput per GPU * 3600) * 1e6, at the
  layout's SLO capacity point (the point the selection scored).
- Pareto frontier: over every measured point of every layout (failed SLO or not, errors within the
  bound), the points no other point beats on both throughput per GPU and interactivity, as
  vLLM's `bench sweep plot_pareto` and InferenceMAX draw it (x: tokens/s/user, y: tokens/s/GPU).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

INTERACTIVITY = "output tokens/s per user = 1000 / TPOT p50 ms"


@dataclass(frozen=True)
class MeasuredPoint:
    layout: str
    label: str
    rate: float | None
    passed: bool
    gpus: int
    metrics: Mapping[str, Any]


def tokens_per_s_per_user(metrics: Mapping[str, Any]) -> float | None:
    tpot = (metrics.get("tpot_ms") or {}).get("p50")
    return 1000.0 / tpot if isinstance(tpot, int | float) and tpot > 0 else None


def tokens_per_s_per_gpu(metrics: Mapping[str, Any]) -> float | None:
    v = (metrics.get("per_gpu") or {}).get("output_throughput")
    return float(v) if isinstance(v, int | float) else None


def cost_per_million_tokens(cost_per_gpu_hour: float, per_gpu_tokens_per_s: float | None) -> float | None:
    if not per_gpu_tokens_per_s or per_gpu_tokens_per_s <= 0:
        return None
    return cost_per_gpu_hour / (per_gpu_tokens_per_s * 3600.0) * 1e6


def _usable(p: MeasuredPoint, max_error_rate: float) -> bool:
    return float(p.metrics.get("error_rate") or 0.0) <= max_error_rate


def pareto(points: Sequence[MeasuredPoint], max_error_rate: float = 0.01) -> dict[str, Any]:
    """Every usable point with its coordinates and whether it is on the frontier; the frontier in
    order of interactivity."""
    xy: list[tuple[float, float, MeasuredPoint]] = []
    for p in points:
        x, y = tokens_per_s_per_user(p.metrics), tokens_per_s_per_gpu(p.metrics)
        if x is not None and y is not None and _usable(p, max_error_rate):
            xy.append((x, y, p))

    def beaten(x: float, y: float) -> bool:
        return any(ox >= x and oy >= y and (ox > x or oy > y) for ox, oy, _ in xy)

    rows: list[dict[str, Any]] = [
        {"layout": p.layout, "label": p.label, "rate": p.rate, "passed": p.passed,
         "tokens_per_s_per_user": x, "tokens_per_s_per_gpu": y, "on_frontier": not beaten(x, y)}
        for x, y, p in xy
    ]
    frontier = sorted((r for r in rows if r["on_frontier"]), key=lambda r: float(r["tokens_per_s_per_user"]))
    return {
        "x": "tokens_per_s_per_user", "y": "tokens_per_s_per_gpu", "x_definition": INTERACTIVITY,
        "y_definition": "output tokens/s per GPU", "points": rows,
        "frontier": [{k: r[k] for k in ("layout", "label", "tokens_per_s_per_user", "tokens_per_s_per_gpu")}
                     for r in frontier],
    }


def layout_objectives(
    points: Sequence[MeasuredPoint],
    capacity_label: str | None,
    *,
    interactivity_target: float | None,
    cost_per_gpu_hour: float | None,
    currency: str | None,
    max_error_rate: float = 0.01,
) -> dict[str, Any]:
    """One layout's objectives: at its capacity point, and at the interactivity target."""
    out: dict[str, Any] = {}
    cap = next((p for p in points if p.label == capacity_label), None)
    if cap is not None:
        y = tokens_per_s_per_gpu(cap.metrics)
        out["at_capacity"] = {"label": cap.label, "tokens_per_s_per_gpu": y,
                              "tokens_per_s_per_user": tokens_per_s_per_user(cap.metrics)}
        if cost_per_gpu_hour is not None:
            cost = cost_per_million_tokens(cost_per_gpu_hour, y)
            out["at_capacity"]["cost_per_million_output_tokens"] = cost
    if interactivity_target is not None:
        fast = [
            p
            for p in points
            if (tokens_per_s_per_user(p.metrics) or 0.0) >= interactivity_target
            and _usable(p, max_error_rate)
        ]

        def per_gpu(p: MeasuredPoint) -> float:
            return tokens_per_s_per_gpu(p.metrics) or 0.0

        best = max((p for p in fast if p.passed), key=per_gpu, default=None)
        at: dict[str, Any] = {
            "target_tokens_per_s_per_user": interactivity_target,
            "among": "load points meeting the SLO",
        }
        if best is None and fast:
            past = max(fast, key=per_gpu)
            at["verdict"] = (
                f"none meeting the SLO gives {interactivity_target:g} tokens/s per user "
                f"({past.label} does at {per_gpu(past):.1f} tokens/s/GPU but fails the SLO)"
            )
        elif best is None:
            at["verdict"] = f"no load point gives {interactivity_target:g} tokens/s per user"
        else:
            y = tokens_per_s_per_gpu(best.metrics)
            at.update(label=best.label, tokens_per_s_per_gpu=y,
                      tokens_per_s_per_user=tokens_per_s_per_user(best.metrics))
            if cost_per_gpu_hour is not None:
                at["cost_per_million_output_tokens"] = cost_per_million_tokens(cost_per_gpu_hour, y)
        out["at_interactivity"] = at
    if cost_per_gpu_hour is not None:
        out["cost_per_gpu_hour"], out["currency"] = cost_per_gpu_hour, currency
    return out
