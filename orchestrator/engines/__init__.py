"""Engine registry: name -> Engine. vLLM and SGLang modules register here as they land."""

from __future__ import annotations

from orchestrator.engines.base import Engine
from orchestrator.errors import SpecError

ENGINES: dict[str, Engine] = {}


def get_engine(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        known = ", ".join(sorted(ENGINES)) or "none registered"
        raise SpecError(f"unknown engine {name!r}; known: {known}") from None


def _register_builtin() -> None:
    # Imported here, after ENGINES exists, because the engine modules import from this package.
    from orchestrator.engines.sglang import ENGINE as sglang_engine
    from orchestrator.engines.vllm import ENGINE as vllm_engine

    for engine in (vllm_engine, sglang_engine):
        ENGINES[engine.name] = engine
    from orchestrator.engines.sim import ENGINE as sim_engine

    ENGINES[sim_engine.name] = sim_engine


_register_builtin()
