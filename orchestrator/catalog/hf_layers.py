"""Per-layer structure of an HF config: which kind each layer is, which layers are MoE, and the
families orch knows how to read. Rules follow the engines' model code (vLLM 0.32/0.33
vllm/model_executor/models/<family>.py) and transformers' configuration_<family>.py defaults.

An architecture whose layers orch cannot price is refused in one line naming the field that says
so; nothing falls back to "every layer is full attention" when the config says otherwise.
"""

from __future__ import annotations

import math
from typing import Any

from orchestrator.catalog.types import CHUNKED, FULL, LINEAR, MAMBA, SLIDING
from orchestrator.errors import SpecError

# model_type -> family. A config without model_type is read as a plain (Llama-like) decoder.
FAMILIES = {
    "llama": "llama", "mistral": "llama", "mixtral": "llama", "": "llama",
    "qwen2": "qwen2", "qwen2_moe": "qwen2", "qwen3": "qwen2", "qwen3_moe": "qwen2",
    "qwen3_next": "qwen3_next",
    "deepseek_v2": "deepseek", "deepseek_v3": "deepseek", "kimi_k2": "deepseek", "glm4_moe": "deepseek",
    "gpt_oss": "gpt_oss",
    "gemma2": "gemma", "gemma3": "gemma", "gemma3_text": "gemma",
    "llama4": "llama4", "llama4_text": "llama4",
    "jamba": "jamba",
}

# Fields that declare a layer structure orch does not price, and what they mean. A config carrying
# one is refused naming it (these families are not in FAMILIES either; the field makes the message
# say what is missing rather than just "unknown model_type").
UNMODELLED_FIELDS = {
    "hybrid_override_pattern": "a per-layer pattern of Mamba-2, attention and MLP-only blocks (Nemotron-H)",
    "attn_type_list": "lightning (linear) attention layers between softmax layers (MiniMax)",
    "layers_block_type": "Mamba-2 blocks between attention blocks",
    "attn_layer_indices": "Mamba-2 blocks between attention layers (Bamba)",
    "mamba_d_ssm": "parallel attention and Mamba-2 in every block (Falcon-H1)",
    "linear_attn_config": "KDA linear attention (Kimi Linear)",
    "index_topk": "a sparse-attention indexer (DeepSeek sparse attention)",
    "compress_ratios": "compressed KV per layer",
    "num_kv_shared_layers": "layers that reuse another layer's KV (Gemma-3n)",
}

_LAYER_TYPE_NAMES = {"full_attention": FULL, "sliding_attention": SLIDING, "chunked_attention": CHUNKED,
                     "linear_attention": LINEAR, "mamba": MAMBA}

# transformers' defaults for fields published configs leave out (configuration_<family>.py).
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {"vocab_size": 262208, "max_position_embeddings": 131072, "tie_word_embeddings": True,
                    "sliding_window_pattern": 6, "sliding_window": 4096},
    "gemma2": {"tie_word_embeddings": True},
    "llama4_text": {"interleave_moe_layer_step": 1, "no_rope_layer_interval": 4},
    "qwen3_next": {"full_attention_interval": 4},
}


def family_of(model_type: str, d: dict[str, Any], where: str) -> str:
    """The family of a model_type, or a one-line refusal naming the field that makes it unmodellable."""
    for key, meaning in UNMODELLED_FIELDS.items():
        if d.get(key) is not None:
            raise SpecError(f"{where}: field {key!r} declares {meaning}; orch cannot price these layers "
                            "(it models full, sliding-window, chunked, Gated-DeltaNet and Mamba-1 layers)")
    family = FAMILIES.get(model_type)
    if family is None:
        known = ", ".join(sorted(k for k in FAMILIES if k))
        raise SpecError(f"{where}: model_type {model_type!r} is an architecture orch cannot price; "
                        f"known: {known}")
    return family


def _int_list(d: dict[str, Any], key: str, where: str) -> list[int] | None:
    value = d.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise SpecError(f"{where}: field {key!r} must be a list of integers")
    return list(value)


def _positive(d: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = d.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SpecError(f"{where}: field {key!r} must be a positive integer, got {value!r}")
    return value


def layer_kinds(d: dict[str, Any], family: str, num_layers: int, where: str) -> tuple[str, ...]:
    """The kind of every layer. `layer_types` is authoritative where present (transformers >= 4.56 writes
    it); otherwise the family's own rule; otherwise full attention everywhere (vLLM's Llama/Mistral code
    takes a sliding window only from layer_types, so a bare `sliding_window` does not make one)."""
    kinds: list[str]
    raw = d.get("layer_types")
    if raw is not None:
        if not isinstance(raw, list) or len(raw) != num_layers:
            raise SpecError(f"{where}: field 'layer_types' must list one type per layer ({num_layers})")
        kinds = []
        for i, name in enumerate(raw):
            kind = _LAYER_TYPE_NAMES.get(str(name))
            if kind is None:
                raise SpecError(f"{where}: layer_types[{i}] {name!r} is a layer type orch cannot price; "
                                f"known: {', '.join(_LAYER_TYPE_NAMES)}")
            kinds.append(kind)
    elif family == "gemma":
        # Gemma-2: every other layer slides (even ones); Gemma-3: all but every pattern-th.
        if d.get("model_type") == "gemma2":
            kinds = [SLIDING if (i + 1) % 2 else FULL for i in range(num_layers)]
        else:
            pattern = _positive(d, "sliding_window_pattern", where, 6)
            kinds = [SLIDING if (i + 1) % pattern else FULL for i in range(num_layers)]
    elif family == "qwen2" and d.get("use_sliding_window"):
        start = d.get("max_window_layers", num_layers)
        kinds = [SLIDING if i >= start else FULL for i in range(num_layers)]
    elif family == "qwen3_next":
        interval = _positive(d, "full_attention_interval", where, 4)
        kinds = [LINEAR if (i + 1) % interval else FULL for i in range(num_layers)]
    elif family == "jamba":
        period = _positive(d, "attn_layer_period", where, 8)
        offset = d.get("attn_layer_offset", 4)
        kinds = [FULL if i % period == offset else MAMBA for i in range(num_layers)]
    else:
        kinds = [FULL] * num_layers
    if family == "llama4":
        kinds = _llama4_chunks(d, kinds, num_layers, where)
    if SLIDING in kinds and not d.get("sliding_window"):
        raise SpecError(f"{where}: sliding-window layers but no 'sliding_window' size")
    return tuple(kinds)


def _llama4_chunks(d: dict[str, Any], kinds: list[str], num_layers: int, where: str) -> list[str]:
    """Llama-4: RoPE layers attend within `attention_chunk_size` chunks, NoPE layers (no_rope_layers
    entry 0, every 4th by default) attend to the whole context (vLLM llama4.py: chunked local attention
    only where the layer uses RoPE)."""
    if not d.get("attention_chunk_size"):
        return kinds
    rope = _int_list(d, "no_rope_layers", where)
    if not rope:  # transformers: 1 (RoPE) unless (i + 1) % interval == 0
        interval = _positive(d, "no_rope_layer_interval", where, 4)
        rope = [int((i + 1) % interval != 0) for i in range(num_layers)]
    if len(rope) != num_layers:
        raise SpecError(f"{where}: field 'no_rope_layers' must have one entry per layer ({num_layers})")
    return [CHUNKED if rope[i] and kinds[i] == FULL else kinds[i] for i in range(num_layers)]


def moe_layer_indices(d: dict[str, Any], family: str, num_layers: int, experts: int,
                      where: str) -> tuple[int, ...]:
    """Which layers are MoE, by each family's rule (its vLLM model file)."""
    if not experts:
        return ()
    if family == "deepseek":  # deepseek_v2.py / glm4_moe.py: from first_k_dense_replace, every freq-th
        first = d.get("first_k_dense_replace", 0) or 0
        freq = d.get("moe_layer_freq", 1) or 1
        return tuple(i for i in range(num_layers) if i >= first and i % freq == 0)
    if family in ("qwen2", "qwen3_next"):  # qwen2_moe.py: not in mlp_only_layers, (i+1) % step == 0
        dense = set(_int_list(d, "mlp_only_layers", where) or [])
        step = d.get("decoder_sparse_step", 1) or 1
        return tuple(i for i in range(num_layers) if i not in dense and (i + 1) % step == 0)
    if family == "llama4":
        listed = _int_list(d, "moe_layers", where)
        if listed:
            return tuple(sorted(set(listed)))
        step = _positive(d, "interleave_moe_layer_step", where, 1)
        return tuple(range(step - 1, num_layers, step))
    if family == "jamba":
        period = _positive(d, "expert_layer_period", where, 2)
        offset = d.get("expert_layer_offset", 1)
        return tuple(i for i in range(num_layers) if i % period == offset)
    return tuple(range(num_layers))  # Mixtral, gpt-oss: every layer


def mtp_layers(d: dict[str, Any]) -> int:
    """Multi-token-prediction layers shipped beside the model (DeepSeek-V3, GLM-4.5, Qwen3.5)."""
    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
        value = d.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def vision_params(v: dict[str, Any] | None, text_hidden: int) -> int:
    """Parameters of a vision tower and its projector, counted as a generic ViT from `vision_config`:
    per layer four h x h projections with biases, a two-matrix MLP with biases and two LayerNorms; a
    patch embedding, learned positions, and one h x d projector into the language model. Stated apart
    from the language model (and loaded beside it); a few percent off any particular tower."""
    if not v:
        return 0
    h = v.get("hidden_size") or v.get("width") or 0
    f = v.get("intermediate_size") or 4 * h
    layers = v.get("num_hidden_layers") or v.get("depth") or 0
    if not (isinstance(h, int) and isinstance(f, int) and isinstance(layers, int)) or not h or not layers:
        return 0
    patch = v.get("patch_size") or 14
    image = v.get("image_size") or 0
    channels = v.get("num_channels") or 3
    per_layer = 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h
    positions = (image // patch) ** 2 * h if isinstance(image, int) and image else 0
    out_dim = v.get("vision_output_dim") or v.get("projector_output_dim") or h
    projector = int(out_dim) * text_hidden
    return layers * per_layer + channels * patch * patch * h + h + positions + projector


def mamba_dt_rank(d: dict[str, Any], hidden: int) -> int:
    """Jamba's `mamba_dt_rank`; "auto" is ceil(hidden / 16) (transformers JambaConfig)."""
    value = d.get("mamba_dt_rank", "auto")
    if value == "auto":
        return math.ceil(hidden / 16)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SpecError("field 'mamba_dt_rank' must be a positive integer or 'auto'")
    return value
