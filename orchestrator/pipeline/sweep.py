"""`orch sweep` without the printing: per layout plan -> measure -> store; then select.

Two ways to measure, one loop over load points (`_measure`: the spec's rate grid, or the capacity
search of pipeline/capacity.py) and one metric code (RequestRecords -> loadgen.metrics):
- virtual (the default for `engine: sim` on the local target): the simulated engine in virtual time,
  no servers; deterministic for a workload seed, seconds per layout.
- served (`--served`, and always for vllm/sglang or Ray/Kubernetes targets): compile -> deploy ->
  warm up -> bench each load point over HTTP with the load generator -> tear down.
Results are committed after every load point, so a sweep interrupted at any moment resumes with
`--resume RUN_ID` and loses nothing already measured (a capacity search resumes from its points)."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from orchestrator.deploy.targets import preflight
from orchestrator.engines import get_engine
from orchestrator.engines.base import secret_values
from orchestrator.engines.from_spec import secret_env
from orchestrator.errors import DeployError, OrchError, SpecError, StoreError
from orchestrator.layout import Layout
from orchestrator.loadgen.bench import PointResult
from orchestrator.loadgen.engine_metrics import DEFAULT_INTERVAL_S
from orchestrator.loadgen.intervals import bootstrap_intervals, slo_margin
from orchestrator.loadgen.metrics import finite
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.spec_workload import session_shape, slo_bounds
from orchestrator.pipeline.capacity import (
    GROWTH_FROM_PLANNER,
    GROWTH_FROM_SIMULATOR,
    Probe,
    load_axis,
    load_grid,
    load_label,
    search_capacity,
)
from orchestrator.pipeline.derived import derive
from orchestrator.pipeline.outcomes import FINAL_STATUSES, outcomes_from_store, point_outcome
from orchestrator.pipeline.predict import planned_capacity_concurrency, planned_capacity_rate
from orchestrator.pipeline.provenance import hardware_seen, model_config_hash, new_run_id, orch_version
from orchestrator.pipeline.prune import dominated, exhaustive_grid_points, timing
from orchestrator.pipeline.repeats import measure_point, unjudged
from orchestrator.pipeline.served import warm_up
from orchestrator.pipeline.served_layout import DEFAULT_READY_TIMEOUT_S, deploy_and_measure
from orchestrator.pipeline.side_by_side import SideBySide, run_wave, side_by_side_on, waves
from orchestrator.pipeline.virtual_points import PointFn, virtual_point_fn
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.plan.planner import PlanRow, plan_layout
from orchestrator.plan.run import itl_bound_ms
from orchestrator.selection import LayoutOutcome, Selection, select
from orchestrator.spec.load import spec_hash
from orchestrator.spec.models import KubernetesTarget, SweepSpec
from orchestrator.store.db import Store
from orchestrator.store.run_ids import checked_run_id


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


@dataclass(frozen=True)
class SweepOptions:
    layouts: tuple[Layout, ...] | None = None
    rates: tuple[float, ...] | None = None
    num_requests: int | None = None
    force: bool = False
    workdir: str | None = None
    ready_timeout_s: float | None = None
    served: bool = False  # engine: sim over HTTP instead of in virtual time
    measure_all: bool = False  # also measure layouts the simulator predicts to lose clearly
    engine_metrics_interval_s: float = DEFAULT_INTERVAL_S  # /metrics scrapes, in measured (simulated) time
    side_by_side: SideBySide | None = None  # None: as the run started (resume), else auto


@dataclass(frozen=True)
class SweepResult:
    run_id: str
    selection: Selection
    outcomes: tuple[LayoutOutcome, ...]


class Sweep:
    def __init__(
        self,
        spec: SweepSpec,
        store: Store,
        observer: Observer,
        *,
        spec_path: str | None = None,
        options: SweepOptions | None = None,
        run_id: str | None = None,
    ) -> None:
        self.spec, self.store, self.obs = spec, store, observer
        self.opts = options or SweepOptions()
        self.spec_path = spec_path
        self.resuming = run_id is not None
        self.run_id = checked_run_id(run_id or new_run_id())  # it names the work directory
        preflight(spec.target)
        if not isinstance(spec.target, KubernetesTarget):
            # Every secret the engines need must be in orch's environment before anything starts; the
            # values are read again at deploy time and never kept. (On Kubernetes the pods read them
            # from their Secrets.)
            secret_values(secret_env(spec), os.environ)
        self.engine = get_engine(spec.engine.name)
        self.inputs = plan_inputs(spec)
        if run_id is not None:  # a resumed run measures the way it started
            started = store.extras(run_id, "sweep").get("sweep") or {}
            if started.get("mode") is not None:
                self.opts = replace(self.opts, served=started["mode"] == "served")
            if self.opts.side_by_side is None:
                self.opts = replace(self.opts, side_by_side=started.get("side_by_side"))
        self.served = served_mode(spec, self.opts.served)
        self.side_by_side = side_by_side_on(spec, self.served, self.opts.side_by_side or "auto")
        self._predicted_capacity: dict[str, float] = {}  # virtual-time capacity per layout (served runs)
        self._layout_s: list[float] = []  # per measured layout: deploy, warm-up, teardown (not points)
        self._point_s: list[float] = []  # per measured load point
        self.scale = spec.engine.time_scale if spec.engine.name == "sim" and self.served else 1.0
        base = self.opts.workdir or getattr(spec.target, "workdir", None) or tempfile.mkdtemp(prefix="orch-")
        self.workdir = Path(base) / self.run_id
        self.engine_series: dict[str, Any] = {}  # the last load point's scraped /metrics
        self._routing_suffix = ""  # " routing=<policy>" while a pass of a policy comparison runs

    # -- run ------------------------------------------------------------------------------------
    def run(self) -> SweepResult:
        spec = self.spec
        self.store.journal_run(self.run_id)  # every write of this run reaches a journal first
        if not self.resuming:
            self.store.create_run(
                run_id=self.run_id,
                spec_path=self.spec_path,
                spec_json=spec.model_dump(mode="json"),
                spec_hash=spec_hash(spec),
                engine=spec.engine.name,
                engine_version=spec.engine.version
                or (f"orch-sim {orch_version()}" if spec.engine.name == "sim" else None),
                model=self.inputs.cfg.name,
                model_config_hash=model_config_hash(self.inputs.cfg),
                orch_version=orch_version(),
                hardware=hardware_seen(),
                metadata=dict(spec.metadata),
            )
            mode, shared = "served" if self.served else "virtual", self.opts.side_by_side or "auto"
            self.store.set_extra(self.run_id, "sweep", {"mode": mode, "side_by_side": shared})
        layouts = list(self.opts.layouts or spec.layouts)
        done = {row.layout: row for row in self.store.layouts(self.run_id)}
        started = time.monotonic()
        names: list[str] = []
        try:
            # A spec listing several routing policies measures each layout with replicas under each
            # (one pass per policy, candidates named `tp2x4 routing=prefix_aware`); a one-replica
            # layout has nothing to route and is measured once.
            for policy, pass_layouts in routing_passes(spec, layouts):
                self._use_routing(spec, policy)
                names += [self.name(x) for x in pass_layouts]
                self._run_pass(pass_layouts, done)
        except KeyboardInterrupt:
            self.store.finish_run(self.run_id, "interrupted", None)
            raise
        finally:
            self._use_routing(spec, None)
        result = self.result(names)
        self._record_timing(time.monotonic() - started, names)
        derive(self.store, self.run_id, self.spec, result.selection)
        self.store.finish_run(self.run_id, "done", result.selection.to_dict())
        return result

    def _use_routing(self, spec: SweepSpec, policy: str | None) -> None:
        """Measure with `policy` (a spec comparing policies), or as the spec says (None)."""
        compared = policy is not None and len(spec.routing_policies()) > 1
        self.spec = spec.model_copy(update={"routing": policy}) if compared else spec
        self._routing_suffix = f" routing={policy}" if compared else ""

    def name(self, layout: Layout) -> str:
        """The candidate's name in the store: the layout, and the routing when policies are compared."""
        return str(layout) + (self._routing_suffix if layout.replicas > 1 else "")

    def _run_pass(self, layouts: Sequence[Layout], done: dict[str, Any]) -> None:
        todo = [
            x for x in layouts
            if (prior := done.get(self.name(x))) is None or prior.status not in FINAL_STATUSES
        ]
        pruned = self._prune(todo)
        for layout in todo:
            if (why := pruned.get(self.name(layout))) is not None:
                self.store.set_layout(self.run_id, self.name(layout), layout.gpus, "pruned", reason=why)
                self.obs.layout_done(self.name(layout), "pruned", why)
        for number, wave in enumerate(waves(self, [x for x in todo if self.name(x) not in pruned]), 1):
            if len(wave) > 1:  # on disjoint GPUs at the same time (pipeline/side_by_side.py)
                run_wave(self, wave, number)
                continue
            layout, t0 = wave[0].layout, time.monotonic()
            n_points = len(self._point_s)
            self._one_layout(layout)
            if len(self._point_s) > n_points:
                self._layout_s.append(time.monotonic() - t0 - sum(self._point_s[n_points:]))

    def _prune(self, layouts: Sequence[Layout]) -> dict[str, str]:
        """Layouts the simulator predicts to lose clearly (pipeline/prune.py); served runs only: in
        virtual time the prediction is the measurement, so everything is measured."""
        if not self.served or self.opts.measure_all or len(layouts) < 2:
            return {}
        predicted = []
        for layout in layouts:
            row = self._plan(layout)
            if row.rejected_because and not self.opts.force:
                continue
            self.obs.phase(self.name(layout), "predict (virtual time)")
            predicted.append(self._predict(layout, row))
        return dominated(predicted, self.spec.objective)

    def _predict(self, layout: Layout, row: PlanRow) -> LayoutOutcome:
        """The layout's load points (grid or capacity search) through the simulator, not stored."""
        name, run = self.name(layout), self._virtual_point(layout)
        results: dict[float, PointResult] = {}
        by = load_axis(self.spec.workload)

        def probe(load: float) -> Probe:
            results[load] = run(load, 0)[0]
            return _probe_of(results[load], load)

        grid = load_grid(self.spec.workload, self.opts.rates)
        if grid:
            for load in grid:
                probe(load)
        else:
            seed, source, growth = self._planner_seed(layout, row)
            cap = search_capacity(name, probe, self.spec.workload.search, seed, source, growth, by)
            if cap.capacity is not None:
                self._predicted_capacity[name] = cap.capacity
        points = tuple(
            point_outcome(r.point.label, r.point.rate, r.passed, r.verdict, finite(r.metrics.to_dict()),
                          layout.gpus)
            for r in results.values()
        )
        return LayoutOutcome(name, layout.gpus, "measured", None, points, searched=not grid)

    def _record_timing(self, wall_s: float, names: Sequence[str]) -> None:
        w = self.spec.workload
        rows = {r.layout: r for r in self.store.layouts(self.run_id)}
        candidates = sum(1 for x in names if (r := rows.get(x)) is not None and r.status != "rejected")
        searched = not load_grid(w, self.opts.rates)
        loads = [x.load for o in outcomes_from_store(self.store, self.run_id) for x in o.points]
        rates = [x for x in loads if x is not None]  # or concurrencies: the grid is over the same axis
        whole = load_axis(w) == "concurrency"
        grid = exhaustive_grid_points(rates, w.search.tolerance_frac, searched, whole)
        t = timing(wall_s, self._layout_s, self._point_s, candidates, grid, searched, whole)
        sweep = self.store.extras(self.run_id, "sweep").get("sweep") or {}
        self.store.set_extra(self.run_id, "sweep", {**sweep, "timing": asdict(t)})

    def result(self, layouts: Sequence[str] | None = None) -> SweepResult:
        outcomes = outcomes_from_store(self.store, self.run_id, layouts)
        return SweepResult(self.run_id, select(outcomes, self.spec.objective), tuple(outcomes))

    def _plan(self, layout: Layout) -> PlanRow:
        w = self.spec.workload
        return plan_layout(
            self.inputs,
            layout,
            prompt_tokens=_mean(w.input_tokens),
            context_tokens=_mean(w.input_tokens) + _mean(w.output_tokens) // 2,
            itl_bound_ms=itl_bound_ms(self.spec),
            output_tokens=_mean(w.output_tokens),  # charge the prefill, as `orch plan` does
        )

    def _one_layout(self, layout: Layout) -> None:
        name = self.name(layout)
        obs = self.obs
        obs.phase(name, "plan")
        try:
            row = self._plan(layout)
        except SpecError as exc:  # the cost model cannot describe it (e.g. expert slots that do not divide)
            reason = str(exc)
            self.store.set_layout(self.run_id, name, layout.gpus, "rejected", reason=reason)
            obs.layout_done(name, "rejected", reason)
            return
        plan_d = finite(row.to_dict())
        if row.rejected_because and not self.opts.force:
            reason = "; ".join(row.rejected_because)
            self.store.set_layout(self.run_id, name, layout.gpus, "rejected", reason=reason, plan=plan_d)
            obs.layout_done(name, "rejected", reason)
            return
        try:
            if self.served:
                deploy_and_measure(self, layout, row, plan_d)
            else:
                self.store.set_layout(self.run_id, name, layout.gpus, "pending", plan=plan_d)
                self._measure(layout, row, self._virtual_point(layout))
        except StoreError:
            raise  # not the layout's fault: the sweep stops (the journal keeps what was measured)
        except (DeployError, OrchError, OSError) as exc:
            reason = str(exc)
            self.store.set_layout(self.run_id, name, layout.gpus, "failed", reason=reason)
            obs.layout_done(name, "failed", reason.splitlines()[0])
            return
        self.store.set_layout(self.run_id, name, layout.gpus, "measured")
        obs.layout_done(name, "measured", None)

    # -- the load points of one layout: the spec's grid or the capacity search --------------------
    def _measure(self, layout: Layout, row: PlanRow, point_fn: PointFn) -> None:
        name, spec = self.name(layout), self.spec
        stored = {p.label: p for p in self.store.points(self.run_id, name)}
        by = load_axis(spec.workload)

        def probe(load: float) -> Probe:
            label = load_label(by, load)
            prior = stored.get(label)
            if prior is None:
                self.obs.phase(name, f"bench {label}")
                t0 = time.monotonic()
                # measured again when unjudged, repeated when close to the SLO (pipeline/repeats.py)
                result, extra, judged = measure_point(
                    lambda k: point_fn(load, k), lambda r: self._judge(r, layout), spec, layout.gpus,
                    lambda what: self.obs.phase(name, f"bench {label} {what}"),
                )
                self._point_s.append(time.monotonic() - t0)
                metrics = {**finite(result.metrics.to_dict()), **finite(extra), **judged}
                if result.note:  # what the workload left out (sessions cut at max_model_len ...)
                    metrics["note"] = result.note
                rate = load if by == "rate" else None
                # The point first: if the store fails, the journal has the measurement itself.
                self.store.add_point(
                    self.run_id, name, label, rate, result.passed, result.verdict, metrics, result.records
                )
                if self.engine_series:
                    self.store.add_engine_metrics(self.run_id, name, label, self.engine_series)
                    self.engine_series = {}
                self.obs.point_done(name, result)
                passed, why, margin = bool(result.passed), result.verdict or "", judged.get("slo_margin")
            else:
                passed, why, margin = bool(prior.passed), prior.verdict or "", prior.metrics.get("slo_margin")
            return Probe(load, passed, why, judged=not why.startswith("unreliable"), sure=margin != "close")

        grid = load_grid(spec.workload, self.opts.rates)
        if grid:
            for load in grid:
                probe(load)
            return
        seed, source, growth = self._seed(layout, row)
        cap = search_capacity(name, probe, spec.workload.search, seed, source, growth, by)
        self.store.set_extra(self.run_id, f"capacity/{name}", cap.to_dict())

    def _judge(self, result: PointResult, layout: Layout) -> dict[str, Any]:
        """The point's bootstrap intervals and how surely its SLO verdict holds (loadgen/intervals.py)."""
        slo = slo_bounds(self.spec.slo)
        iv = bootstrap_intervals(
            result.records, warmup_s=self.spec.workload.warmup_s, gpus=layout.gpus, slo=slo,
            seed=self.spec.workload.seed,
        )
        return {"intervals": finite(iv), "slo_margin": slo_margin(iv, slo) if slo else None}

    def _seed(self, layout: Layout, row: PlanRow) -> tuple[float, str, float]:
        """Where a layout's capacity search starts: served runs from the simulator's own capacity
        search (seconds in virtual time, so the real engine spends its minutes near the answer),
        virtual runs from the planner's estimate."""
        if not self.served:
            return self._planner_seed(layout, row)
        if self.name(layout) not in self._predicted_capacity:
            self._predict(layout, row)
        cap = self._predicted_capacity.get(self.name(layout))
        if cap is None:
            return self._planner_seed(layout, row)
        return cap, "simulator (virtual-time capacity search)", GROWTH_FROM_SIMULATOR

    def _planner_seed(self, layout: Layout, row: PlanRow) -> tuple[float, str, float]:
        search = self.spec.workload.search
        if load_axis(self.spec.workload) == "concurrency":
            conc = planned_capacity_concurrency(row, layout.replicas * layout.dp)
            if conc is None:
                return search.min_concurrency * 8, "search bounds", GROWTH_FROM_PLANNER
            return conc, "planner (best batch within the ITL bound, all engines)", GROWTH_FROM_PLANNER
        calls, output = session_shape(self.spec.workload)  # a session workload's rate counts sessions
        planned = planned_capacity_rate(row, round(output))
        if planned is None:
            return search.min_rate_per_s * 10, "search bounds", GROWTH_FROM_PLANNER
        why = "planner (throughput within the ITL bound, prefill charged)"
        return planned / calls, why, GROWTH_FROM_PLANNER

    def _virtual_point(self, layout: Layout) -> PointFn:
        def keep(series: dict[str, Any]) -> None:
            self.engine_series = series

        return virtual_point_fn(self.spec, self.inputs, layout, self.opts.num_requests,
                                self.opts.engine_metrics_interval_s, keep)


def routing_passes(spec: SweepSpec, layouts: Sequence[Layout]) -> list[tuple[str, list[Layout]]]:
    """(policy, layouts measured under it): every layout under the first policy, and the layouts with
    replicas under each further one."""
    policies = spec.routing_policies()
    return [(p, list(layouts) if i == 0 else [x for x in layouts if x.replicas > 1])
            for i, p in enumerate(policies)]


def served_mode(spec: SweepSpec, served_flag: bool) -> bool:
    """Virtual time only where it is the same engine: the simulator on the local target."""
    return served_flag or spec.engine.name != "sim" or spec.target.kind != "local"


def _probe_of(result: PointResult, load: float) -> Probe:
    return Probe(load, bool(result.passed), result.verdict or "", judged=not unjudged(result))


def _mean(value: object) -> int:
    from orchestrator.plan.from_spec import mean_tokens
    from orchestrator.spec.models import TokenDistribution

    assert isinstance(value, int | TokenDistribution)
    return mean_tokens(value)


_warm_up = warm_up  # consistency/run.py imports it from here
__all__ = [
    "DEFAULT_READY_TIMEOUT_S", "Observer", "Sweep", "SweepOptions", "SweepResult", "outcomes_from_store",
    "point_outcome",
]
