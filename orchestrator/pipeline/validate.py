"""`orch validate`: everything `orch plan`, `compile` and `sweep` would refuse about a spec, found before
any of them runs: catalog names (with the known ones), config and statistics files, engine argv, weights."""

from __future__ import annotations

from pathlib import Path

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.engines.base import check_extra_args
from orchestrator.engines.from_spec import engine_options, placement
from orchestrator.errors import SpecError
from orchestrator.plan.experts import load_expert_stats
from orchestrator.spec.load import LoadedSpec, load_spec_lines
from orchestrator.spec.models import SweepSpec


def check_spec(loaded: LoadedSpec, *, weights: bool = True) -> None:
    """Raise the first problem as `file:line: field: message` (SpecError, exit code 2)."""
    spec = loaded.spec
    model_field = "model.name" if spec.model.name is not None else "model.config_path"
    try:
        cfg = load_model(spec.model.name or spec.model.config_path or "")
    except SpecError as exc:
        raise loaded.error(model_field, str(exc)) from None
    try:
        load_gpu(spec.hardware.gpu)
    except SpecError as exc:
        raise loaded.error("hardware.gpu", str(exc)) from None
    try:
        load_gpu(spec.hardware.gpu, dict(spec.hardware.overrides))
    except SpecError as exc:
        raise loaded.error("hardware.overrides", str(exc)) from None
    if spec.model.expert_stats_path is not None and cfg.is_moe:
        try:
            load_expert_stats(spec.model.expert_stats_path, num_experts=cfg.num_routed_experts)
        except SpecError as exc:
            raise loaded.error("model.expert_stats_path", str(exc)) from None
    try:
        check_extra_args(tuple(spec.engine.extra_args))
    except SpecError as exc:
        raise loaded.error("engine.extra_args", str(exc)) from None
    if weights:
        try:
            engine_options(spec)  # the weights a real engine loads (model.path)
        except SpecError as exc:
            raise loaded.error("model.path", str(exc)) from None
    try:
        placement(spec)
    except SpecError as exc:
        raise loaded.error("hardware", str(exc)) from None


def load_checked_spec(path: str | Path, *, weights: bool = False) -> SweepSpec:
    """load_spec, then check_spec: catalog and file problems name the spec file and line too.

    weights=False skips the real engine's weights (plan and simulate load none; compile and sweep may
    override the engine and check them for the one they use).
    """
    loaded = load_spec_lines(path)
    check_spec(loaded, weights=weights)
    return loaded.spec
