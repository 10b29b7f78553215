"""What the step-time model is made of: the per-GPU coefficients of one PP stage (`StageCost`, built
once per layout by plan/cost.py's build_layout_cost) and one step's time split by cause (`StepParts`)."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.plan.kv import KVCacheShape


@dataclass(frozen=True)
class StepParts:
    """One step of one micro-batch through every stage, split by cause. Seconds."""

    weight_read_s: float
    kv_read_s: float
    compute_s: float
    tp_comm_s: float
    ep_comm_s: float
    pp_comm_s: float
    # sum over stages of max(weight read, GEMMs) + max(KV read, attention) + the layers' fixed cost +
    # communication, + the step overhead
    total_s: float
    bound: str  # "memory" or "compute": what the slowest stage is limited by
    # fixed costs of the step: the step overhead (scheduling, sampling) and every layer's kernel floor
    overhead_s: float = 0.0

    def to_ms_dict(self) -> dict[str, float | str]:
        return {
            "weight_read_ms": self.weight_read_s * 1e3, "kv_read_ms": self.kv_read_s * 1e3,
            "compute_ms": self.compute_s * 1e3, "tp_comm_ms": self.tp_comm_s * 1e3,
            "ep_comm_ms": self.ep_comm_s * 1e3, "pp_comm_ms": self.pp_comm_s * 1e3,
            "overhead_ms": self.overhead_s * 1e3, "total_ms": self.total_s * 1e3, "bound": self.bound,
        }


@dataclass(frozen=True)
class StageCost:
    """Per-GPU coefficients of one PP stage."""

    dense_weight_bytes: float  # held; read every step except the input embedding (a lookup)
    expert_weight_bytes: float  # routed experts held; the touched fraction of them is read
    kv_bytes_per_token: float  # per context token read
    dense_flops_per_token: float  # 2 * non-routed flop params / tp
    expert_flops_per_routed_token: float  # 2 * one expert * moe layers / (ranks sharing the experts)
    attn_flops_per_pair: float  # per (new token, context token) pair, the form prefill runs
    allreduces: int  # 2 per layer under TP
    moe_layers: int
    layers: int = 0  # decoder layers of the stage (each pays the GPU's layer_overhead_s per step)
    lookup_bytes: float = 0.0  # input embedding table on this GPU: held, but a step reads only B rows
    lookup_row_bytes: float = 0.0  # one embedding row's share on this GPU (d * 2 / tp)
    decode_attn_flops_per_pair: float = 0.0  # MLA decode runs the absorbed form: more FLOPs per pair
    # Hybrid layers (plan/kv.py). kv_bytes_per_token and attn_flops_per_pair above are the full-attention
    # layers'; window layers attend to at most their window; state layers update a fixed state.
    kv_shape: KVCacheShape | None = None
    has_side_kv: bool = False  # window or state layers: their reads are not per context token
    window_attn_flops_per_pair: tuple[tuple[float, int], ...] = ()  # (FLOPs per pair, window) per kind
    state_flops_per_token: float = 0.0
    # The fused-MoE passes beside the GEMMs (plan/moe.py activation_bytes), all MoE layers of the stage:
    # per routed (token, expert) row as _moe_tokens counts them, and per token.
    expert_act_bytes_per_routed_token: float = 0.0
    expert_act_bytes_per_token: float = 0.0
    # MLA chunked prefill: a chunk that is not its prompt's first re-expands the cached latent of the
    # chunks before it to keys and values (kv_b_proj) before attending to them. FLOPs per prefix token.
    mla_expand_flops_per_prefix_token: float = 0.0

    def side_read_bytes(self, kv_tokens: float, sequences: float) -> float:
        """KV bytes beside the full layers': window layers' (at most their window per sequence) and
        state layers' state."""
        shape = self.kv_shape
        if shape is None:
            return 0.0
        return shape.read_bytes(kv_tokens, sequences) - shape.full_bytes_per_token * kv_tokens

    def window_attn_flops(self, tokens: float, attn_pairs: float) -> float:
        return sum(f * min(attn_pairs, tokens * w) for f, w in self.window_attn_flops_per_pair)
