"""Engines of one replica from PlanInputs: the planner's cost model and KV capacity, called not copied."""

from __future__ import annotations

from orchestrator.errors import SpecError
from orchestrator.layout import Layout
from orchestrator.plan.planner import PlanInputs, kv_capacity_tokens, layout_cost
from orchestrator.sim.engine import BLOCK_TOKENS, EngineConfig, EngineCore

DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192


def replica_engines(inputs: PlanInputs, layout: Layout, *, max_num_seqs: int | None = None,
                    max_num_batched_tokens: int | None = None,
                    reserve_whole_kv: bool = False, prefix_caching: bool = True,
                    block_tokens: int = BLOCK_TOKENS) -> list[EngineCore]:
    """One EngineCore per DP rank of one replica (a replica is one server). Prefix caching is on unless
    turned off, as in vLLM v1 (`--enable-prefix-caching` is its default)."""
    cost = layout_cost(inputs, layout)
    kv_tokens, weights, usable = kv_capacity_tokens(inputs, cost)
    if kv_tokens <= 0:
        raise SpecError(f"layout {layout}: weights {weights / 1e9:.1f} GB per GPU leave no room for KV "
                        f"in {usable / 1e9:.1f} GB usable; the planner rejects it (orch plan)")
    config = EngineConfig(
        kv_capacity_tokens=kv_tokens,
        max_num_seqs=max_num_seqs or inputs.max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS,
        reserve_whole_kv=reserve_whole_kv,
        prefix_caching=prefix_caching,
        block_tokens=block_tokens,
    )
    return [EngineCore(cost, config) for _ in range(layout.dp)]
