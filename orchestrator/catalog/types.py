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
    # Multi-token-prediction layers shipped beside the model (DeepSeek-V3: 1); what MTP drafts with.
    num_nextn_predict_layers: int = 0

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
    latency_s: float  # per hop of a ring / per message
    # Measured time of one all-reduce call apart from its bytes (launch, sync; e.g. vLLM's custom
    # all-reduce on NVLink). When set it replaces the ring's 2(n-1) hop latencies.
    allreduce_latency_s: float | None = None


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
    compute_efficiency: float = 0.5  # dense GEMMs and attention
    # Routed experts run as grouped GEMMs with few tokens per expert, far below dense efficiency.
    moe_compute_efficiency: float = 0.2
    # Fixed cost of one engine step beside bandwidth and FLOPs: scheduling, sampling, kernel launches.
    step_overhead_s: float = 0.0
    # Fixed cost of one request before the engine can schedule it and beside its tokens: HTTP
    # handling, tokenisation, detokenisation, the API server's queue. Paid once, in TTFT.
    request_overhead_s: float = 0.0
    # Speculative decoding's own cost per engine step beside the drafter's passes and the verify tokens
    # (proposer call, rejection sampler, n-gram lookups; plan/speculative_cost.py): per step, and per
    # decoding sequence. Unmeasured on GPUs (0); `cpu`: measured on vLLM for CPU (docs/speculative.md).
    spec_step_overhead_s: float = 0.0
    spec_sequence_overhead_s: float = 0.0
    source: str = "vendor datasheet"
    profile: str = ""  # calibration profile applied, if any


# Constants a spec may override (hardware.overrides) or a calibration profile may set.
# Efficiencies are fractions in (0, 1]; latencies and the step overhead may be 0; the rest > 0.
GPU_CONSTANTS = ("memory_bytes", "hbm_bytes_per_s", "bf16_flops_per_s", "fp8_flops_per_s",
                 "hbm_efficiency", "compute_efficiency", "moe_compute_efficiency", "step_overhead_s",
                 "request_overhead_s", "spec_step_overhead_s", "spec_sequence_overhead_s", "gpus_per_node")
LINK_CONSTANTS = ("bandwidth_bytes_per_s", "latency_s", "allreduce_latency_s")
LINKS = ("intra_node", "inter_node")
EFFICIENCIES = ("hbm_efficiency", "compute_efficiency", "moe_compute_efficiency")
MAY_BE_ZERO = ("fp8_flops_per_s", "step_overhead_s", "request_overhead_s", "latency_s", "allreduce_latency_s",
               "spec_step_overhead_s", "spec_sequence_overhead_s")


def override_keys() -> list[str]:
    """Every key `hardware.overrides` accepts, links as `intra_node.bandwidth_bytes_per_s`."""
    return [*GPU_CONSTANTS, *(f"{link}.{k}" for link in LINKS for k in LINK_CONSTANTS)]
