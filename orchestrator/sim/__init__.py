"""The simulated engine: a continuous-batching model in virtual time and an OpenAI server on top."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.faces import lazy_face

if TYPE_CHECKING:
    from orchestrator.sim.pd_run import DisaggSimPoint as DisaggSimPoint
    from orchestrator.sim.pd_run import simulate_pair_point as simulate_pair_point
    from orchestrator.sim.prefix_cache import CacheStats as CacheStats
    from orchestrator.sim.prefix_cache import PrefixCache as PrefixCache
    from orchestrator.sim.run import SimPoint as SimPoint
    from orchestrator.sim.run import prefix_cache_of as prefix_cache_of
    from orchestrator.sim.run import simulate_point as simulate_point
    from orchestrator.sim.server import main as main
    from orchestrator.sim.sessions import SessionsRun as SessionsRun
    from orchestrator.sim.sessions import simulate_sessions as simulate_sessions

__getattr__, __all__ = lazy_face(__name__, {
    "prefix_cache": ("CacheStats", "PrefixCache",),
    "run": ("SimPoint", "prefix_cache_of", "simulate_point",),
    "server": ("main",),
    "pd_run": ("DisaggSimPoint", "simulate_pair_point",),
    "sessions": ("SessionsRun", "simulate_sessions",),
})  # fmt: skip
