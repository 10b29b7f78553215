"""Frozen value types the catalog hands to the planner. Units are in the field names."""

from __future__ import annotations

from dataclasses import dataclass

# What one decoder layer mixes tokens with. Attention kinds hold KV that grows with the context
# (full), up to a window (sliding), or up to the current chunk (chunked, Llama-4's local attention);
# state kinds hold a fixed state per sequence (linear: Gated DeltaNet; mamba: Mamba-1 as in Jamba).
FULL, SLIDING, CHUNKED, LINEAR, MAMBA = "full", "sliding", "chunked", "linear", "mamba"
ATTENTION_KINDS = (FULL, SLIDING, CHUNKED)
STATE_KINDS = (LINEAR, MAMBA)
LAYER_KINDS = (*ATTENTION_KINDS, *STATE_KINDS)


@dataclass(frozen=True)
class LinearAttentionShape:
    """Gated DeltaNet layers (Qwen3-Next's `linear_*` fields)."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    ssm_state_bytes_per_value: float = 0.0  # config's mamba_ssm_dtype; 0: the KV-cache dtype

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim


@dataclass(frozen=True)
class MambaShape:
    """Mamba-1 mixer layers (Jamba's `mamba_*` fields)."""

    inner_size: int  # d_inner = expand * hidden
    state_size: int  # d_state
    conv_kernel: int
    dt_rank: int
    conv_bias: bool = True
    proj_bias: bool = False
    inner_norms: bool = False  # Jamba's dt/B/C RMSNorms
    ssm_state_bytes_per_value: float = 0.0  # 0: the KV-cache dtype (vLLM's mamba_ssm_cache_dtype auto)


@dataclass(frozen=True)
class CheckpointQuant:
    """What a checkpoint's `quantization_config` says its weights are (catalog/quant.py reads it)."""

    method: str  # quant_method as written (fp8, compressed-tensors, fbgemm_fp8, mxfp4, modelopt, awq, gptq)
    weight_dtype: str  # what orch prices: fp8, mxfp4, nvfp4, int4
    group_size: int = 0  # elements sharing one scale along the input dimension; 0 per channel/tensor
    block_shape: tuple[int, int] | None = None  # fp8 block-wise (block_n, block_k)
    attention_quantized: bool = True  # False: attention projections stay 16-bit
    dense_quantized: bool = True  # dense MLPs and shared experts
    experts_quantized: bool = True  # routed experts
    unquantized_modules: tuple[str, ...] = ()  # patterns as written, for the record


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
    # Layer structure (empty/None: every layer full attention, MoE layers by the two fields above)
    model_type: str = ""
    layer_kinds: tuple[str, ...] = ()  # one of LAYER_KINDS per layer
    sliding_window: int = 0  # tokens a sliding layer keeps
    attention_chunk_size: int = 0  # tokens a chunked layer attends to (Llama-4)
    moe_layer_indices: tuple[int, ...] | None = None  # explicit MoE layers (interleaving, mlp_only_layers)
    # Small per-layer parts some families have
    attention_out_bias: bool = False  # o_proj bias (gpt-oss; Llama with attention_bias)
    attention_sinks: bool = False  # one learned logit per head (gpt-oss)
    qk_norm: bool = False  # per-head q/k RMSNorms (Qwen3, Gemma-3, GLM-4.5)
    attn_output_gate: bool = False  # q_proj also emits a gate (Qwen3-Next full attention)
    norms_per_layer: int = 2  # RMSNorms of d per layer (Gemma-2/3: 4)
    expert_bias: bool = False  # biases in the expert MLPs (gpt-oss)
    router_bias: bool = False  # router bias / score-correction bias (gpt-oss, DeepSeek-V3, GLM-4.5)
    shared_expert_gate: bool = False  # Qwen2-MoE/Qwen3-Next: a d x 1 gate on the shared expert
    linear_attention: LinearAttentionShape | None = None
    mamba: MambaShape | None = None
    # Multi-token-prediction layers shipped beside the model (DeepSeek-V3: 1): counted apart, not served
    # as part of the model; what speculative decoding's `mtp` method drafts with (plan/speculative.py).
    mtp_layers: int = 0
    vision_params: int = 0  # vision tower + projector of a multimodal config: stated apart
    quantization: CheckpointQuant | None = None  # the checkpoint's own quantization_config

    @property
    def is_moe(self) -> bool:
        return self.num_routed_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    def layer_kind(self, index: int) -> str:
        return self.layer_kinds[index] if self.layer_kinds else FULL

    @property
    def is_hybrid(self) -> bool:
        """Some layer is not full attention (window, chunk or state)."""
        return any(k != FULL for k in self.layer_kinds)


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
    # Fixed cost of one layer's kernels in a forward pass beside their bytes and FLOPs (each of a layer's
    # ~10 kernels ramps up and drains, and waits on the one before it, even inside a CUDA graph): paid per
    # layer of every step, so it weighs on a small-batch decode step of a deep model and vanishes under a
    # large prefill. Unlike step_overhead_s it grows with depth (80 layers of Llama-70B vs 32 of 8B).
    layer_overhead_s: float = 0.0
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
    # Dense FP4 (NVFP4) tensor-core FLOP/s, Blackwell on; 0: no FP4 tensor cores or not stated, and
    # NVFP4 weights then run dequantized to bf16 (as vLLM's Marlin FP4 path does before Blackwell).
    fp4_flops_per_s: float = 0.0
    # CUDA compute capability ("9.0"); where engines pick kernels by it (vLLM's MXFP4 MoE backend,
    # plan/memory.py mxfp4_moe_backend). Empty for GPUs that have none (ROCm, CPU).
    compute_capability: str = ""


# Constants a spec may override (hardware.overrides) or a calibration profile may set.
# Efficiencies are fractions in (0, 1]; latencies and the step overhead may be 0; the rest > 0.
GPU_CONSTANTS = ("memory_bytes", "hbm_bytes_per_s", "bf16_flops_per_s", "fp8_flops_per_s",
                 "fp4_flops_per_s", "hbm_efficiency", "compute_efficiency", "moe_compute_efficiency",
                 "step_overhead_s", "layer_overhead_s", "request_overhead_s", "spec_step_overhead_s",
                 "spec_sequence_overhead_s", "gpus_per_node")
LINK_CONSTANTS = ("bandwidth_bytes_per_s", "latency_s", "allreduce_latency_s")
LINKS = ("intra_node", "inter_node")
EFFICIENCIES = ("hbm_efficiency", "compute_efficiency", "moe_compute_efficiency")
MAY_BE_ZERO = ("fp8_flops_per_s", "fp4_flops_per_s", "step_overhead_s", "layer_overhead_s",
               "request_overhead_s", "latency_s", "allreduce_latency_s", "spec_step_overhead_s",
               "spec_sequence_overhead_s")


def override_keys() -> list[str]:
    """Every key `hardware.overrides` accepts, links as `intra_node.bandwidth_bytes_per_s`."""
    return [*GPU_CONSTANTS, *(f"{link}.{k}" for link in LINKS for k in LINK_CONSTANTS)]
