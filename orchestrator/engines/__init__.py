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
