"""Virtual-time capacity search of four prefill/decode candidates, beside the same search for the
aggregated candidates of the same GPUs.

Goal (issue 25): a virtual-time sweep of four disaggregated candidates under a minute here. Each
candidate's capacity is searched as `orch sweep` searches it (loadgen.search.next_rate: bracket, then
bisect, from the planner's capacity, within the spec's search bounds), every load point a full
simulated run of the spec's workload (layouts/qwen72b-long-prompt.yaml: 60 s of ~8k-token prompts),
here on two nodes (16 H100) so that four pairs fit.
Printed per candidate: points run, capacity found, what the planner predicted, wall seconds.
Run: .venv/bin/python bench/disagg_search_speed.py
"""

from __future__ import annotations

import time
from pathlib import Path

from orchestrator.disagg import AnyLayout, DisaggLayout, parse_any_layout
from orchestrator.loadgen.search import next_rate
from orchestrator.plan.disagg import plan_disagg
from orchestrator.plan.disagg_run import workload_tokens
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.plan.planner import PlanInputs, plan_layout
from orchestrator.plan.run import itl_bound_ms
from orchestrator.sim.pd_run import simulate_disagg_point
from orchestrator.sim.run import simulate_point
from orchestrator.spec.load import load_spec
from orchestrator.spec.models import SweepSpec

SPEC = Path(__file__).resolve().parents[1] / "layouts" / "qwen72b-long-prompt.yaml"
NODES = 2
DISAGG = ["p:tp4x3+d:tp4", "p:tp4x2+d:tp8", "p:tp8+d:tp8", "p:tp4x2+d:tp4x2"]
AGGREGATED = ["tp8x2", "tp4x4", "tp8pp2", "tp4pp2x2"]
GOAL_S = 60.0


def planned_rate(spec: SweepSpec, inputs: PlanInputs, layout: AnyLayout) -> float:
    prompt, output = workload_tokens(spec)
    bound = itl_bound_ms(spec)
    if isinstance(layout, DisaggLayout):
        row = plan_disagg(inputs, layout, engine=spec.engine.name, prompt_tokens=prompt, output_tokens=output,
                          itl_bound_ms=bound)
        return row.capacity_rps
    agg = plan_layout(inputs, layout, context_tokens=prompt + output // 2, prompt_tokens=prompt,
                      itl_bound_ms=bound, output_tokens=output)
    return agg.best.output_tokens_per_s_per_gpu * layout.gpus / output if agg.best else 0.0


def search(spec: SweepSpec, inputs: PlanInputs, layout: AnyLayout) -> tuple[int, float | None, float, float]:
    """(points run, capacity, planned rate, wall seconds)."""
    s = spec.workload.search
    planned = planned_rate(spec, inputs, layout)
    start = min(max(planned or s.min_rate_per_s, s.min_rate_per_s), s.max_rate_per_s)
    tried: list[tuple[float, bool]] = []
    began = time.perf_counter()
    while True:
        rate, _ = next_rate(tried, start_rate=start, min_rate=s.min_rate_per_s, max_rate=s.max_rate_per_s,
                            rel_tol=s.tolerance_frac, max_runs=s.max_points)
        if rate is None:
            break
        if isinstance(layout, DisaggLayout):
            result = simulate_disagg_point(spec, inputs, layout, rate).result
        else:
            result = simulate_point(spec, inputs, layout, rate).result
        tried.append((rate, not result.verdict))
    passing = [r for r, ok in tried if ok]
    return len(tried), (max(passing) if passing else None), planned, time.perf_counter() - began


def main() -> None:
    spec = load_spec(SPEC)
    spec = spec.model_copy(update={"hardware": spec.hardware.model_copy(update={"nodes": NODES})})
    inputs = plan_inputs(spec)
    print(f"{'candidate':<18} {'kind':<7} {'points':>6} {'capacity req/s':>15} {'planned':>8} {'wall s':>7}")
    totals = {}
    for kind, names in (("disagg", DISAGG), ("agg", AGGREGATED)):
        total = 0.0
        for name in names:
            points, capacity, planned, wall = search(spec, inputs, parse_any_layout(name))
            total += wall
            shown = f"{capacity:.3g}" if capacity is not None else "none"
            print(f"{name:<18} {kind:<7} {points:>6} {shown:>15} {planned:>8.3g} {wall:>7.1f}")
        totals[kind] = total
    print(f"four disaggregated candidates: {totals['disagg']:.1f} s "
          f"({'within' if totals['disagg'] < GOAL_S else 'OVER'} the {GOAL_S:g} s goal); four aggregated "
          f"(peer): {totals['agg']:.1f} s; ratio {totals['disagg'] / totals['agg']:.2f}")


if __name__ == "__main__":
    main()
