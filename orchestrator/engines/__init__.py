"""The engines orch launches (vLLM, SGLang, and the simulated engine), each behind one Protocol.

An engine knows its own rules and nothing of a sweep: the settings it runs with where the spec is
silent (`resolve_settings`), what it cannot run, and its launch command. The planner asks it for the
settings, compile for the command; neither is imported here, so both may import this package.
"""

from __future__ import annotations

from orchestrator.catalog.types import GPUSpec, ModelConfig
from orchestrator.engines import sglang, sim, vllm
from orchestrator.engines.base import (
    PORT_STRIDE,
    Engine,
    EngineOptions,
    LaunchPlan,
    Placement,
    ProcessSpec,
    ReplicaPlan,
    ReplicaRole,
    SecretEnv,
    check_extra_args,
    secret_values,
)
from orchestrator.engines.pd_flags import (
    SGLANG_ROUTER,
    SGLANG_ROUTER_POLICIES,
    SIDE_PORT_OFFSET,
    PoolRole,
    orch_router_argv,
    router_process,
)
from orchestrator.engines.settings import EngineSettings, SettingsRequest
from orchestrator.engines.sim import SimOptions
from orchestrator.errors import SpecError

ENGINES: dict[str, Engine] = {e.name: e for e in (vllm.ENGINE, sglang.ENGINE, sim.ENGINE)}
#: Every engine's Prometheus metric names -> the fields orch reads (loadgen/engine_metrics.py).
METRIC_FIELDS: dict[str, str] = {
    name: field for e in ENGINES.values() for name, field in e.metrics.items()
}


def get_engine(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        known = ", ".join(sorted(ENGINES)) or "none registered"
        raise SpecError(f"unknown engine {name!r}; known: {known}") from None


def resolve_settings(engine: str, gpu: GPUSpec, model: ModelConfig,
                     request: SettingsRequest | None = None) -> EngineSettings:
    """The named engine's settings for this GPU and model: the request's values, its defaults elsewhere."""
    return get_engine(engine).resolve_settings(request or SettingsRequest(), gpu, model)


__all__ = [
    "ENGINES",
    "METRIC_FIELDS",
    "PORT_STRIDE",
    "SGLANG_ROUTER",
    "SGLANG_ROUTER_POLICIES",
    "SIDE_PORT_OFFSET",
    "Engine",
    "EngineOptions",
    "EngineSettings",
    "LaunchPlan",
    "Placement",
    "PoolRole",
    "ProcessSpec",
    "ReplicaPlan",
    "ReplicaRole",
    "SecretEnv",
    "SettingsRequest",
    "SimOptions",
    "check_extra_args",
    "get_engine",
    "orch_router_argv",
    "resolve_settings",
    "router_process",
    "secret_values",
]
