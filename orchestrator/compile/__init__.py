"""Compile: a spec and a candidate become the engine's LaunchPlan (`prepare`, the one launch plan every
caller uses), and a LaunchPlan becomes deployable text: shell scripts, JSON, Kubernetes objects, Helm
values, Ray Serve configs. Pure: no cluster access."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.compile.prepare import (
    Compiled,
    engine_options,
    is_cpu,
    model_ref,
    placement,
    prepare,
    secret_env,
    sim_options,
)
from orchestrator.compile.shell import node_script, to_shell
from orchestrator.engines import LaunchPlan


def to_json(
    plan: LaunchPlan, nodes: Sequence[str] | None = None, warnings: Sequence[str] = ()
) -> dict[str, Any]:
    """The plan as a JSON-ready dict; with the node addresses and any warnings when given."""
    out = plan.to_dict()
    if nodes is not None:
        out["nodes"] = list(nodes)
    if warnings:
        out["warnings"] = list(warnings)
    return out


__all__ = [
    "Compiled", "engine_options", "is_cpu", "model_ref", "node_script", "placement", "prepare", "secret_env",
    "sim_options", "to_json", "to_shell",
]
