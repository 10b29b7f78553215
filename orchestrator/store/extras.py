"""A run's side records (store table run_extras), typed: which keys exist and what each holds is said
here once, so nobody finds a record by a key prefix of their own.

- `sweep`: how the run measures (served or virtual time, side by side), the time spent so far, and,
  once done, its timing
- `engine_settings`: the engine settings the run resolved once (engines/settings.py)
- `capacity/<candidate>`: a candidate's capacity search (pipeline/capacity.py Capacity.to_dict)
- `placement/<candidate>`: where a side-by-side candidate ran and beside which others
- `cluster`: what the Ray cluster held when it had fewer nodes than the spec claims
- `objectives`, `pareto`: derived from the points after the sweep (pipeline/derived.py)

The payloads stay JSON mappings (they are what `orch sweep --json` and reports print); the typed
values are what the pipeline reads back (SweepMode, EngineSettings).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

from orchestrator.engines import EngineSettings

SWEEP = "sweep"
SETTINGS = "engine_settings"
CAPACITY = "capacity/"
PLACEMENT = "placement/"
CLUSTER = "cluster"
OBJECTIVES = "objectives"
PARETO = "pareto"

Mode = Literal["served", "virtual"]
SideBySideChoice = Literal["auto", "on", "off"]


class ExtrasStore(Protocol):
    def extras(self, run_id: str, prefix: str = "") -> dict[str, dict[str, Any]]: ...

    def set_extra(self, run_id: str, key: str, value: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class SweepMode:
    mode: Mode
    side_by_side: SideBySideChoice
    timing: dict[str, Any] | None = None  # pipeline/prune.py Timing, once the sweep is done
    # The time spent so far, kept as the sweep goes (pipeline/context.py Tally.progress), so that a
    # resumed run's time to decision covers every session, not the last one alone.
    progress: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("timing", "progress"):
            if d[key] is None:
                del d[key]
        return d


def named(extras: dict[str, dict[str, Any]], prefix: str) -> dict[str, dict[str, Any]]:
    """Candidate name -> record, of the records in `extras` (all of a run's) under `prefix`
    (CAPACITY, PLACEMENT), in the order stored."""
    return {k.removeprefix(prefix): v for k, v in extras.items() if k.startswith(prefix)}


class SideRecords:
    """One run's side records."""

    def __init__(self, store: ExtrasStore, run_id: str) -> None:
        self.store, self.run_id = store, run_id

    def _one(self, key: str) -> dict[str, Any] | None:
        return self.store.extras(self.run_id, key).get(key)

    def _named(self, prefix: str) -> dict[str, dict[str, Any]]:
        return named(self.store.extras(self.run_id, prefix), prefix)

    # -- how the run measures --------------------------------------------------------------------
    def sweep(self) -> SweepMode | None:
        d = self._one(SWEEP)
        if not d or d.get("mode") not in ("served", "virtual"):
            return None
        side = d.get("side_by_side")
        choice: SideBySideChoice = side if side in ("on", "off") else "auto"
        return SweepMode(d["mode"], choice, d.get("timing"), d.get("progress"))

    def set_sweep(self, mode: SweepMode) -> None:
        self.store.set_extra(self.run_id, SWEEP, mode.to_dict())

    def engine_settings(self) -> EngineSettings | None:
        d = self._one(SETTINGS)
        return EngineSettings.from_dict(d) if d else None

    def set_engine_settings(self, settings: EngineSettings) -> None:
        self.store.set_extra(self.run_id, SETTINGS, settings.to_dict())

    # -- per candidate ---------------------------------------------------------------------------
    def capacities(self) -> dict[str, dict[str, Any]]:
        """Candidate name -> its capacity search, in the order stored."""
        return self._named(CAPACITY)

    def set_capacity(self, candidate: str, search: dict[str, Any]) -> None:
        self.store.set_extra(self.run_id, CAPACITY + candidate, search)

    def placements(self) -> dict[str, dict[str, Any]]:
        """Candidate name -> where it ran side by side (wave, shared_cluster_with, replicas' GPUs)."""
        return self._named(PLACEMENT)

    def set_placement(self, candidate: str, where: dict[str, Any]) -> None:
        self.store.set_extra(self.run_id, PLACEMENT + candidate, where)

    # -- the run as a whole ----------------------------------------------------------------------
    def cluster(self) -> dict[str, Any] | None:
        return self._one(CLUSTER)

    def set_cluster(self, note: dict[str, Any]) -> None:
        self.store.set_extra(self.run_id, CLUSTER, note)

    def whole_run(self) -> dict[str, dict[str, Any]]:
        """The records about the run as a whole, by key (`sweep`, `objectives`, `pareto`, `cluster`,
        where stored): what `orch sweep --json` prints at its top level."""
        return {k: v for k in (SWEEP, OBJECTIVES, PARETO, CLUSTER) if (v := self._one(k)) is not None}

    def set_derived(self, objectives: dict[str, Any], pareto: dict[str, Any]) -> None:
        self.store.set_extra(self.run_id, OBJECTIVES, objectives)
        self.store.set_extra(self.run_id, PARETO, pareto)


__all__ = ["CAPACITY", "CLUSTER", "PLACEMENT", "SideRecords", "SweepMode", "named"]
