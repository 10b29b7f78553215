"""An HF config.json becomes a ModelConfig: shapes, per-layer kinds, MoE placement, checkpoint format.

Multimodal configs nest the language model under `text_config` (Llama-4, Gemma-3); it is read from
there and the vision tower is counted apart (`vision_params`). Families and their layer rules are in
catalog/hf_layers.py, weight formats in catalog/quant.py.
"""

from __future__ import annotations

from typing import Any

from orchestrator.catalog.hf_layers import (
    FAMILY_DEFAULTS,
    family_of,
    layer_kinds,
    mamba_dt_rank,
    moe_layer_indices,
    mtp_layers,
    vision_params,
)
from orchestrator.catalog.quant import read_quantization
from orchestrator.catalog.types import (
    CHUNKED,
    LINEAR,
    MAMBA,
    SLIDING,
    LinearAttentionShape,
    MambaShape,
    ModelConfig,
)
from orchestrator.errors import SpecError

_DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}


def _first(d: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        if d.get(k) is not None:
            return d[k]
    return None


MAX_LAYERS = 1024  # decoder layers; Llama-3.1-405B has 126, DeepSeek-V3 61


def _int_field(d: dict[str, Any], where: str, keys: tuple[str, ...], *, required: bool, default: int = 0,
               allow_zero: bool = False) -> int:
    value = _first(d, keys)
    if value is None:
        if required:
            raise SpecError(f"{where}: missing field {keys[0]!r}")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{where}: field {keys[0]!r} must be an integer, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise SpecError(f"{where}: field {keys[0]!r} must be positive, got {value}")
    return value


def _text_part(d: dict[str, Any], where: str) -> tuple[dict[str, Any], dict[str, Any] | None, str]:
    """(the language model's fields, the vision config, where to name in errors)."""
    text = d.get("text_config")
    if text is None:
        return d, None, where
    if not isinstance(text, dict):
        raise SpecError(f"{where}: field 'text_config' must be an object")
    # Fields the wrapper holds for the language model (tie_word_embeddings, quantization_config).
    merged = {**{k: v for k, v in d.items() if k in ("tie_word_embeddings", "quantization_config")}, **text}
    vision = d.get("vision_config")
    return merged, vision if isinstance(vision, dict) else None, f"{where}: text_config"


def model_from_hf_config(d: dict[str, Any], name: str, where: str | None = None) -> ModelConfig:
    """Map an HF config.json dict to a ModelConfig; `where` names the source in errors (default `name`).

    Families read: Llama/Mistral/Mixtral, Qwen2/2.5/3(-MoE), Qwen3-Next, DeepSeek-V2/V3, Kimi-K2,
    GLM-4.5, gpt-oss, Gemma-2/3, Llama-4, Jamba. Anything else is a one-line SpecError.
    """
    where = where or name
    if not isinstance(d, dict):
        raise SpecError(f"{where}: config must be a JSON object")
    text, vision, where = _text_part(d, where)
    model_type = str(text.get("model_type") or d.get("model_type") or "")
    family = family_of(model_type, text, where)
    if model_type in ("llama4",) and text is not d:
        model_type = "llama4_text"  # a nested Llama-4 text_config sometimes repeats the wrapper's type
    if model_type == "gemma3" and text is not d:
        model_type = "gemma3_text"
    text = {**FAMILY_DEFAULTS.get(model_type, {}), **text}

    def req(*keys: str) -> int:
        return _int_field(text, where, keys, required=True)

    def opt(*keys: str, default: int = 0) -> int:
        return _int_field(text, where, keys, required=False, default=default, allow_zero=True)

    num_layers = req("num_hidden_layers", "n_layer", "num_layers")
    if num_layers > MAX_LAYERS:  # the cost model walks the layers: 1e9 of them would never finish
        raise SpecError(f"{where}: field 'num_hidden_layers' is {num_layers:,}; orch reads models of up to "
                        f"{MAX_LAYERS:,} layers (the largest published have about 130): check the config")
    hidden = req("hidden_size", "n_embd", "d_model")
    heads = req("num_attention_heads", "n_head")
    kv_heads = _int_field(text, where, ("num_key_value_heads", "num_kv_heads"), required=False, default=heads)
    vocab = req("vocab_size")
    max_pos = req("max_position_embeddings", "max_seq_len", "n_positions")

    experts = opt("n_routed_experts", "num_local_experts", "num_experts")
    top_k = opt("num_experts_per_tok", "experts_per_token", "moe_topk")
    moe_inter = opt("moe_intermediate_size")
    first_dense = opt("first_k_dense_replace")
    if family == "llama4":
        # intermediate_size is one expert's width; intermediate_size_mlp the dense layers'.
        moe_inter = req("intermediate_size")
        inter = opt("intermediate_size_mlp")
    elif experts and "intermediate_size" not in text and first_dense == 0:
        inter = 0
    else:
        inter = req("intermediate_size", "ffn_dim", "n_inner")
    moe_layers = moe_layer_indices(text, family, num_layers, experts, where)
    if experts:
        if top_k == 0:
            raise SpecError(f"{where}: MoE config (experts={experts}) missing field 'num_experts_per_tok'")
        if top_k > experts:
            raise SpecError(f"{where}: num_experts_per_tok={top_k} exceeds the {experts} routed experts")
        if moe_inter == 0:
            moe_inter = inter  # Mixtral, gpt-oss, Jamba: each expert is a full-width MLP
        if moe_inter == 0:
            raise SpecError(f"{where}: MoE config missing field 'moe_intermediate_size'")
        if len(moe_layers) < num_layers and inter == 0:
            dense = num_layers - len(moe_layers)
            raise SpecError(f"{where}: {dense} dense layers but no 'intermediate_size'")

    n_shared = opt("n_shared_experts")
    shared_inter = opt("shared_expert_intermediate_size")
    if shared_inter and not n_shared:
        n_shared = 1  # Qwen2-MoE / Qwen3-Next: one shared expert of the given width
    if family == "llama4" and experts:
        n_shared, shared_inter = 1, moe_inter  # one shared expert of the routed width
    if n_shared and not shared_inter:
        shared_inter = n_shared * moe_inter  # DeepSeek: n_shared experts of the routed width

    kv_lora = opt("kv_lora_rank")
    q_lora = opt("q_lora_rank")
    rope_dim = opt("qk_rope_head_dim")
    nope_dim = opt("qk_nope_head_dim")
    v_dim = opt("v_head_dim")
    if kv_lora:
        mla_dims = (("qk_rope_head_dim", rope_dim), ("qk_nope_head_dim", nope_dim), ("v_head_dim", v_dim))
        for key, val in mla_dims:
            if val == 0:
                raise SpecError(f"{where}: MLA config (kv_lora_rank={kv_lora}) missing field {key!r}")
        head_dim = nope_dim + rope_dim
    else:
        head_dim = opt("head_dim")
        if head_dim == 0:
            if hidden % heads:
                raise SpecError(f"{where}: no 'head_dim' and hidden_size {hidden} is not divisible by "
                                f"num_attention_heads {heads}")
            head_dim = hidden // heads
    if heads % kv_heads:
        raise SpecError(f"{where}: num_attention_heads {heads} not divisible by "
                        f"num_key_value_heads {kv_heads}")

    kinds = layer_kinds(text, family, num_layers, where)
    bias = text.get("attention_bias")
    # Qwen2(-MoE) always has q/k/v biases and no o_proj bias (no config field says so).
    attention_bias = bool(bias) if bias is not None else model_type in ("qwen2", "qwen2_moe")
    moe_freq = _int_field(text, where, ("moe_layer_freq",), required=False, default=1)
    window = opt("sliding_window") if SLIDING in kinds else 0
    chunk = opt("attention_chunk_size") if CHUNKED in kinds else 0
    return ModelConfig(
        name=name,
        num_layers=num_layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=vocab,
        tie_word_embeddings=bool(text.get("tie_word_embeddings", False)),
        max_position_embeddings=max_pos,
        attention_bias=attention_bias,
        num_routed_experts=experts,
        num_experts_per_token=top_k if experts else 0,
        moe_intermediate_size=moe_inter if experts else 0,
        num_shared_experts=n_shared if experts else 0,
        shared_expert_intermediate_size=shared_inter if experts else 0,
        first_k_dense_layers=min(first_dense, num_layers) if experts else 0,
        moe_layer_freq=moe_freq,
        q_lora_rank=q_lora if kv_lora else 0,
        kv_lora_rank=kv_lora,
        qk_rope_head_dim=rope_dim if kv_lora else 0,
        qk_nope_head_dim=nope_dim if kv_lora else 0,
        v_head_dim=v_dim if kv_lora else 0,
        model_type=model_type,
        layer_kinds=kinds if any(k != "full" for k in kinds) else (),
        sliding_window=window,
        attention_chunk_size=chunk,
        moe_layer_indices=moe_layers if experts else None,
        attention_out_bias=attention_bias and family in ("llama", "gpt_oss", "llama4"),
        attention_sinks=family == "gpt_oss",
        qk_norm=model_type in ("qwen3", "qwen3_moe", "qwen3_next", "gemma3_text")
        or (bool(text.get("use_qk_norm")) and family == "deepseek"),
        attn_output_gate=family == "qwen3_next" or bool(text.get("attn_output_gate")),
        norms_per_layer=4 if family == "gemma" else 2,
        expert_bias=family == "gpt_oss",
        router_bias=family == "gpt_oss" or model_type == "glm4_moe"
        or (family == "deepseek" and text.get("topk_method") == "noaux_tc"),
        shared_expert_gate=model_type in ("qwen2_moe", "qwen3_next") and bool(shared_inter),
        linear_attention=_linear(text, where) if LINEAR in kinds else None,
        mamba=_mamba(text, hidden, where) if MAMBA in kinds else None,
        mtp_layers=mtp_layers(text),
        vision_params=vision_params(vision, hidden),
        quantization=read_quantization(text, where),
    )


def _ssm_bytes(d: dict[str, Any], where: str) -> float:
    value = d.get("mamba_ssm_dtype")
    if value is None:
        return 0.0
    if value not in _DTYPE_BYTES:
        raise SpecError(f"{where}: field 'mamba_ssm_dtype' {value!r}: expected one of "
                        f"{', '.join(_DTYPE_BYTES)}")
    return _DTYPE_BYTES[value]


def _linear(d: dict[str, Any], where: str) -> LinearAttentionShape:
    def need(key: str) -> int:
        return _int_field(d, where, (key,), required=True)

    return LinearAttentionShape(
        num_key_heads=need("linear_num_key_heads"), num_value_heads=need("linear_num_value_heads"),
        key_head_dim=need("linear_key_head_dim"), value_head_dim=need("linear_value_head_dim"),
        conv_kernel=need("linear_conv_kernel_dim"), ssm_state_bytes_per_value=_ssm_bytes(d, where))


def _mamba(d: dict[str, Any], hidden: int, where: str) -> MambaShape:
    expand = _int_field(d, where, ("mamba_expand",), required=False, default=2)
    try:
        dt_rank = mamba_dt_rank(d, hidden)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None
    return MambaShape(
        inner_size=expand * hidden,
        state_size=_int_field(d, where, ("mamba_d_state",), required=False, default=16),
        conv_kernel=_int_field(d, where, ("mamba_d_conv",), required=False, default=4),
        dt_rank=dt_rank,
        conv_bias=bool(d.get("mamba_conv_bias", True)),
        proj_bias=bool(d.get("mamba_proj_bias", False)),
        inner_norms=True,  # Jamba's mixer normalises dt, B and C (JambaMambaMixer)
        ssm_state_bytes_per_value=_ssm_bytes(d, where),
    )
