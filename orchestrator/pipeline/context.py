"""What every step of a sweep reads: one frozen SweepContext, built once (`open_context`) from the spec,
the options and the store, and passed explicitly to plain functions (pipeline/points.py,
pipeline/serving.py, pipeline/side_by_side.py, pipeline/sweep.py). Nothing in it changes after it is
built except the two small tallies it points to (timings and predicted capacities); a side-by-side
layout's thread gets the same context with a store and an observer that run on the main thread.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from orchestrator.candidate import AnyCandidate
from orchestrator.compile import is_cpu, secret_env
from orchestrator.deploy.targets import preflight
from orchestrator.disagg import AnyLayout
from orchestrator.engines import Engine, EngineSettings, get_engine, secret_values
from orchestrator.loadgen.bench import PointResult
from orchestrator.loadgen.engine_metrics import DEFAULT_INTERVAL_S
from orchestrator.loadgen.records import RequestRecord
from orchestrator.pipeline.provenance import new_run_id
from orchestrator.plan.candidates import candidate_of, check_pairs
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.plan.inputs import PlanInputs
from orchestrator.spec.models import KubernetesTarget, SweepSpec
from orchestrator.store.extras import SideRecords, SweepMode
from orchestrator.store.reads import LayoutRow, PointRow
from orchestrator.store.run_ids import checked_run_id

SideBySide = Literal["auto", "on", "off"]
DEFAULT_READY_TIMEOUT_S = 900.0


class Observer(Protocol):
    """Told what the sweep is doing, for progress displays; `begin`/`append` are the bench runner's
    per-request progress (loadgen.bench.Progress)."""

    def phase(self, layout: str, phase: str) -> None: ...

    def point_start(self, layout: str, label: str, total: int | None) -> None: ...

    def begin(self, label: str, total: int | None) -> None: ...

    def append(self, rec: RequestRecord, /) -> None: ...

    def request_progress(self, layout: str, label: str, done: int, total: int | None) -> None:
        """A side-by-side layout's load point: `done` of `total` requests completed (its load
        generator runs in another process; pipeline/loadgen_proc.py forwards the counts)."""

    def point_done(self, layout: str, result: PointResult) -> None: ...

    def layout_done(self, layout: str, status: str, reason: str | None) -> None: ...


class RunStore(Protocol):
    """What a sweep's steps write and read of their run (orchestrator.store.Store, or the same calls
    made on the main thread for a side-by-side layout)."""

    def set_layout(self, run_id: str, layout: str, gpus: int, status: str, *, reason: str | None = None,
                   plan: dict[str, Any] | None = None, launch: dict[str, Any] | None = None) -> None: ...

    def add_point(self, run_id: str, layout: str, label: str, rate: float | None, passed: bool | None,
                  verdict: str | None, metrics: dict[str, Any], records: Sequence[RequestRecord]) -> None: ...

    def add_engine_metrics(self, run_id: str, layout: str, label: str, series: dict[str, Any]) -> None: ...

    def set_extra(self, run_id: str, key: str, value: dict[str, Any]) -> None: ...

    def extras(self, run_id: str, prefix: str = "") -> dict[str, dict[str, Any]]: ...

    def points(self, run_id: str, layout: str | None = None) -> list[PointRow]: ...

    def layouts(self, run_id: str) -> list[LayoutRow]: ...

    def journal_run(self, run_id: str) -> Path: ...

    def create_run(self, *, run_id: str, spec_path: str | None, spec_json: dict[str, Any], spec_hash: str,
                   engine: str, engine_version: str | None, model: str, model_config_hash: str | None,
                   orch_version: str, hardware: dict[str, Any], metadata: dict[str, Any]) -> None: ...

    def finish_run(self, run_id: str, status: str, selection: dict[str, Any] | None) -> None: ...


@dataclass(frozen=True)
class SweepOptions:
    layouts: tuple[AnyLayout, ...] | None = None  # prefill/decode pairs too
    rates: tuple[float, ...] | None = None
    num_requests: int | None = None
    force: bool = False
    workdir: str | None = None
    ready_timeout_s: float | None = None
    served: bool = False  # engine: sim over HTTP instead of in virtual time
    measure_all: bool = False  # also measure layouts the simulator predicts to lose clearly
    engine_metrics_interval_s: float = DEFAULT_INTERVAL_S  # /metrics scrapes, in measured (simulated) time
    side_by_side: SideBySide | None = None  # None: as the run started (resume), else auto


@dataclass
class Tally:
    """What the sweep counts as it goes: the time of each measured load point and each layout's own
    overhead (deploy, warm-up, teardown), and the simulator's predicted capacity per candidate. A
    resumed run starts from what its earlier sessions counted (`restore`), so its time to decision
    compares the whole sweep with the whole grid (issue 29: it compared the last session with it)."""

    point_s: list[float] = field(default_factory=list)
    layout_s: list[float] = field(default_factory=list)
    predicted_capacity: dict[str, float | None] = field(default_factory=dict)
    earlier_wall_s: float = 0.0  # wall time of the run's earlier sessions
    sessions: int = 1
    started: float = field(default_factory=time.monotonic)  # this session's start

    def wall_s(self) -> float:
        return self.earlier_wall_s + time.monotonic() - self.started

    def progress(self) -> dict[str, Any]:
        """What a later session needs to go on counting (stored as the sweep goes)."""
        return {"wall_s": self.wall_s(), "point_s": list(self.point_s), "layout_s": list(self.layout_s),
                "sessions": self.sessions}

    def restore(self, progress: dict[str, Any] | None, resumed: bool) -> None:
        """Go on from the earlier sessions' progress (a session killed before it stored any has none:
        it still counts as a session); this session starts now."""
        if progress:
            self.earlier_wall_s = float(progress.get("wall_s") or 0.0)
            self.point_s[:0] = [float(x) for x in progress.get("point_s") or []]
            self.layout_s[:0] = [float(x) for x in progress.get("layout_s") or []]
        if resumed:
            self.sessions = int((progress or {}).get("sessions") or 1) + 1
        self.started = time.monotonic()


@dataclass(frozen=True)
class SweepContext:
    spec: SweepSpec
    store: RunStore
    obs: Observer
    opts: SweepOptions
    run_id: str
    workdir: Path  # this run's work directory (logs, per-candidate directories)
    engine: Engine
    inputs: PlanInputs  # the cost model's inputs, with the sweep's resolved engine settings
    served: bool  # measured on served engines (else the simulator in virtual time)
    side_by_side: bool
    scale: float  # wall seconds per measured second (a served simulator's time scale; else 1)
    resuming: bool
    tally: Tally = field(default_factory=Tally, compare=False)

    @property
    def settings(self) -> EngineSettings:
        return self.inputs.settings

    def candidate(self, layout: AnyLayout) -> AnyCandidate:
        """A layout of the sweep with the sweep's settings; a prefill/decode pair with its pools' (the
        spec's disagg section), transfer backend and router."""
        return candidate_of(self.spec, layout, self.settings)

    @property
    def ready_timeout_s(self) -> float:
        return self.opts.ready_timeout_s or self.spec.engine.startup_s or DEFAULT_READY_TIMEOUT_S

    @property
    def records(self) -> SideRecords:
        """The run's side records (mode, settings, capacities, placements), typed."""
        return SideRecords(self.store, self.run_id)

    def save_progress(self) -> None:
        """Keep the time spent so far with the run (after each point and layout): a session killed
        later still leaves its part for the time to decision of the session that finishes it."""
        mode = self.records.sweep() or SweepMode("served" if self.served else "virtual", "auto")
        self.records.set_sweep(replace(mode, progress=self.tally.progress()))

    def on_thread(self, store: RunStore, obs: Observer) -> SweepContext:
        """The context as a side-by-side layout's thread sees it: its store and observer calls run on the
        main thread (pipeline/loadgen_proc.py); the tallies are shared."""
        return replace(self, store=store, obs=obs)


def served_mode(spec: SweepSpec, served_flag: bool) -> bool:
    """Virtual time only where it is the same engine: the simulator on the local target."""
    return served_flag or not get_engine(spec.engine.name).simulated or spec.target.kind != "local"


def side_by_side_on(spec: SweepSpec, served: bool, choice: SideBySide) -> bool:
    """Whether layouts may share the cluster. Never in virtual time (layouts compete for nothing
    there and the results stay exactly those of one at a time). `auto`: for real engines on GPUs on
    the local or Ray target; not for the served simulator (its servers share this machine's CPU) nor
    the cpu preset (its "GPUs" are cores of one host) nor Kubernetes (the scheduler, not orch, puts
    pods on GPUs); `on` forces it for any served sweep, `off` never."""
    if not served or choice == "off":
        return False
    if choice == "on":
        return True
    real_gpus = not get_engine(spec.engine.name).simulated and not is_cpu(spec.hardware.gpu)
    return real_gpus and spec.target.kind in ("local", "ray")


def open_context(spec: SweepSpec, store: RunStore, obs: Observer, options: SweepOptions | None = None,
                 run_id: str | None = None) -> SweepContext:
    """The context of a new run, or of run `run_id` resumed: it measures the way it started (mode,
    side by side, engine settings), whatever the options say now."""
    opts = options or SweepOptions()
    resuming = run_id is not None
    run_id = checked_run_id(run_id or new_run_id())  # it names the work directory
    check_pairs(spec, opts.layouts or spec.layouts)  # a pair no deployment can run: exit 2, nothing runs
    preflight(spec.target)
    if not isinstance(spec.target, KubernetesTarget):
        # Every secret the engines need must be in orch's environment before anything starts; the
        # values are read again at deploy time and never kept. (On Kubernetes the pods read them
        # from their Secrets.)
        secret_values(secret_env(spec), os.environ)
    started = SideRecords(store, run_id) if resuming else None
    mode = started.sweep() if started is not None else None
    if mode is not None:
        opts = replace(opts, served=mode.mode == "served")
        if opts.side_by_side is None:
            opts = replace(opts, side_by_side=mode.side_by_side)
    settings = started.engine_settings() if started is not None else None
    engine = get_engine(spec.engine.name)
    served = served_mode(spec, opts.served)
    base = opts.workdir or getattr(spec.target, "workdir", None) or tempfile.mkdtemp(prefix="orch-")
    return SweepContext(
        spec=spec, store=store, obs=obs, opts=opts, run_id=run_id, workdir=Path(base) / run_id,
        engine=engine,
        # The engine settings, resolved once: the planner, the simulator, every launch command and
        # the store take this one value (a resumed run keeps the one it started with).
        inputs=plan_inputs(spec, settings),
        served=served, side_by_side=side_by_side_on(spec, served, opts.side_by_side or "auto"),
        scale=spec.engine.time_scale if engine.simulated and served else 1.0,
        resuming=resuming,
    )


__all__ = [
    "DEFAULT_READY_TIMEOUT_S", "Observer", "RunStore", "SideBySide", "SweepContext", "SweepOptions", "Tally",
    "open_context", "served_mode", "side_by_side_on",
]
