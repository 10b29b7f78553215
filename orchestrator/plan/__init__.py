"""Cost model (pure functions) and the planner."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.faces import lazy_face

if TYPE_CHECKING:
    from orchestrator.plan.assumptions import Assumptions as Assumptions
    from orchestrator.plan.checks import Cluster as Cluster
    from orchestrator.plan.cost import LayoutCost as LayoutCost
    from orchestrator.plan.dtypes import kv_bytes_per_value as kv_bytes_per_value
    from orchestrator.plan.dtypes import weight_bytes_per_value as weight_bytes_per_value
    from orchestrator.plan.experts import contiguous_placement as contiguous_placement
    from orchestrator.plan.experts import imbalance_vs_batch as imbalance_vs_batch
    from orchestrator.plan.experts import load_expert_stats as load_expert_stats
    from orchestrator.plan.experts import lognormal_popularity as lognormal_popularity
    from orchestrator.plan.experts import place_redundant as place_redundant
    from orchestrator.plan.experts import zipf_popularity as zipf_popularity
    from orchestrator.plan.from_spec import constants_line as constants_line
    from orchestrator.plan.from_spec import constants_used as constants_used
    from orchestrator.plan.from_spec import effective_constants as effective_constants
    from orchestrator.plan.from_spec import engine_settings as engine_settings
    from orchestrator.plan.from_spec import mean_tokens as mean_tokens
    from orchestrator.plan.from_spec import plan_inputs as plan_inputs
    from orchestrator.plan.moe import touched_fraction as touched_fraction
    from orchestrator.plan.params import count_params as count_params
    from orchestrator.plan.planner import PlanInputs as PlanInputs
    from orchestrator.plan.planner import PlanRow as PlanRow
    from orchestrator.plan.planner import kv_capacity as kv_capacity
    from orchestrator.plan.planner import kv_capacity_tokens as kv_capacity_tokens
    from orchestrator.plan.planner import layout_cost as layout_cost
    from orchestrator.plan.planner import plan_layout as plan_layout
    from orchestrator.plan.run import DEFAULT_BATCHES as DEFAULT_BATCHES
    from orchestrator.plan.run import PlanResult as PlanResult
    from orchestrator.plan.run import itl_bound_ms as itl_bound_ms
    from orchestrator.plan.run import make_plan as make_plan

__getattr__, __all__ = lazy_face(__name__, {
    "assumptions": ("Assumptions",),
    "checks": ("Cluster",),
    "cost": ("LayoutCost",),
    "dtypes": ("kv_bytes_per_value", "weight_bytes_per_value",),
    "experts": (
        "contiguous_placement", "imbalance_vs_batch", "load_expert_stats", "lognormal_popularity",
        "place_redundant", "zipf_popularity",
    ),
    "from_spec": (
        "constants_line", "constants_used", "effective_constants", "engine_settings", "mean_tokens",
        "plan_inputs",
    ),
    "moe": ("touched_fraction",),
    "params": ("count_params",),
    "planner": ("PlanInputs", "PlanRow", "kv_capacity", "kv_capacity_tokens", "layout_cost", "plan_layout",),
    "run": ("DEFAULT_BATCHES", "PlanResult", "itl_bound_ms", "make_plan",),
})  # fmt: skip
