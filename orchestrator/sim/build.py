"""Engines of one replica from PlanInputs: the planner's cost model and KV capacity, called not copied."""

from __future__ import annotations

from orchestrator.errors import SpecError
from orchestrator.layout import Layout
from orchestrator.plan.capacity import kv_capacity
from orchestrator.plan.inputs import PlanInputs, layout_cost, speculative_step_cost
from orchestrator.sim.engine import EngineConfig, EngineCore


def replica_engines(inputs: PlanInputs, layout: Layout, *,
                    reserve_whole_kv: bool = False) -> list[EngineCore]:
    """One EngineCore per DP rank of one replica (a replica is one server), with the engine settings
    the planner used (inputs.settings): its block size and whether prefix caching is on included."""
    cost = layout_cost(inputs, layout)
    spec = speculative_step_cost(inputs, cost)
    cap = kv_capacity(inputs, cost, spec)
    kv_tokens, weights, usable = cap.tokens, cap.heaviest_weight_bytes, cap.usable_bytes
    if kv_tokens <= 0:
        raise SpecError(f"layout {layout}: weights {weights / 1e9:.1f} GB per GPU leave no room for KV "
                        f"in {usable / 1e9:.1f} GB usable; the planner rejects it (orch plan)")
    hybrid = any(sh.window_bytes_per_token or sh.state_bytes_per_sequence for sh in cap.shapes)
    config = EngineConfig(
        kv_capacity_tokens=kv_tokens,
        # Window and state layers: blocks per sequence beside its context (plan/kv.py).
        side_kv_tokens=cap.side_tokens if hybrid else None,
        max_num_seqs=inputs.settings.max_num_seqs,
        max_num_batched_tokens=inputs.settings.max_num_batched_tokens,
        block_tokens=inputs.settings.block_size,
        reserve_whole_kv=reserve_whole_kv,
        prefix_caching=inputs.settings.enable_prefix_caching,
        speculative=spec,
    )
    return [EngineCore(cost, config) for _ in range(layout.dp)]
