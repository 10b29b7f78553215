"""`orch plan --disagg 64` speed: every prefill/decode split of 64 GPUs, ranked beside the aggregated layouts.

Goal (issue 25): under 1 s for 64 GPUs. The side-by-side peer is the aggregated plan of the same 64 GPUs
(every sensible layout, plan/enumerate.py), so the ratio shows what the splits add. Each case is a
fresh process state for the expert-placement cache (a new PlanInputs), best of 3.
Run: .venv/bin/python bench/plan_disagg_speed.py
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.engines import SettingsRequest, resolve_settings
from orchestrator.errors import SpecError
from orchestrator.plan.checks import Cluster
from orchestrator.plan.disagg_search import SplitPlan, plan_splits
from orchestrator.plan.enumerate import enumerate_layouts
from orchestrator.plan.inputs import PlanInputs, expert_imbalance
from orchestrator.plan.planner import PlanRow, plan_layout, rank_rows

GOAL_S = 1.0
GPUS = 64
CASES = [  # (model, GPU, weight dtype, bytes per value, redundant experts)
    ("qwen2.5-72b", "h100-sxm", "bf16", 2.0, 0),
    ("mixtral-8x7b", "h100-sxm", "bf16", 2.0, 0),
    ("deepseek-v3", "h200", "fp8", 1.0, 0),
    ("deepseek-v3", "h200", "fp8", 1.0, 32),
]


def _inputs(model: str, gpu: str, dtype: str, per_value: float, redundant: int) -> PlanInputs:
    cfg, hw = load_model(model), load_gpu(gpu)
    # The simulated engine's own settings for this GPU (vLLM's defaults), at 8192-token requests.
    settings = resolve_settings("sim", hw, cfg, SettingsRequest(max_model_len=8192))
    return PlanInputs(cfg=cfg, gpu=hw, cluster=Cluster(GPUS // 8, 8), settings=settings,
                      weight_dtype=dtype, weight_bytes_per_value=per_value, num_redundant_experts=redundant)


T = TypeVar("T")


def _best_of(fn: Callable[[], T], runs: int = 3) -> tuple[float, T]:
    """Best wall time of `runs` calls, each without the expert-placement cache of the one before."""
    times, out = [], []
    for _ in range(runs):
        expert_imbalance.cache_clear()
        start = time.perf_counter()
        out.append(fn())
        times.append(time.perf_counter() - start)
    return min(times), out[-1]


def main() -> None:
    print(f"{'model (64 GPUs, prompt 4096, output 256, ITL 50 ms)':<46} {'splits':>7} {'disagg s':>9} "
          f"{'agg layouts':>12} {'agg s':>7} {'ratio':>6} {'top candidate':>24}")
    for model, gpu, dtype, per_value, redundant in CASES:
        inputs = _inputs(model, gpu, dtype, per_value, redundant)

        def disagg(inputs: PlanInputs = inputs) -> SplitPlan:
            return plan_splits(inputs, GPUS, engine="vllm", prompt_tokens=4096, output_tokens=256,
                               itl_bound_ms=50)

        def agg(inputs: PlanInputs = inputs) -> list[PlanRow]:
            rows = []
            for lay in enumerate_layouts(inputs.cfg, inputs.cluster):
                try:
                    rows.append(plan_layout(inputs, lay, prompt_tokens=4096, output_tokens=256,
                                            itl_bound_ms=50))
                except SpecError as exc:  # as orch plan: that layout is rejected, not the plan
                    rows.append(PlanRow(lay, lay.gpus, (str(exc),), ()))
            return rank_rows(rows)

        d_s, plan = _best_of(disagg)
        a_s, rows = _best_of(agg)
        name = f"{model}" + (f" +{redundant} redundant experts" if redundant else "")
        verdict = "within" if d_s < GOAL_S else "OVER"
        print(f"{name:<46} {plan.splits:>7} {d_s:>9.3f} {len(rows):>12} {a_s:>7.3f} {d_s / a_s:>6.1f} "
              f"{plan.rows[0].layout!s:>24}   {verdict} the {GOAL_S:g} s goal")


if __name__ == "__main__":
    main()
