"""What a sweep judges: a candidate = a layout + the engine settings it runs with, under a readable name.

The planner, the simulator, compile, deploy, the store, the report and promote take this one value
between stages; nothing re-parses a string. Its name reads as what it is: `tp8` when it runs the
sweep's resolved settings, `tp8 max_num_seqs=64` when a setting differs from them (the name is the
store's key, so a sweep whose candidates all share one settings value keeps plain layout names).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.engines.settings import EngineSettings
from orchestrator.layout import Layout


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
