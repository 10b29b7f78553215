"""Compare two stored runs point by point: what changed, and whether it is a regression.

A regression is a change beyond the threshold in the bad direction: lower goodput or throughput per
GPU, higher TTFT/ITL/TPOT percentiles, a point or layout that passed and now fails, or a different
winner that scores worse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.store.db import Store

# (label, path into the metrics dict, higher is better)
COMPARED: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("goodput req/s", ("goodput",), True),
    ("output tok/s/GPU", ("per_gpu", "output_throughput"), True),
    ("TTFT p99 ms", ("ttft_ms", "p99"), False),
    ("ITL p99 ms", ("itl_chunk_ms", "p99"), False),
    ("TPOT p50 ms", ("tpot_ms", "p50"), False),
)


@dataclass(frozen=True)
class Change:
    layout: str
    point: str
    metric: str
    before: float | None
    after: float | None
    relative: float | None  # (after - before) / before
    regression: bool
    note: str = ""


def _get(metrics: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = metrics
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return float(value) if isinstance(value, int | float) else None


def compare_runs(store: Store, run_a: str, run_b: str, threshold: float) -> list[Change]:
    before = {(p.layout, p.label): p for p in store.points(run_a)}
    after = {(p.layout, p.label): p for p in store.points(run_b)}
    changes: list[Change] = []
    for key in sorted(set(before) | set(after)):
        layout, label = key
        a, b = before.get(key), after.get(key)
        if a is None or b is None:
            changes.append(
                Change(
                    layout,
                    label,
                    "present",
                    None,
                    None,
                    None,
                    b is None,
                    "only in the first run" if b is None else "only in the second run",
                )
            )
            continue
        if a.passed and not b.passed:
            changes.append(
                Change(layout, label, "SLO", None, None, None, True, f"passed, now fails: {b.verdict}")
            )
        elif b.passed and not a.passed:
            changes.append(Change(layout, label, "SLO", None, None, None, False, "failed, now passes"))
        for name, path, higher_better in COMPARED:
            va, vb = _get(a.metrics, path), _get(b.metrics, path)
            if va is None or vb is None or va == 0:
                continue
            rel = (vb - va) / abs(va)
            worse = rel < -threshold if higher_better else rel > threshold
            if abs(rel) > threshold:
                changes.append(Change(layout, label, name, va, vb, rel, worse))
    win_a = (store.run(run_a).selection or {}).get("winner")
    win_b = (store.run(run_b).selection or {}).get("winner")
    if win_a != win_b:
        changes.append(
            Change(
                str(win_b),
                "-",
                "winner",
                None,
                None,
                None,
                win_b is None,
                f"winner changed from {win_a} to {win_b}",
            )
        )
    return changes
