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
from orchestrator.catalog.hf_config import model_from_hf_config
from orchestrator.catalog.types import (
    GPU_CONSTANTS,
    LINK_CONSTANTS,
    LINKS,
    GPUSpec,
    LinkSpec,
    ModelConfig,
)

__all__ = ["canonical_gpu", "gpu_names", "load_gpu", "load_model", "model_from_hf_config", "model_names"]
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
        compute_capability=str(entry.get("compute_capability", "")),
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
