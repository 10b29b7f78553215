"""The simulated engine: a continuous-batching model in virtual time and an OpenAI server on top."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.faces import lazy_face

if TYPE_CHECKING:
    from orchestrator.sim.run import SimPoint as SimPoint
    from orchestrator.sim.run import simulate_point as simulate_point
    from orchestrator.sim.server import main as main

__getattr__, __all__ = lazy_face(__name__, {
    "run": ("SimPoint", "simulate_point",),
    "server": ("main",),
})  # fmt: skip
