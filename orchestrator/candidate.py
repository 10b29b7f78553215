"""What a sweep judges: a candidate = a layout + the engine settings it runs with, under a readable name.

The planner, the simulator, compile, deploy, the store, the report and promote take this one value
between stages; nothing re-parses a string. Its name reads as what it is: `tp8` when it runs the
sweep's resolved settings, `tp8 max_num_seqs=64` when a setting differs from them (the name is the
store's key, so a sweep whose candidates all share one settings value keeps plain layout names).

A disaggregated candidate (`DisaggCandidate`, named `p:tp4+d:tp4`) is a prefill pool and a decode pool,
each an ordinary Layout with its own resolved EngineSettings (and its own redundant expert slots, as
DeepSeek-V3 runs 32 on prefill and 64 on decode), plus the KV transfer backend between them and the
router in front. `AnyCandidate` is what the stages take: they branch on the kind once, at their seam.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.disagg import DisaggLayout
from orchestrator.engines.settings import EngineSettings
from orchestrator.errors import SpecError
from orchestrator.layout import Layout

RouterPolicy = Literal["round_robin", "least_outstanding"]
DEFAULT_ROUTER_POLICY: RouterPolicy = "least_outstanding"


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    settings: EngineSettings
    name: str = field(default="")

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", str(self.layout))

    def __str__(self) -> str:
        return self.name

    @property
    def gpus(self) -> int:
        return self.layout.gpus

    @classmethod
    def named(cls, layout: Layout, settings: EngineSettings, base: EngineSettings) -> Candidate:
        """The candidate, named by its layout and the settings that differ from `base` (the sweep's)."""
        diff = settings.differences(base)
        return cls(layout, settings, " ".join((str(layout), *diff)))


@dataclass(frozen=True)
class Pool:
    """One pool of a disaggregated candidate: its role, layout, the settings its engines run with, and
    the redundant expert slots (EPLB) each of its replicas spreads over its EP ranks."""

    role: Literal["prefill", "decode"]
    layout: Layout
    settings: EngineSettings
    num_redundant_experts: int = 0

    @property
    def candidate(self) -> Candidate:
        """The pool as an aggregated candidate: what an engine compiles one pool from."""
        return Candidate(self.layout, self.settings)

    def label(self, base: EngineSettings | None) -> str:
        """`tp4`, plus the settings that differ from `base` (what the sweep gives this pool)."""
        diff = self.settings.differences(base) if base is not None else ()
        return " ".join((str(self.layout), *diff))


@dataclass(frozen=True)
class DisaggCandidate:
    """A prefill pool and a decode pool on disjoint GPUs, the KV transfer between them, and a router."""

    prefill: Pool
    decode: Pool
    transfer: str  # the KV transfer backend: a vLLM KV connector or an SGLang transfer backend
    router_policy: RouterPolicy = DEFAULT_ROUTER_POLICY
    name: str = field(default="")

    def __post_init__(self) -> None:
        if (self.prefill.role, self.decode.role) != ("prefill", "decode"):
            raise ValueError("a disaggregated candidate is a prefill pool and then a decode pool")
        engines = (self.prefill.settings.engine, self.decode.settings.engine)
        if engines[0] != engines[1]:
            raise SpecError(
                f"layout {self.layout}: the prefill pool runs {engines[0]} and the decode pool {engines[1]}; "
                "a KV handover needs one engine on both sides (each has its own KV layout and transfer "
                f"protocol): run both pools on {engines[1]}"
            )
        if not self.name:
            object.__setattr__(self, "name", str(self.layout))

    def __str__(self) -> str:
        return self.name

    @property
    def layout(self) -> DisaggLayout:
        return DisaggLayout(self.prefill.layout, self.decode.layout)

    @property
    def gpus(self) -> int:
        """Both pools' GPUs: per GPU figures of a disaggregated candidate count them all."""
        return self.prefill.layout.gpus + self.decode.layout.gpus

    @property
    def engine(self) -> str:
        return self.prefill.settings.engine

    @property
    def pools(self) -> tuple[Pool, Pool]:
        return (self.prefill, self.decode)

    def to_dict(self) -> dict[str, Any]:
        """The split as the store records it: each pool's layout, GPUs, settings and expert slots."""
        return {"kind": "disaggregated", "name": self.name, "gpus": self.gpus, "transfer": self.transfer,
                "router_policy": self.router_policy, **{p.role: {
                    "layout": str(p.layout), "gpus": p.layout.gpus, "replicas": p.layout.replicas,
                    "num_redundant_experts": p.num_redundant_experts,
                    "engine_settings": p.settings.to_dict()} for p in self.pools}}

    @classmethod
    def of(cls, pd: DisaggLayout, prefill: EngineSettings, decode: EngineSettings, transfer: str, *,
           bases: tuple[EngineSettings, EngineSettings] | None = None,
           redundant_experts: tuple[int, int] = (0, 0),
           router_policy: RouterPolicy = DEFAULT_ROUTER_POLICY) -> DisaggCandidate:
        """The pair with each pool's settings, named `p:<prefill>+d:<decode>`: a pool's settings that
        differ from its base (what the sweep gives that pool) appear in its part of the name."""
        p = Pool("prefill", pd.prefill, prefill, redundant_experts[0])
        d = Pool("decode", pd.decode, decode, redundant_experts[1])
        name = (f"p:{p.label(bases[0])}+d:{d.label(bases[1])}" if bases is not None
                else str(DisaggLayout(pd.prefill, pd.decode)))
        return cls(p, d, transfer, router_policy, name)


AnyCandidate = Candidate | DisaggCandidate
