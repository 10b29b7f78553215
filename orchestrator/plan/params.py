"""Parameter counts from a ModelConfig: totals, per-token active parameters, per-layer sizes.

Pure functions. Symbols: d hidden size, h query heads, h_kv KV heads, d_head head dim, V vocab,
f dense MLP width, f_e routed-expert width, E routed experts, k experts per token.
Multi-token-prediction modules (DeepSeek-V3's `num_nextn_predict_layers`) are not counted: the
published 671B excludes them. Small per-head norms (Qwen3's q_norm/k_norm, 2*d_head per layer) and
DeepSeek-V3's router bias (E per layer) are not in ModelConfig and are left out (< 0.001%).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.catalog.types import ModelConfig


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts, in parameters (not bytes). Per-layer fields are for one layer of that kind."""

    embedding: int  # V * d
    lm_head: int  # V * d, or 0 when tied to the embedding
    attention_per_layer: int  # projections (+ biases, + MLA low-rank norms)
    dense_mlp_per_layer: int  # 3 * d * f, in dense layers only
    routed_expert: int  # 3 * d * f_e, ONE routed expert
    shared_experts_per_layer: int  # 3 * d * f_shared (all shared experts of one MoE layer)
    router_per_layer: int  # d * E
    norms_per_layer: int  # the two RMSNorms around attention and MLP
    final_norm: int
    num_dense_layers: int
    num_moe_layers: int
    num_routed_experts: int
    top_k: int

    @property
    def num_layers(self) -> int:
        return self.num_dense_layers + self.num_moe_layers

    @property
    def routed_experts_per_layer(self) -> int:
        return self.routed_expert * self.num_routed_experts

    @property
    def dense_layer(self) -> int:
        """All parameters of one dense decoder layer."""
        return self.attention_per_layer + self.norms_per_layer + self.dense_mlp_per_layer

    @property
    def moe_layer(self) -> int:
        """All parameters of one MoE decoder layer (every routed expert)."""
        return (self.attention_per_layer + self.norms_per_layer + self.router_per_layer
                + self.shared_experts_per_layer + self.routed_experts_per_layer)

    @property
    def moe_layer_active(self) -> int:
        """Parameters of one MoE layer that one token uses (top-k routed experts)."""
        return (self.attention_per_layer + self.norms_per_layer + self.router_per_layer
                + self.shared_experts_per_layer + self.top_k * self.routed_expert)

    @property
    def non_layer(self) -> int:
        """Embedding, LM head and final norm."""
        return self.embedding + self.lm_head + self.final_norm

    @property
    def expert_params(self) -> int:
        """All routed-expert parameters of the model (what EP shards)."""
        return self.num_moe_layers * self.routed_experts_per_layer

    @property
    def total(self) -> int:
        return (self.non_layer + self.num_dense_layers * self.dense_layer
                + self.num_moe_layers * self.moe_layer)

    @property
    def active(self) -> int:
        """Parameters one token touches: top-k routed experts + shared experts + everything else.

        Includes the embedding row lookup's table (the Qwen/Mistral convention for "active").
        """
        return (self.non_layer + self.num_dense_layers * self.dense_layer
                + self.num_moe_layers * self.moe_layer_active)

    @property
    def active_without_embedding(self) -> int:
        """`active` minus the input embedding table (DeepSeek's convention; a lookup is not a matmul).

        This is also the right count for FLOPs per token (2 * this), since the LM head is a matmul.
        """
        return self.active - self.embedding


def is_moe_layer(cfg: ModelConfig, layer_index: int) -> bool:
    """DeepSeek convention: MoE from `first_k_dense_layers` on, every `moe_layer_freq`-th layer."""
    if not cfg.is_moe or layer_index < cfg.first_k_dense_layers:
        return False
    return layer_index % max(cfg.moe_layer_freq, 1) == 0


def attention_params(cfg: ModelConfig) -> int:
    """One layer's attention: projections, biases, and MLA's low-rank layernorms."""
    d, h = cfg.hidden_size, cfg.num_heads
    if cfg.is_mla:
        qk_head = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
        if cfg.q_lora_rank:
            q = d * cfg.q_lora_rank + cfg.q_lora_rank + cfg.q_lora_rank * h * qk_head  # q_a, q_a_norm, q_b
        else:
            q = d * h * qk_head  # q_proj
        kv_a = d * (cfg.kv_lora_rank + cfg.qk_rope_head_dim)  # kv_a_proj_with_mqa
        kv_norm = cfg.kv_lora_rank  # kv_a_layernorm
        kv_b = cfg.kv_lora_rank * h * (cfg.qk_nope_head_dim + cfg.v_head_dim)
        o = h * cfg.v_head_dim * d
        bias = 0
        if cfg.attention_bias:
            bias = (cfg.q_lora_rank or h * qk_head) + cfg.kv_lora_rank + cfg.qk_rope_head_dim + d
        return q + kv_a + kv_norm + kv_b + o + bias
    q_width = h * cfg.head_dim
    kv_width = cfg.num_kv_heads * cfg.head_dim
    proj = d * q_width + 2 * d * kv_width + q_width * d
    bias = q_width + 2 * kv_width if cfg.attention_bias else 0  # Qwen2: q/k/v biases, no o bias
    return proj + bias


def count_params(cfg: ModelConfig) -> ParamCounts:
    d = cfg.hidden_size
    num_moe = sum(1 for i in range(cfg.num_layers) if is_moe_layer(cfg, i))
    embedding = cfg.vocab_size * d
    return ParamCounts(
        embedding=embedding,
        lm_head=0 if cfg.tie_word_embeddings else embedding,
        attention_per_layer=attention_params(cfg),
        dense_mlp_per_layer=3 * d * cfg.intermediate_size,
        routed_expert=3 * d * cfg.moe_intermediate_size if cfg.is_moe else 0,
        shared_experts_per_layer=3 * d * cfg.shared_expert_intermediate_size if cfg.is_moe else 0,
        router_per_layer=d * cfg.num_routed_experts,
        norms_per_layer=2 * d,
        final_norm=d,
        num_dense_layers=cfg.num_layers - num_moe,
        num_moe_layers=num_moe,
        num_routed_experts=cfg.num_routed_experts,
        top_k=cfg.num_experts_per_token,
    )


def layer_params(counts: ParamCounts, layer_index: int, cfg: ModelConfig | None = None) -> int:
    """Parameters of decoder layer `layer_index` (0-based), for splitting layers into PP stages.

    Without `cfg`, the dense layers are taken to come first (true for every preset). Embedding, LM
    head and final norm are not included: add them to the first/last stage.
    """
    if not 0 <= layer_index < counts.num_layers:
        raise IndexError(f"layer {layer_index} out of range 0..{counts.num_layers - 1}")
    moe = is_moe_layer(cfg, layer_index) if cfg is not None else layer_index >= counts.num_dense_layers
    return counts.moe_layer if moe else counts.dense_layer


def stage_params(counts: ParamCounts, layers: range, *, first: bool, last: bool,
                 cfg: ModelConfig | None = None) -> int:
    """Parameters held by one PP stage owning `layers`; the first holds the embedding, the last the head."""
    total = sum(layer_params(counts, i, cfg) for i in layers)
    if first:
        total += counts.embedding
    if last:
        total += counts.lm_head + counts.final_norm
        if counts.lm_head == 0 and not first:
            total += counts.embedding  # a tied head still needs the matrix on the last stage
    return total
