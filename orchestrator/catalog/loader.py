"""Load model presets (HF config.json) and GPU presets (gpus.yaml) into the frozen catalog types."""

from __future__ import annotations

import difflib
import json
from dataclasses import fields, replace
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from orchestrator.catalog.constants import check_constant, check_number, flatten_constants
from orchestrator.catalog.types import (
    GPU_CONSTANTS,
    LINK_CONSTANTS,
    LINKS,
    GPUSpec,
    LinkSpec,
    ModelConfig,
)
from orchestrator.errors import SpecError
from orchestrator.spec.files import MAX_DATA_FILE_BYTES, read_user_text

_CATALOG_DIR = Path(__file__).resolve().parent
_MODELS_DIR = _CATALOG_DIR / "models"
_GPUS_FILE = _CATALOG_DIR / "gpus.yaml"


def _unknown(kind: str, name: str, known: list[str]) -> SpecError:
    close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return SpecError(f"unknown {kind} {name!r}{hint}; known: {', '.join(known)}")


# ----------------------------------------------------------------------------- models


def model_names() -> list[str]:
    """Names of the bundled model presets, sorted."""
    return sorted(p.stem for p in _MODELS_DIR.glob("*.json"))


def _first(d: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        if d.get(k) is not None:
            return d[k]
    return None


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


def model_from_hf_config(d: dict[str, Any], name: str, where: str | None = None) -> ModelConfig:
    """Map an HF config.json dict (Llama, Qwen2, Qwen3(-MoE), Mixtral, DeepSeek-V2/V3) to a ModelConfig.

    `where` names the source in error messages (defaults to `name`).
    """
    where = where or name
    if not isinstance(d, dict):
        raise SpecError(f"{where}: config must be a JSON object")

    def req(*keys: str) -> int:
        return _int_field(d, where, keys, required=True)

    def opt(*keys: str, default: int = 0) -> int:
        return _int_field(d, where, keys, required=False, default=default, allow_zero=True)

    num_layers = req("num_hidden_layers", "n_layer", "num_layers")
    hidden = req("hidden_size", "n_embd", "d_model")
    heads = req("num_attention_heads", "n_head")
    kv_heads = _int_field(d, where, ("num_key_value_heads", "num_kv_heads"), required=False, default=heads)
    vocab = req("vocab_size")
    max_pos = req("max_position_embeddings", "max_seq_len", "n_positions")

    experts = opt("n_routed_experts", "num_local_experts", "num_experts")
    top_k = opt("num_experts_per_tok", "moe_topk")
    moe_inter = opt("moe_intermediate_size")
    # A dense intermediate_size is needed unless every layer is MoE.
    first_dense = opt("first_k_dense_replace")
    if experts and "intermediate_size" not in d and first_dense == 0:
        inter = 0
    else:
        inter = req("intermediate_size", "ffn_dim", "n_inner")
    if experts:
        if top_k == 0:
            raise SpecError(f"{where}: MoE config (experts={experts}) missing field 'num_experts_per_tok'")
        if top_k > experts:
            raise SpecError(f"{where}: num_experts_per_tok={top_k} exceeds the {experts} routed experts")
        if moe_inter == 0:
            # Mixtral: each expert is a full-width MLP.
            moe_inter = inter
        if moe_inter == 0:
            raise SpecError(f"{where}: MoE config missing field 'moe_intermediate_size'")

    n_shared = opt("n_shared_experts")
    shared_inter = opt("shared_expert_intermediate_size")
    if shared_inter and not n_shared:
        n_shared = 1  # Qwen2-MoE: one shared expert of the given width
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

    model_type = str(d.get("model_type", ""))
    bias = d.get("attention_bias")
    attention_bias = bool(bias) if bias is not None else model_type == "qwen2"
    moe_freq = _int_field(d, where, ("moe_layer_freq", "decoder_sparse_step"), required=False, default=1)

    return ModelConfig(
        name=name,
        num_layers=num_layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=vocab,
        tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
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
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(read_user_text(path, max_bytes=MAX_DATA_FILE_BYTES, example="a config.json"))
    except json.JSONDecodeError as e:
        raise SpecError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from e
    if not isinstance(data, dict):
        raise SpecError(f"{path}: config must be a JSON object")
    return data


def load_model(name_or_path: str) -> ModelConfig:
    """A preset name (case-insensitive), a path to a config.json, or a directory holding one."""
    key = name_or_path.strip().lower()
    names = model_names()
    if key in names:
        return model_from_hf_config(_read_json(_MODELS_DIR / f"{key}.json"), key)
    path = Path(name_or_path).expanduser()
    try:
        is_dir, is_file = path.is_dir(), path.is_file()
    except OSError as exc:  # a name too long for a path, a loop of links: not a file, say so
        shown = name_or_path if len(name_or_path) <= 60 else name_or_path[:57] + "..."
        raise SpecError(f"{shown!r}: neither a catalog model nor a readable path ({exc.strerror}); "
                        f"known: {', '.join(names)} (orch catalog), or a config.json path") from None
    if is_dir:
        path = path / "config.json"
        if not path.is_file():
            raise SpecError(f"{path.parent}: directory has no config.json")
        is_file = True
    if is_file:
        stem = path.parent.name if path.name == "config.json" else path.stem
        return model_from_hf_config(_read_json(path), stem or str(path), where=str(path))
    if "/" in name_or_path or key.endswith(".json"):
        raise SpecError(f"{name_or_path}: no such file (give a config.json or a directory holding one)")
    raise _unknown("model", name_or_path, names)


# ----------------------------------------------------------------------------- GPUs

_GPU_FLOAT_FIELDS = tuple(k for k in GPU_CONSTANTS if k != "gpus_per_node")
_GPU_FIELDS = {f.name for f in fields(GPUSpec)}


@cache
def _gpu_table() -> dict[str, dict[str, Any]]:
    raw = yaml.load(_GPUS_FILE.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    table = raw.get("gpus") if isinstance(raw, dict) else None
    if not isinstance(table, dict):
        raise SpecError(f"{_GPUS_FILE}: expected a top-level 'gpus:' mapping")
    return table


@cache
def _gpu_aliases() -> dict[str, str]:
    out: dict[str, str] = {}
    for name, entry in _gpu_table().items():
        out[name] = name
        for alias in entry.get("aliases", []) or []:
            out[str(alias).lower()] = name
    return out


def gpu_names() -> list[str]:
    """Canonical GPU preset names, sorted (aliases not included)."""
    return sorted(_gpu_table())


def canonical_gpu(name: str) -> str:
    """The preset name behind a name or alias (case-insensitive)."""
    canonical = _gpu_aliases().get(name.strip().lower())
    if canonical is None:
        raise _unknown("GPU", name, gpu_names())
    return canonical


def _link(value: Any, where: str) -> LinkSpec:
    if isinstance(value, LinkSpec):
        return value
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected a mapping with bandwidth_bytes_per_s and latency_s")
    unknown = set(value) - {"name", *LINK_CONSTANTS}
    if unknown:
        raise SpecError(f"{where}: unknown field {sorted(unknown)[0]!r}")
    for key in ("bandwidth_bytes_per_s", "latency_s"):
        if key not in value:
            raise SpecError(f"{where}: missing field {key!r}")
    ar = value.get("allreduce_latency_s")
    return LinkSpec(
        name=str(value.get("name", where.rsplit(".", 1)[-1])),
        bandwidth_bytes_per_s=check_number(value["bandwidth_bytes_per_s"], f"{where}.bandwidth_bytes_per_s",
                                      allow_zero=False),
        latency_s=check_number(value["latency_s"], f"{where}.latency_s"),
        allreduce_latency_s=None if ar is None else check_number(ar, f"{where}.allreduce_latency_s"),
    )


def _gpu_from_entry(name: str, entry: dict[str, Any], where: str) -> GPUSpec:
    required = ("memory_bytes", "hbm_bytes_per_s", "bf16_flops_per_s", "fp8_flops_per_s",
                "gpus_per_node", "intra_node", "inter_node")
    for key in required:
        if key not in entry:
            raise SpecError(f"{where}: missing field {key!r}")
    unknown = set(entry) - _GPU_FIELDS - {"aliases"}
    if unknown:
        raise SpecError(f"{where}: unknown field {sorted(unknown)[0]!r}")
    nums = {k: check_constant(k, entry[k], f"{where}.{k}") for k in _GPU_FLOAT_FIELDS if k in entry}
    per_node = entry["gpus_per_node"]
    if isinstance(per_node, bool) or not isinstance(per_node, int | float) or per_node <= 0 \
            or per_node != int(per_node):
        raise SpecError(f"{where}.gpus_per_node: must be a positive integer, got {per_node!r}")
    return GPUSpec(
        name=name,
        gpus_per_node=int(per_node),
        intra_node=_link(entry["intra_node"], f"{where}.intra_node"),
        inter_node=_link(entry["inter_node"], f"{where}.inter_node"),
        source=str(entry.get("source", "vendor datasheet")),
        profile=str(entry.get("profile", "")),
        **nums,
    )


def load_gpu(name: str, overrides: dict[str, Any] | None = None, *, profile: dict[str, float] | None = None,
             profile_name: str = "") -> GPUSpec:
    """A GPU preset by name or alias (case-insensitive), then a calibration profile's constants, then
    the spec's overrides (which win). Both take the keys of `override_keys()`, links nested or dotted.
    """
    canonical = canonical_gpu(name)
    entry = dict(_gpu_table()[canonical])
    where = f"{_GPUS_FILE.name}:{canonical}"
    base = _gpu_from_entry(canonical, entry, where)
    if not overrides and not profile:
        return base
    layers = [(f"calibrated ({profile_name or 'profile'})", flatten_constants(profile or {}, "calibration")),
              ("overridden", flatten_constants(overrides or {}, "hardware.overrides"))]
    merged: dict[str, Any] = {**entry}
    for link in LINKS:
        merged[link] = dict(entry[link])
    notes = []
    for label, flat in layers:
        for key, value in flat.items():
            if "." in key:
                link, sub = key.split(".", 1)
                merged[link][sub] = value
            else:
                merged[key] = int(value) if key == "gpus_per_node" else value
        if flat:
            notes.append(f"{label}: {', '.join(sorted(flat))}")
    spec = _gpu_from_entry(canonical, merged, f"{canonical} ({' and '.join(n.split(':')[0] for n in notes)})")
    return replace(spec, source=f"{base.source}; " + "; ".join(notes), profile=profile_name)
