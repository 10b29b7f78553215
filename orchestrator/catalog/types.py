"""Frozen value types the catalog hands to the planner. Units are in the field names."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    """The shapes the cost model needs, read from an HF config.json."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense MLP width
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    attention_bias: bool = False  # q/k/v biases (Qwen2)
    # MoE (zero/None for dense models)
    num_routed_experts: int = 0
    num_experts_per_token: int = 0  # top-k
    moe_intermediate_size: int = 0  # width of one routed expert
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0  # total width of the shared expert(s)
    first_k_dense_layers: int = 0  # leading dense layers before MoE layers start
    moe_layer_freq: int = 1
    # MLA (DeepSeek); zero when absent
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0

    @property
    def is_moe(self) -> bool:
        return self.num_routed_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0


@dataclass(frozen=True)
class LinkSpec:
    """One interconnect class: per-direction bandwidth and per-hop latency."""

    name: str
    bandwidth_bytes_per_s: float
    latency_s: float


@dataclass(frozen=True)
class GPUSpec:
    name: str
    memory_bytes: float
    hbm_bytes_per_s: float
    bf16_flops_per_s: float  # dense
    fp8_flops_per_s: float  # dense
    gpus_per_node: int
    intra_node: LinkSpec
    inter_node: LinkSpec
    # Guesses unless calibrated; printed with every result.
    hbm_efficiency: float = 0.8
    compute_efficiency: float = 0.5
    source: str = "vendor datasheet"
