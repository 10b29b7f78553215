"""Cost model (pure functions) and the planner."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.faces import lazy_face

if TYPE_CHECKING:
    from orchestrator.plan.assumptions import Assumptions as Assumptions
    from orchestrator.plan.calls import SESSION_KINDS as SESSION_KINDS
    from orchestrator.plan.calls import CallPricer as CallPricer
    from orchestrator.plan.calls import CallShape as CallShape
    from orchestrator.plan.calls import PlannedCall as PlannedCall
    from orchestrator.plan.calls import request_call as request_call
    from orchestrator.plan.candidates import candidate_of as candidate_of
    from orchestrator.plan.candidates import check_pairs as check_pairs
    from orchestrator.plan.candidates import disagg_candidate as disagg_candidate
    from orchestrator.plan.candidates import pool_settings as pool_settings
    from orchestrator.plan.capacity import kv_capacity as kv_capacity
    from orchestrator.plan.capacity import kv_capacity_tokens as kv_capacity_tokens
    from orchestrator.plan.checks import Cluster as Cluster
    from orchestrator.plan.cost import LayoutCost as LayoutCost
    from orchestrator.plan.disagg import DisaggRow as DisaggRow
    from orchestrator.plan.disagg import inputs_of as inputs_of
    from orchestrator.plan.disagg import plan_pair as plan_pair
    from orchestrator.plan.disagg import shape_of as shape_of
    from orchestrator.plan.disagg_run import DisaggPlanResult as DisaggPlanResult
    from orchestrator.plan.disagg_run import make_disagg_plan as make_disagg_plan
    from orchestrator.plan.disagg_run import make_split_plan as make_split_plan
    from orchestrator.plan.disagg_search import SplitPlan as SplitPlan
    from orchestrator.plan.disagg_search import output_tokens_per_s_per_gpu as output_tokens_per_s_per_gpu
    from orchestrator.plan.dtypes import kv_bytes_per_value as kv_bytes_per_value
    from orchestrator.plan.dtypes import weight_bytes_per_value as weight_bytes_per_value
    from orchestrator.plan.expert_stats import load_expert_stats as load_expert_stats
    from orchestrator.plan.expert_stats import lognormal_popularity as lognormal_popularity
    from orchestrator.plan.expert_stats import zipf_popularity as zipf_popularity
    from orchestrator.plan.experts import contiguous_placement as contiguous_placement
    from orchestrator.plan.experts import imbalance_vs_batch as imbalance_vs_batch
    from orchestrator.plan.experts import place_redundant as place_redundant
    from orchestrator.plan.from_spec import constants_line as constants_line
    from orchestrator.plan.from_spec import constants_used as constants_used
    from orchestrator.plan.from_spec import effective_constants as effective_constants
    from orchestrator.plan.from_spec import engine_settings as engine_settings
    from orchestrator.plan.from_spec import mean_tokens as mean_tokens
    from orchestrator.plan.from_spec import plan_inputs as plan_inputs
    from orchestrator.plan.inputs import PlanInputs as PlanInputs
    from orchestrator.plan.inputs import layout_cost as layout_cost
    from orchestrator.plan.inputs import speculative_step_cost as speculative_step_cost
    from orchestrator.plan.kv_transfer import transfer_link as transfer_link
    from orchestrator.plan.kv_transfer import transfer_time_fn as transfer_time_fn
    from orchestrator.plan.memory import engine_sampler_profile as engine_sampler_profile
    from orchestrator.plan.memory import mxfp4_moe_backend as mxfp4_moe_backend
    from orchestrator.plan.moe import touched_fraction as touched_fraction
    from orchestrator.plan.params import count_params as count_params
    from orchestrator.plan.planner import PlanRow as PlanRow
    from orchestrator.plan.planner import plan_layout as plan_layout
    from orchestrator.plan.run import DEFAULT_BATCHES as DEFAULT_BATCHES
    from orchestrator.plan.run import PlanResult as PlanResult
    from orchestrator.plan.run import SessionCalls as SessionCalls
    from orchestrator.plan.run import itl_bound_ms as itl_bound_ms
    from orchestrator.plan.run import make_plan as make_plan
    from orchestrator.plan.settings_grid import settings_requests as settings_requests
    from orchestrator.plan.speculative import SpeculativeSettings as SpeculativeSettings
    from orchestrator.plan.speculative import single_speculative as single_speculative
    from orchestrator.plan.speculative import speculative_options as speculative_options
    from orchestrator.plan.speculative import split_field as split_field
    from orchestrator.plan.speculative import uniform_acceptance as uniform_acceptance
    from orchestrator.plan.speculative_cost import SpeculativeCost as SpeculativeCost

__getattr__, __all__ = lazy_face(__name__, {
    "assumptions": ("Assumptions",),
    "calls": ("SESSION_KINDS", "CallPricer", "CallShape", "PlannedCall", "request_call",),
    "checks": ("Cluster",),
    "cost": ("LayoutCost",),
    "dtypes": ("kv_bytes_per_value", "weight_bytes_per_value",),
    "expert_stats": ("load_expert_stats", "lognormal_popularity", "zipf_popularity",),
    "experts": ("contiguous_placement", "imbalance_vs_batch", "place_redundant",),
    "from_spec": (
        "constants_line", "constants_used", "effective_constants", "engine_settings", "mean_tokens",
        "plan_inputs",
    ),
    "memory": ("engine_sampler_profile", "mxfp4_moe_backend",),
    "moe": ("touched_fraction",),
    "params": ("count_params",),
    "inputs": ("PlanInputs", "layout_cost", "speculative_step_cost",),
    "capacity": ("kv_capacity", "kv_capacity_tokens",),
    "planner": ("PlanRow", "plan_layout",),
    "run": ("DEFAULT_BATCHES", "PlanResult", "SessionCalls", "itl_bound_ms", "make_plan",),
    "speculative_cost": ("SpeculativeCost",),
    "speculative": (
        "SpeculativeSettings", "single_speculative", "speculative_options", "split_field",
        "uniform_acceptance",
    ),
    "settings_grid": ("settings_requests",),
    "candidates": ("candidate_of", "check_pairs", "disagg_candidate", "pool_settings",),
    "disagg": ("DisaggRow", "inputs_of", "plan_pair", "shape_of",),
    "disagg_run": ("DisaggPlanResult", "make_disagg_plan", "make_split_plan",),
    "disagg_search": ("SplitPlan", "output_tokens_per_s_per_gpu",),
    "kv_transfer": ("transfer_link", "transfer_time_fn",),
})  # fmt: skip
