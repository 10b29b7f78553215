"""Compare two stored runs: what changed, and whether it is a regression.

A regression is a change beyond the threshold in the bad direction that is also beyond measurement
noise: lower goodput or throughput per GPU, higher TTFT/ITL/TPOT percentiles, where both runs stored
intervals (loadgen/intervals.py) and the intervals do not overlap (the same rule that
calls a tie between layouts). Without intervals (runs from before) the threshold alone decides. A
point or layout that passed and now fails is a regression, as is a different winner that scores
worse. Layouts whose capacity was searched are compared by their SLO capacity and the score there
(the selection's intervals), since the searched rates themselves differ from run to run.

Two runs are comparable when their spec hashes, engines and hardware agree (hardware: the GPUs
seen, else the CPU model; not checked when both ran in virtual time, where the machine does not
matter). `comparability` lists the differences; the CLI refuses unless told to proceed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import SpecError
from orchestrator.store.db import Store
from orchestrator.store.extras import SideRecords

# (label, path into the metrics dict, higher is better, key in the stored intervals)
COMPARED: tuple[tuple[str, tuple[str, ...], bool, str], ...] = (
    ("goodput req/s", ("goodput",), True, "goodput"),
    ("output tok/s/GPU", ("per_gpu", "output_throughput"), True, "output_throughput_per_gpu"),
    ("TTFT p99 ms", ("ttft_ms", "p99"), False, "ttft_p99_ms"),
    ("ITL p99 ms", ("itl_chunk_ms", "p99"), False, "itl_p99_ms"),
    ("TPOT p50 ms", ("tpot_ms", "p50"), False, "tpot_p50_ms"),
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


def parse_threshold(text: str) -> float:
    """`--threshold` as a fraction: "5%" -> 0.05. A bare number is refused: "5" read as a fraction is
    500%, a gate that never fires, and read as percent it would silently differ from "0.05"."""
    t = text.strip()
    if not t.endswith("%"):
        raise SpecError(
            f"--threshold {text!r}: give the unit, e.g. --threshold {t or '5'}% (a bare number could be read "
            "as a percent or as a fraction, 100 times apart)"
        )
    try:
        value = float(t[:-1]) / 100
    except ValueError:
        raise SpecError(f"--threshold {text!r}: give a relative change such as 5%") from None
    if not math.isfinite(value) or value < 0:
        raise SpecError(f"--threshold {text!r}: give a relative change of 0% or more, such as 5%")
    return value


def _get(metrics: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = metrics
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return float(value) if isinstance(value, int | float) else None


def _interval(obj: Any) -> tuple[float, float] | None:
    if isinstance(obj, list | tuple) and len(obj) == 2 and all(isinstance(x, int | float) for x in obj):
        return float(obj[0]), float(obj[1])
    return None


def judge(
    before: float,
    after: float,
    higher_better: bool,
    threshold: float,
    iv_before: tuple[float, float] | None,
    iv_after: tuple[float, float] | None,
) -> tuple[float, bool, str] | None:
    """(relative change, regression?, note) when the change is beyond the threshold, else None."""
    if before == 0:
        return None
    rel = (after - before) / abs(before)
    if abs(rel) <= threshold:
        return None
    worse = rel < 0 if higher_better else rel > 0
    if iv_before is None or iv_after is None:
        return rel, worse, "no intervals stored: threshold only" if worse else ""
    apart = iv_after[1] < iv_before[0] or iv_after[0] > iv_before[1]
    if not apart:
        return rel, False, "within noise (intervals overlap)"
    shown = f"[{iv_before[0]:.4g}, {iv_before[1]:.4g}] -> [{iv_after[0]:.4g}, {iv_after[1]:.4g}]"
    return rel, worse, f"intervals apart: {shown}"


def _hardware_key(hw: dict[str, Any]) -> Any:
    return hw.get("gpus") or hw.get("cpu_model")


def comparability(store: Store, run_a: str, run_b: str) -> list[str]:
    """What makes the two runs incomparable (empty when they compare)."""
    a, b = store.run_info(run_a), store.run_info(run_b)
    out = []
    if a.get("spec_hash") != b.get("spec_hash"):
        out.append(f"spec hashes differ ({str(a.get('spec_hash'))[:12]} vs {str(b.get('spec_hash'))[:12]})")
    if (a.get("engine"), a.get("engine_version")) != (b.get("engine"), b.get("engine_version")):
        out.append(
            f"engines differ ({a.get('engine')} {a.get('engine_version')} vs "
            f"{b.get('engine')} {b.get('engine_version')})"
        )
    modes = [m.mode if (m := SideRecords(store, r).sweep()) else None for r in (run_a, run_b)]
    if modes[0] != modes[1]:
        out.append(f"measured differently ({modes[0] or 'served'} vs {modes[1] or 'served'})")
    virtual = modes == ["virtual", "virtual"]
    ha, hb = _hardware_key(a.get("hardware") or {}), _hardware_key(b.get("hardware") or {})
    if not virtual and ha != hb:
        out.append(f"hardware differs ({ha} vs {hb})")
    return out


def _capacity_changes(
    store: Store, run_a: str, run_b: str, layouts: set[str], threshold: float
) -> list[Change]:
    verdicts = [
        {v["layout"]: v for v in (store.run(r).selection or {}).get("verdicts", [])} for r in (run_a, run_b)
    ]
    caps = [SideRecords(store, r).capacities() for r in (run_a, run_b)]
    changes = []
    for layout in sorted(layouts):
        va, vb = verdicts[0].get(layout, {}), verdicts[1].get(layout, {})
        # an open loop's capacity is a rate, a closed loop's a concurrency (pipeline/capacity.py)
        da, db = caps[0].get(layout) or {}, caps[1].get(layout) or {}
        ca = da.get("capacity_per_s", da.get("capacity_concurrency")) or 0.0
        cb = db.get("capacity_per_s", db.get("capacity_concurrency")) or 0.0
        unit = "concurrency" if (da or db).get("by") == "concurrency" else "req/s"
        if ca and not cb:
            changes.append(
                Change(
                    layout,
                    "capacity",
                    "SLO capacity",
                    ca,
                    0.0,
                    -1.0,
                    True,
                    "met the SLO at some load, now at none",
                )
            )
            continue
        pairs = (
            (
                f"SLO capacity {unit}",
                ca,
                cb,
                _interval(va.get("capacity_interval")),
                _interval(vb.get("capacity_interval")),
            ),
            (
                "score at capacity",
                va.get("score"),
                vb.get("score"),
                _interval(va.get("score_interval")),
                _interval(vb.get("score_interval")),
            ),
        )
        for name, before, after, iva, ivb in pairs:
            if not isinstance(before, int | float) or not isinstance(after, int | float):
                continue
            verdict = judge(float(before), float(after), True, threshold, iva, ivb)
            if verdict is not None:
                rel, worse, note = verdict
                changes.append(
                    Change(layout, "capacity", name, float(before), float(after), rel, worse, note)
                )
    return changes


def compare_runs(store: Store, run_a: str, run_b: str, threshold: float) -> list[Change]:
    searched = {name for r in (run_a, run_b) for name in SideRecords(store, r).capacities()}
    before = {(p.layout, p.label): p for p in store.points(run_a) if p.layout not in searched}
    after = {(p.layout, p.label): p for p in store.points(run_b) if p.layout not in searched}
    changes: list[Change] = _capacity_changes(store, run_a, run_b, searched, threshold)
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
        for name, path, higher_better, iv_key in COMPARED:
            va, vb = _get(a.metrics, path), _get(b.metrics, path)
            if va is None or vb is None:
                continue
            iva = _interval((a.metrics.get("intervals") or {}).get(iv_key))
            ivb = _interval((b.metrics.get("intervals") or {}).get(iv_key))
            verdict = judge(va, vb, higher_better, threshold, iva, ivb)
            if verdict is not None:
                rel, worse, note = verdict
                changes.append(Change(layout, label, name, va, vb, rel, worse, note))
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
