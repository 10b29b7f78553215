"""The KV cache one engine rank holds: each PP stage's room after weights (as the engine's kernels lay
them out), the runtime reserve and the start-up profile run's peak, filled as the hybrid allocator
fills it (plan/kv.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.plan.cost import LayoutCost
from orchestrator.plan.inputs import PlanInputs
from orchestrator.plan.kv import KVCacheShape
from orchestrator.plan.memory import (
    forward_profile_bytes,
    mxfp4_expert_factor,
    sampler_profile_bytes,
    startup_peak_bytes,
)
from orchestrator.plan.speculative_cost import SpeculativeCost


@dataclass(frozen=True)
class KVCapacity:
    """The KV cache of one engine rank: the room each PP stage's GPUs keep after weights and reserve,
    and how the hybrid allocator fills it (plan/kv.py). Every stage holds KV for the same sequences,
    so the tightest stage bounds the rank.

    A speculative drafter's weights are already out of the last stage's room; its KV
    (`draft_kv_bytes_per_token`, per GPU of the last stage) shares the model's cache, every cached
    token holding both (vLLM puts the drafter's attention layers in the same pool), so that stage's
    room goes to the two in proportion to their bytes per token."""

    rooms: tuple[float, ...]  # bytes per GPU left for KV, per stage (negative: weights do not fit)
    shapes: tuple[KVCacheShape, ...]
    heaviest_weight_bytes: float
    usable_bytes: float
    draft_kv_bytes_per_token: float = 0.0
    sampler_bytes: float = 0.0  # the last stage's start-up sampler peak (plan/memory.py)
    forward_bytes: float = 0.0  # the start-up forward's activation peak (plan/memory.py)
    expert_factor: float = 1.0  # routed experts' resident bytes over the checkpoint's (MXFP4 backend)

    @property
    def startup_peak_bytes(self) -> float:
        """The last stage's start-up profile peak, out of its room: the larger of forward and sampler."""
        return startup_peak_bytes(self.forward_bytes, self.sampler_bytes)

    def _kv_rooms(self) -> tuple[float, ...]:
        """Each stage's room for the model's own KV: the last stage's less its drafter's share."""
        extra = self.draft_kv_bytes_per_token
        if not extra or min(self.rooms) < 0:
            return self.rooms
        last = self.shapes[-1]
        own = last.bytes_per_block * max(last.growing_groups, 1) / last.block_tokens
        return (*self.rooms[:-1], self.rooms[-1] * own / (own + extra) if own else self.rooms[-1])

    @property
    def tokens(self) -> int:
        """Context tokens the rank holds in its growing (full-attention) KV, no side blocks counted;
        negative when the weights alone do not fit."""
        if min(self.rooms) < 0:
            return math.floor(min(self.rooms))
        return min(sh.capacity_tokens(r) for sh, r in zip(self.shapes, self._kv_rooms(), strict=True))

    def sequences(self, context_tokens: int) -> int:
        """Sequences of `context_tokens` each the rank holds."""
        if min(self.rooms) < 0:
            return 0
        rooms = self._kv_rooms()
        return min(sh.sequences(r, context_tokens) for sh, r in zip(self.shapes, rooms, strict=True))

    def side_tokens(self, context_tokens: int) -> int:
        """A sequence's window and state blocks, in full-attention tokens (what the simulator charges)."""
        return max(sh.side_tokens(context_tokens) for sh in self.shapes)

    def max_len_shortfall(self, max_model_len: int, step_budget_tokens: int) -> float:
        """Bytes by which one max_model_len request does not fit (vLLM's start check); <= 0 fits. The
        drafter's layers hold the request too."""
        last = len(self.shapes) - 1
        return max(sh.max_len_bytes(max_model_len, step_budget_tokens) + sh.bytes_per_block - r
                   + (self.draft_kv_bytes_per_token * max_model_len if i == last else 0.0)
                   for i, (sh, r) in enumerate(zip(self.shapes, self.rooms, strict=True)))


def kv_capacity(inputs: PlanInputs, cost: LayoutCost, spec: SpeculativeCost | None = None) -> KVCapacity:
    """The rank's KV capacity; a drafter (`spec`) adds its weights and its KV on the last stage."""
    reserve = inputs.assumptions.runtime_reserve_bytes
    usable = inputs.gpu.memory_bytes * inputs.gpu_memory_utilization - reserve
    layout, cfg = cost.layout, inputs.cfg
    expert_tp = 1 if layout.ep else layout.tp
    # Every stage runs the profile forward; only the last samples, so only its GPUs hold the sampler
    # run, and each stage's peak is the larger of the two runs it makes (plan/memory.py).
    forward = forward_profile_bytes(cfg, tp=layout.tp, expert_tp=expert_tp,
                                    tokens=inputs.max_num_batched_tokens,
                                    bytes_per_value=inputs.assumptions.activation_bytes_per_value)
    sampler = sampler_profile_bytes(cfg.vocab_size, inputs.max_num_seqs, inputs.max_num_batched_tokens,
                                    inputs.sampler_profile)
    factor = 1.0
    if inputs.mxfp4_backend != "unpadded" and cfg.is_moe:
        factor = mxfp4_expert_factor(inputs.mxfp4_backend, cfg.hidden_size,
                                     cfg.moe_intermediate_size // expert_tp)
    rooms, shapes, heaviest = [], [], 0.0
    last = len(cost.stages) - 1
    for i, st in enumerate(cost.stages):
        weights = st.dense_weight_bytes + st.expert_weight_bytes * factor
        if spec is not None and i == last:
            weights += spec.draft_weight_bytes_per_gpu
        heaviest = max(heaviest, weights)
        rooms.append(usable - weights - startup_peak_bytes(forward, sampler if i == last else 0.0))
        assert st.kv_shape is not None  # build_layout_cost always sets it
        shapes.append(st.kv_shape)
    draft_kv = spec.draft_kv_bytes_per_token_per_gpu if spec is not None else 0.0
    return KVCapacity(tuple(rooms), tuple(shapes), heaviest, usable, draft_kv, sampler, forward, factor)


def kv_capacity_tokens(inputs: PlanInputs, cost: LayoutCost,
                       spec: SpeculativeCost | None = None) -> tuple[int, float, float]:
    """(KV tokens one engine rank holds, heaviest stage's weight bytes per GPU, usable bytes per GPU).
    Negative tokens mean the weights alone do not fit."""
    cap = kv_capacity(inputs, cost, spec)
    return cap.tokens, cap.heaviest_weight_bytes, cap.usable_bytes
