"""Memory formulas: PP stage split, weight bytes per GPU, KV bytes per token, KV capacity.

Symbols as in DESIGN.md: L layers, h_kv KV heads, d_head head dim, b bytes per value, n TP degree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.catalog.types import ModelConfig
from orchestrator.plan.params import ParamCounts, is_moe_layer, stage_params

# Embedding and LM head stay in 16-bit even in fp8/int4 checkpoints (vLLM and the common quantizers
# leave them unquantized).
EMBEDDING_BYTES_PER_VALUE = 2.0


def stage_layer_counts(num_layers: int, stages: int) -> tuple[int, ...]:
    """Layers per PP stage as vLLM splits them (vllm/distributed/utils.py get_pp_indices): an even
    split, the r extra layers one each on the stages before the last, from the second-to-last
    backwards (the last stage carries the final norm and LM head). 61 layers in 4: (15, 15, 16, 15).
    """
    base, extra = divmod(num_layers, stages)
    counts = [base] * stages
    for i in range(2, extra + 2):
        counts[-i] += 1
    return tuple(counts)


def stage_ranges(num_layers: int, stages: int) -> tuple[range, ...]:
    out, start = [], 0
    for count in stage_layer_counts(num_layers, stages):
        out.append(range(start, start + count))
        start += count
    return tuple(out)


@dataclass(frozen=True)
class StageParams:
    """Parameters one PP stage holds, before any TP/EP split."""

    layers: int
    moe_layers: int
    total: int  # everything the stage holds
    embedding: int  # the part that is embedding / LM head (kept in 16 bit)
    routed_experts: int  # the part that is routed experts (what EP shards)
    flop_params: int  # parameters each token multiplies by (no input embedding; top-k experts only)


def split_stages(cfg: ModelConfig, counts: ParamCounts, stages: int) -> tuple[StageParams, ...]:
    out = []
    ranges = stage_ranges(counts.num_layers, stages)
    for i, layers in enumerate(ranges):
        first, last = i == 0, i == len(ranges) - 1
        total = stage_params(counts, layers, first=first, last=last, cfg=cfg)
        moe = sum(1 for j in layers if is_moe_layer(cfg, j))
        emb = (counts.embedding if first else 0)
        if last:
            emb += counts.lm_head if counts.lm_head else (0 if first else counts.embedding)
        routed = moe * counts.routed_experts_per_layer
        dense_layers = len(layers) - moe
        flop = (dense_layers * counts.dense_layer + moe * counts.moe_layer_active
                + ((counts.lm_head or counts.embedding) if last else 0))
        out.append(StageParams(len(layers), moe, total, emb, routed, flop))
    return tuple(out)


def weight_bytes_per_gpu(stage: StageParams, *, weight_bytes_per_value: float, tp: int,
                         expert_ranks: int) -> tuple[float, float]:
    """(non-expert bytes, routed-expert bytes) one GPU of the stage holds.

    Non-expert weights are split over TP; routed experts over the EP ranks (tp*dp) with EP, over TP
    without it (each DP rank then holds every expert, sharded by TP).
    """
    quantized = stage.total - stage.embedding - stage.routed_experts
    dense = (quantized * weight_bytes_per_value + stage.embedding * EMBEDDING_BYTES_PER_VALUE) / tp
    experts = stage.routed_experts * weight_bytes_per_value / expert_ranks
    return dense, experts


def kv_values_per_token_per_layer(cfg: ModelConfig, tp: int) -> int:
    """Values one GPU stores per token per layer: 2 ceil(h_kv/n) d_head, or MLA's replicated latent."""
    if cfg.is_mla:
        return cfg.kv_lora_rank + cfg.qk_rope_head_dim  # the latent is not split by TP
    return 2 * math.ceil(cfg.num_kv_heads / tp) * cfg.head_dim


def kv_bytes_per_token(cfg: ModelConfig, kv_bytes_per_value: float) -> float:
    """kappa for the whole model on one GPU: 2 L h_kv d_head b (MLA: L (kv_lora_rank + rope_dim) b)."""
    return cfg.num_layers * kv_values_per_token_per_layer(cfg, 1) * kv_bytes_per_value


def kv_bytes_per_token_per_gpu(cfg: ModelConfig, kv_bytes_per_value: float, *, tp: int, layers: int) -> float:
    return layers * kv_values_per_token_per_layer(cfg, tp) * kv_bytes_per_value
