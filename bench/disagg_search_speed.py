"""A virtual-time `orch sweep` of four prefill/decode candidates, beside the same sweep of four
aggregated candidates of the same GPUs.

Goal (issue 25): a virtual-time sweep of four disaggregated candidates under a minute here. Each sweep
is the real pipeline (pipeline/sweep.py: plan, the capacity search from the planner's seed, every load
point a full simulated run of the spec's workload, intervals, the store, the selection), on
layouts/qwen72b-long-prompt.yaml (60 s of ~8k-token prompts) moved to two nodes (16 H100) so that four
pairs fit. Printed per candidate: load points, SLO capacity found, wall seconds; then each sweep's
total (wall and this process's CPU) and the ratio of the two sweeps.
Run: .venv/bin/python bench/disagg_search_speed.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from orchestrator.disagg import parse_any_layouts
from orchestrator.pipeline.sweep import Sweep, SweepOptions
from orchestrator.spec.load import load_spec
from orchestrator.store.db import Store

SPEC = Path(__file__).resolve().parents[1] / "layouts" / "qwen72b-long-prompt.yaml"
NODES = 2
DISAGG = "p:tp4x3+d:tp4,p:tp4x2+d:tp8,p:tp8+d:tp8,p:tp4x2+d:tp4x2"
AGGREGATED = "tp8x2,tp4x4,tp8pp2,tp4pp2x2"
GOAL_S = 60.0


class Timer:
    """An observer that notes when each candidate starts and ends (the sweep's own calls)."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.wall: dict[str, float] = {}

    def phase(self, layout: str, phase: str) -> None:
        self.started.setdefault(layout, time.perf_counter())

    def layout_done(self, layout: str, status: str, reason: str | None) -> None:
        self.wall[layout] = time.perf_counter() - self.started.get(layout, time.perf_counter())

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def sweep(layouts: str, db: Path) -> tuple[float, float, dict[str, tuple[int, float | None, float]]]:
    """(wall s, CPU s, {candidate: (load points, capacity req/s, wall s)}) of one virtual-time sweep."""
    spec = load_spec(SPEC)
    spec = spec.model_copy(update={"hardware": spec.hardware.model_copy(update={"nodes": NODES})})
    store, timer = Store(db), Timer()
    options = SweepOptions(layouts=tuple(parse_any_layouts(layouts)))
    run = Sweep(spec, store, timer, options=options)  # type: ignore[arg-type]
    w0, c0 = time.perf_counter(), time.process_time()
    result = run.run()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    caps = store.extras(run.run_id)
    out = {}
    for o in result.outcomes:
        cap = (caps.get(f"capacity/{o.layout}") or {}).get("capacity_per_s")
        out[o.layout] = (len(store.points(run.run_id, o.layout)), cap, timer.wall.get(o.layout, 0.0))
    return wall, cpu, out


def main() -> None:
    print(f"{'candidate':<18} {'kind':<7} {'points':>6} {'capacity req/s':>15} {'wall s':>7}")
    totals = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind, layouts in (("disagg", DISAGG), ("agg", AGGREGATED)):
            wall, cpu, rows = sweep(layouts, Path(tmp) / f"{kind}.db")
            for name, (points, cap, seconds) in rows.items():
                shown = f"{cap:.3g}" if cap is not None else "none"
                print(f"{name:<18} {kind:<7} {points:>6} {shown:>15} {seconds:>7.1f}", flush=True)
            totals[kind] = (wall, cpu)
    (dw, dc), (aw, ac) = totals["disagg"], totals["agg"]
    goal = "within" if dw < GOAL_S else "OVER"
    print(f"orch sweep of four disaggregated candidates (virtual time): {dw:.1f} s wall, {dc:.1f} s CPU "
          f"({goal} the {GOAL_S:g} s goal); four aggregated (peer): {aw:.1f} s wall, {ac:.1f} s CPU; "
          f"ratio {dw / aw:.2f}")


if __name__ == "__main__":
    main()
