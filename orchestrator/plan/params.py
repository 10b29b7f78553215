"""Parameter counts from a ModelConfig: totals, per-token active parameters, per-layer sizes.

Pure functions. Symbols: d hidden size, h query heads, h_kv KV heads, d_head head dim, V vocab,
f dense MLP width, f_e routed-expert width, E routed experts, k experts per token.
A layer is a token mixer (full/sliding/chunked attention, Gated DeltaNet or Mamba-1) plus an MLP
(dense, or MoE: routed experts + shared experts + router) plus its norms.
Multi-token-prediction modules (DeepSeek-V3's `num_nextn_predict_layers`) are counted apart
(`mtp`), not in `total`: the published 671B excludes them and the engines do not serve them unless
speculative decoding asks. A multimodal config's vision tower is also apart (`vision`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from orchestrator.catalog.types import LINEAR, MAMBA, ModelConfig


@dataclass(frozen=True)
class LayerParams:
    """One decoder layer, split by what the memory and cost models treat differently."""

    kind: str  # the mixer's kind (catalog.types.LAYER_KINDS)
    moe: bool
    mixer: int  # attention projections (+ biases, sinks, q/k norms) or the linear/Mamba mixer
    mlp: int  # dense MLP, or shared experts (+ their gate) of an MoE layer
    routed: int  # every routed expert of the layer (what EP shards)
    routed_active: int  # the top-k routed experts one token uses
    small: int  # norms and the router: kept 16-bit in every checkpoint format

    @property
    def total(self) -> int:
        return self.mixer + self.mlp + self.routed + self.small

    @property
    def active(self) -> int:
        return self.mixer + self.mlp + self.routed_active + self.small


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts, in parameters (not bytes). Per-layer fields are for one layer of that kind."""

    embedding: int  # V * d
    lm_head: int  # V * d, or 0 when tied to the embedding
    attention_per_layer: int  # projections (+ biases, + MLA low-rank norms) of a full-attention layer
    dense_mlp_per_layer: int  # 3 * d * f, in dense layers only
    routed_expert: int  # 3 * d * f_e (+ biases), ONE routed expert
    shared_experts_per_layer: int  # 3 * d * f_shared (all shared experts of one MoE layer, + gate)
    router_per_layer: int  # d * E (+ bias)
    norms_per_layer: int  # the RMSNorms around attention and MLP
    final_norm: int
    num_dense_layers: int
    num_moe_layers: int
    num_routed_experts: int
    top_k: int
    layers: tuple[LayerParams, ...] = ()
    mtp: int = 0  # multi-token-prediction layers: counted apart, not in total
    vision: int = 0  # vision tower + projector: counted apart, loaded beside the model

    @property
    def num_layers(self) -> int:
        return self.num_dense_layers + self.num_moe_layers

    @property
    def routed_experts_per_layer(self) -> int:
        return self.routed_expert * self.num_routed_experts

    @property
    def dense_layer(self) -> int:
        """All parameters of one dense full-attention decoder layer."""
        return self.attention_per_layer + self.norms_per_layer + self.dense_mlp_per_layer

    @property
    def moe_layer(self) -> int:
        """All parameters of one MoE full-attention decoder layer (every routed expert)."""
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
        return sum(lp.routed for lp in self.layers)

    @property
    def total(self) -> int:
        return self.non_layer + sum(lp.total for lp in self.layers)

    @property
    def active(self) -> int:
        """Parameters one token touches: top-k routed experts + shared experts + everything else.

        Includes the embedding row lookup's table (the Qwen/Mistral convention for "active").
        """
        return self.non_layer + sum(lp.active for lp in self.layers)

    @property
    def active_without_embedding(self) -> int:
        """`active` minus the input embedding table (DeepSeek's convention; a lookup is not a matmul).

        This is also the right count for FLOPs per token (2 * this), since the LM head is a matmul.
        """
        return self.active - self.embedding


def is_moe_layer(cfg: ModelConfig, layer_index: int) -> bool:
    """The config's MoE layers (read per family), else the DeepSeek rule: from `first_k_dense_layers`
    on, every `moe_layer_freq`-th layer."""
    if not cfg.is_moe:
        return False
    if cfg.moe_layer_indices is not None:
        return layer_index in cfg.moe_layer_indices
    if layer_index < cfg.first_k_dense_layers:
        return False
    return layer_index % max(cfg.moe_layer_freq, 1) == 0


def attention_params(cfg: ModelConfig) -> int:
    """One layer's attention: projections, biases, sinks, q/k norms, and MLA's low-rank layernorms."""
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
    q_out = 2 * q_width if cfg.attn_output_gate else q_width  # Qwen3-Next: q_proj also emits the gate
    proj = d * q_out + 2 * d * kv_width + q_width * d
    bias = q_width + 2 * kv_width if cfg.attention_bias else 0  # q/k/v biases
    if cfg.attention_out_bias:
        bias += d
    sinks = h if cfg.attention_sinks else 0
    norms = 2 * cfg.head_dim if cfg.qk_norm else 0
    return proj + bias + sinks + norms


def linear_attention_params(cfg: ModelConfig) -> int:
    """One Gated DeltaNet layer (Qwen3-Next): in_proj_qkvz d -> 2 key + 2 value dims, in_proj_ba
    d -> 2 value heads, a depthwise conv over q, k, v (no bias), dt_bias and A_log per value head,
    a gated RMSNorm over one value head, out_proj value -> d."""
    la = cfg.linear_attention
    if la is None:
        return 0
    d = cfg.hidden_size
    conv_dim = 2 * la.key_dim + la.value_dim
    return (d * (2 * la.key_dim + 2 * la.value_dim) + d * 2 * la.num_value_heads
            + conv_dim * la.conv_kernel + 2 * la.num_value_heads + la.value_head_dim + la.value_dim * d)


def mamba_params(cfg: ModelConfig) -> int:
    """One Mamba-1 mixer (Jamba): in_proj d -> 2 d_inner, a depthwise conv (+ bias), x_proj
    d_inner -> dt_rank + 2 d_state, dt_proj dt_rank -> d_inner (+ bias), A_log and D, out_proj, and
    Jamba's dt/B/C norms."""
    m = cfg.mamba
    if m is None:
        return 0
    d, di = cfg.hidden_size, m.inner_size
    in_proj = d * 2 * di + (2 * di if m.proj_bias else 0)
    conv = di * m.conv_kernel + (di if m.conv_bias else 0)
    x_proj = di * (m.dt_rank + 2 * m.state_size)
    dt_proj = m.dt_rank * di + di
    out = di * d + (d if m.proj_bias else 0)
    norms = m.dt_rank + 2 * m.state_size if m.inner_norms else 0
    return in_proj + conv + x_proj + dt_proj + di * m.state_size + di + out + norms


def _mixer_params(cfg: ModelConfig, kind: str) -> int:
    if kind == LINEAR:
        return linear_attention_params(cfg)
    if kind == MAMBA:
        return mamba_params(cfg)
    return attention_params(cfg)


@functools.lru_cache(maxsize=16)  # the planner asks once per layout, for the same model
def count_params(cfg: ModelConfig) -> ParamCounts:
    d = cfg.hidden_size
    embedding = cfg.vocab_size * d
    expert_bias = (2 * cfg.moe_intermediate_size + d) if cfg.expert_bias else 0
    routed_expert = 3 * d * cfg.moe_intermediate_size + expert_bias if cfg.is_moe else 0
    shared = 3 * d * cfg.shared_expert_intermediate_size if cfg.is_moe else 0
    if cfg.shared_expert_gate:
        shared += d
    router = d * cfg.num_routed_experts + (cfg.num_routed_experts if cfg.router_bias else 0)
    norms = cfg.norms_per_layer * d
    dense_mlp = 3 * d * cfg.intermediate_size
    layers = []
    for i in range(cfg.num_layers):
        kind = cfg.layer_kind(i)
        moe = is_moe_layer(cfg, i)
        layers.append(LayerParams(
            kind=kind, moe=moe, mixer=_mixer_params(cfg, kind),
            mlp=shared if moe else dense_mlp,
            routed=routed_expert * cfg.num_routed_experts if moe else 0,
            routed_active=routed_expert * cfg.num_experts_per_token if moe else 0,
            small=norms + (router if moe else 0)))
    num_moe = sum(1 for lp in layers if lp.moe)
    # An MTP module: one more decoder layer of the model's last kind, its two input norms, the d x 2d
    # projection joining embedding and hidden state, and a shared-head norm (DeepSeek-V3 sec. 2.2).
    mtp = cfg.mtp_layers * (layers[-1].total + 2 * d * d + 3 * d) if layers else 0
    return ParamCounts(
        embedding=embedding,
        lm_head=0 if cfg.tie_word_embeddings else embedding,
        attention_per_layer=attention_params(cfg),
        dense_mlp_per_layer=dense_mlp,
        routed_expert=routed_expert,
        shared_experts_per_layer=shared,
        router_per_layer=router if cfg.is_moe else 0,
        norms_per_layer=norms,
        final_norm=d,
        num_dense_layers=cfg.num_layers - num_moe,
        num_moe_layers=num_moe,
        num_routed_experts=cfg.num_routed_experts,
        top_k=cfg.num_experts_per_token,
        layers=tuple(layers),
        mtp=mtp,
        vision=cfg.vision_params,
    )


def layer_params(counts: ParamCounts, layer_index: int, cfg: ModelConfig | None = None) -> int:
    """Parameters of decoder layer `layer_index` (0-based), for splitting layers into PP stages.
    Embedding, LM head and final norm are not included: add them to the first/last stage."""
    if not 0 <= layer_index < counts.num_layers:
        raise IndexError(f"layer {layer_index} out of range 0..{counts.num_layers - 1}")
    return counts.layers[layer_index].total


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
