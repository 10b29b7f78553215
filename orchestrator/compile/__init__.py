"""LaunchPlan -> deployable text: shell scripts, JSON, Kubernetes objects. Pure: no cluster access."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from orchestrator.compile.shell import node_script, to_shell
from orchestrator.engines import ENGINES, get_engine
from orchestrator.engines.base import Engine, LaunchPlan, Placement
from orchestrator.engines.from_spec import engine_options, placement
from orchestrator.errors import OrchError
from orchestrator.layout import Layout
from orchestrator.spec.models import SweepSpec


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


@dataclass(frozen=True)
class Compiled:
    plan: LaunchPlan
    placement: Placement
    warnings: tuple[str, ...]  # it compiles, but will not serve as expected (printed, not fatal)


def _engine(name: str) -> Engine:
    if name == "sim" and "sim" not in ENGINES:
        # The simulator registers itself when its module is imported; it may not have landed yet.
        for module in ("orchestrator.engines.sim", "orchestrator.sim"):
            try:
                importlib.import_module(module)
            except ModuleNotFoundError:
                continue
        if "sim" not in ENGINES:
            raise OrchError("engine 'sim' is not available in this build yet; use --engine vllm or sglang")
    return get_engine(name)


def compile_layout(
    spec: SweepSpec,
    layout: Layout,
    engine_name: str | None = None,
    node_addrs: tuple[str, ...] | None = None,
    num_redundant_experts: int | None = None,
    executor: Literal["mp", "ray"] | None = None,
    a2a_backend: str | None = None,
    served_model_name: str | None = None,
) -> Compiled:
    """The launch plan of one layout of a spec, for its engine (or engine_name), with warnings."""
    engine = _engine(engine_name or spec.engine.name)
    where = placement(spec, node_addrs)
    options = engine_options(
        spec, engine=engine.name, num_redundant_experts=num_redundant_experts, executor=executor,
        a2a_backend=a2a_backend,
    )
    if served_model_name:
        # The name clients ask for: a promoted layout keeps the one its run was measured with.
        options = replace(options, served_model_name=served_model_name)
    if engine.name == "sim":
        # As the sweep does: the simulated server needs the model shapes and hardware it models.
        from orchestrator.engines.sim import sim_args_from_spec

        options = replace(options, sim_args=sim_args_from_spec(spec))
    plan = engine.launch_plan(layout, options, where)
    notes = list(getattr(engine, "warnings", lambda _l, _p: [])(layout, where))
    notes += [r for r in engine.unsupported(layout, where) if r not in notes]
    return Compiled(plan=plan, placement=where, warnings=tuple(notes))


__all__ = ["Compiled", "compile_layout", "node_script", "to_json", "to_shell"]
