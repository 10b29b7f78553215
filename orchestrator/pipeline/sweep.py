"""`orch sweep` without the printing: per candidate plan -> measure -> store; then select.

Plain functions over one frozen SweepContext (pipeline/context.py). Two ways to measure, one loop
over load points (pipeline/points.measure_candidate: the spec's rate grid, or the capacity search of
pipeline/capacity.py) and one metric code (RequestRecords -> loadgen.metrics):
- virtual (the default for `engine: sim` on the local target): the simulated engine in virtual time,
  no servers; deterministic for a workload seed, seconds per layout.
- served (`--served`, and always for vllm/sglang or Ray/Kubernetes targets): the serve step
  (pipeline/serving.py: deploy -> wait -> warm up -> tear down) around the load points, measured over
  HTTP with the load generator; several layouts at once on disjoint GPUs when side by side is on
  (pipeline/side_by_side.py).
Results are committed after every load point, so a sweep interrupted at any moment resumes with
`--resume RUN_ID` and loses nothing already measured (a capacity search resumes from its points)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from orchestrator.candidate import AnyCandidate, Candidate, DisaggCandidate
from orchestrator.disagg import AnyLayout, DisaggLayout
from orchestrator.errors import DeployError, OrchError, SpecError, StoreError
from orchestrator.layout import Layout
from orchestrator.loadgen.metrics import finite
from orchestrator.pipeline.capacity import load_axis, load_grid
from orchestrator.pipeline.context import (
    DEFAULT_READY_TIMEOUT_S,
    Observer,
    SweepContext,
    SweepOptions,
    open_context,
)
from orchestrator.pipeline.derived import derive
from orchestrator.pipeline.outcomes import FINAL_STATUSES, outcomes_from_store, point_outcome
from orchestrator.pipeline.points import (
    AnyRow,
    measure_candidate,
    plan_row,
    predict_outcome,
    served_point_fn,
    virtual_point_fn,
)
from orchestrator.pipeline.provenance import hardware_seen, model_config_hash, orch_version
from orchestrator.pipeline.prune import dominated, exhaustive_grid_points, timing
from orchestrator.pipeline.served import LocalBench
from orchestrator.pipeline.serving import launch_for, serve
from orchestrator.pipeline.side_by_side import placed_waves, run_wave
from orchestrator.selection import LayoutOutcome, Selection, select
from orchestrator.spec.load import spec_hash
from orchestrator.spec.models import SweepSpec
from orchestrator.store.db import Store
from orchestrator.store.extras import SweepMode


@dataclass(frozen=True)
class SweepResult:
    run_id: str
    selection: Selection
    outcomes: tuple[LayoutOutcome, ...]


class Sweep:
    """A sweep for its callers (the CLI, tests): its context, opened once, and `run`."""

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
        self.ctx = open_context(spec, store, observer, options, run_id)
        self.spec_path = spec_path

    @property
    def run_id(self) -> str:
        return self.ctx.run_id

    @property
    def served(self) -> bool:
        return self.ctx.served

    def run(self) -> SweepResult:
        return run_sweep(self.ctx, self.spec_path)


def run_sweep(ctx: SweepContext, spec_path: str | None = None) -> SweepResult:
    """Every candidate of the spec (or of --layouts) measured and stored, then the selection."""
    spec, store = ctx.spec, ctx.store
    store.journal_run(ctx.run_id)  # every write of this run reaches a journal first
    if not ctx.resuming:
        _create_run(ctx, spec_path)
    done = {row.layout: row for row in store.layouts(ctx.run_id)}
    # The time the run's earlier sessions spent counts toward its time to decision.
    earlier = (ctx.records.sweep() or SweepMode("virtual", "auto")).progress if ctx.resuming else None
    ctx.tally.restore(earlier, ctx.resuming)
    candidates: list[AnyCandidate] = []
    try:
        # A spec listing several routing policies measures each layout with replicas under each, as
        # candidates of their own (`tp2x4 routing=prefix_aware`), one pass per policy; a one-replica
        # layout has nothing to route and is measured once.
        for pass_ctx, pass_candidates in routing_passes(ctx, list(ctx.opts.layouts or spec.layouts)):
            candidates += pass_candidates
            _run_pass(pass_ctx, pass_candidates, done)
    except KeyboardInterrupt:
        store.finish_run(ctx.run_id, "interrupted", None)
        raise
    result = sweep_result(ctx, [c.name for c in candidates])
    _record_timing(ctx, ctx.tally.wall_s(), candidates)
    derive(store, ctx.run_id, spec, result.selection)
    store.finish_run(ctx.run_id, "done", result.selection.to_dict())
    return result


def routing_passes(ctx: SweepContext, layouts: Sequence[AnyLayout],
                   ) -> list[tuple[SweepContext, list[AnyCandidate]]]:
    """(context, candidates) per routing policy of the spec: every layout under the first, the ones with
    replicas under each further one (the context's spec then names that one policy). A prefill/decode
    pair routes through its own router (the spec's disagg.router): measured once, in the first pass."""
    policies = ctx.spec.routing_policies()
    if len(policies) == 1:
        return [(ctx, [ctx.candidate(x) for x in layouts])]
    out: list[tuple[SweepContext, list[AnyCandidate]]] = []
    for i, policy in enumerate(policies):
        pass_ctx = replace(ctx, spec=ctx.spec.model_copy(update={"routing": policy}))
        named: list[AnyCandidate] = [
            ctx.candidate(x) if isinstance(x, DisaggLayout)
            else Candidate(x, ctx.settings, f"{x} routing={policy}" if x.replicas > 1 else str(x))
            for x in layouts if i == 0 or (isinstance(x, Layout) and x.replicas > 1)]
        out.append((pass_ctx, named))
    return out


def _run_pass(ctx: SweepContext, candidates: Sequence[AnyCandidate], done: dict[str, Any]) -> None:
    store = ctx.store
    todo = [c for c in candidates
            if (prior := done.get(c.name)) is None or prior.status not in FINAL_STATUSES]
    pruned = prune(ctx, todo)
    for c in todo:
        if (why := pruned.get(c.name)) is not None:
            store.set_layout(ctx.run_id, c.name, c.gpus, "pruned", reason=why)
            ctx.obs.layout_done(c.name, "pruned", why)
    single = [c for c in todo if isinstance(c, Candidate) and c.name not in pruned]
    for number, wave in enumerate(placed_waves(ctx, single), 1):
        if len(wave) > 1:  # on disjoint GPUs at the same time (pipeline/side_by_side.py)
            run_wave(ctx, wave, number)
        else:
            one_candidate(ctx, wave[0][0])
    for pair in todo:  # a prefill/decode pair holds its two pools alone on the cluster
        if isinstance(pair, DisaggCandidate) and pair.name not in pruned:
            one_candidate(ctx, pair)


def _create_run(ctx: SweepContext, spec_path: str | None) -> None:
    spec = ctx.spec
    ctx.store.create_run(
        run_id=ctx.run_id,
        spec_path=spec_path,
        spec_json=spec.model_dump(mode="json"),
        spec_hash=spec_hash(spec),
        # A real engine's version is what the spec expects (checked where given); the simulator's is
        # this orch's.
        engine_version=spec.engine.version
        or (f"orch-sim {orch_version()}" if ctx.engine.simulated else None),
        engine=spec.engine.name,
        model=ctx.inputs.cfg.name,
        model_config_hash=model_config_hash(ctx.inputs.cfg),
        orch_version=orch_version(),
        hardware=hardware_seen(),
        metadata=dict(spec.metadata),
    )
    ctx.records.set_sweep(SweepMode("served" if ctx.served else "virtual", ctx.opts.side_by_side or "auto"))
    ctx.records.set_engine_settings(ctx.settings)


def sweep_result(ctx: SweepContext, names: Sequence[str] | None = None) -> SweepResult:
    outcomes = outcomes_from_store(ctx.store, ctx.run_id, names)
    return SweepResult(ctx.run_id, select(outcomes, ctx.spec.objective), tuple(outcomes))


def prune(ctx: SweepContext, candidates: Sequence[AnyCandidate]) -> dict[str, str]:
    """Candidates the simulator predicts to lose clearly (pipeline/prune.py); served runs only: in
    virtual time the prediction is the measurement, so everything is measured."""
    if not ctx.served or ctx.opts.measure_all or len(candidates) < 2:
        return {}
    predicted = []
    for c in candidates:
        row = plan_row(ctx, c)
        if row.rejected_because and not ctx.opts.force:
            continue
        ctx.obs.phase(c.name, "predict (virtual time)")
        predicted.append(predict_outcome(ctx, c, row))
    return dominated(predicted, ctx.spec.objective)


def one_candidate(ctx: SweepContext, candidate: AnyCandidate) -> None:
    """Plan, then measure one candidate alone (served or in virtual time); store its status."""
    name, obs, store = candidate.name, ctx.obs, ctx.store
    obs.phase(name, "plan")
    try:
        row = plan_row(ctx, candidate)
    except SpecError as exc:  # the cost model cannot describe it (e.g. expert slots that do not divide)
        store.set_layout(ctx.run_id, name, candidate.gpus, "rejected", reason=str(exc))
        obs.layout_done(name, "rejected", str(exc))
        return
    plan_d = finite(row.to_dict())
    if isinstance(candidate, DisaggCandidate):
        plan_d["split"] = candidate.to_dict()  # the stored run records both pools
    if row.rejected_because and not ctx.opts.force:
        reason = "; ".join(row.rejected_because)
        store.set_layout(ctx.run_id, name, candidate.gpus, "rejected", reason=reason, plan=plan_d)
        obs.layout_done(name, "rejected", reason)
        return
    t0 = time.monotonic()
    try:
        if ctx.served:
            spent = served_candidate(ctx, candidate, row, plan_d)
        else:
            store.set_layout(ctx.run_id, name, candidate.gpus, "pending", plan=plan_d)
            spent = measure_candidate(ctx, candidate, row, virtual_point_fn(ctx, candidate))
        if spent:  # the layout's own overhead: deploy, warm-up, teardown (not its points)
            ctx.tally.layout_s.append(time.monotonic() - t0 - spent)
            ctx.save_progress()
    except StoreError:
        raise  # not the layout's fault: the sweep stops (the journal keeps what was measured)
    except (DeployError, OrchError, OSError) as exc:
        store.set_layout(ctx.run_id, name, candidate.gpus, "failed", reason=str(exc))
        obs.layout_done(name, "failed", str(exc).splitlines()[0])
        return
    store.set_layout(ctx.run_id, name, candidate.gpus, "measured")
    obs.layout_done(name, "measured", None)


def served_candidate(ctx: SweepContext, candidate: AnyCandidate, row: AnyRow,
                     plan_d: dict[str, Any]) -> float:
    """The candidate alone on the cluster: the serve step around its load points, its load generator
    in this process. Returns the seconds spent in load points."""
    name = candidate.name
    ctx.obs.phase(name, "compile")
    launch = launch_for(ctx, candidate)
    ctx.store.set_layout(ctx.run_id, name, candidate.gpus, "pending", plan=plan_d,
                         launch=launch.compiled.plan.to_dict())
    with serve(launch.target, launch.compiled, ctx.ready_timeout_s,
               phase=lambda what: ctx.obs.phase(name, what)) as served:
        bench = LocalBench(ctx.spec, ctx.obs, served.clients, candidate.layout, ctx.scale,
                           ctx.opts.engine_metrics_interval_s, served.engines)
        return measure_candidate(ctx, candidate, row, served_point_fn(ctx, candidate, served, bench))


def _record_timing(ctx: SweepContext, wall_s: float, candidates: Sequence[AnyCandidate]) -> None:
    w = ctx.spec.workload
    rows = {r.layout: r for r in ctx.store.layouts(ctx.run_id)}
    measured = sum(1 for c in candidates if (r := rows.get(c.name)) is not None and r.status != "rejected")
    searched = not load_grid(w, ctx.opts.rates)
    loads = [x.load for o in outcomes_from_store(ctx.store, ctx.run_id) for x in o.points]
    rates = [x for x in loads if x is not None]  # or concurrencies: the grid is over the same axis
    whole = load_axis(w) == "concurrency"
    grid = exhaustive_grid_points(rates, w.search.tolerance_frac, searched, whole)
    t = timing(wall_s, ctx.tally.layout_s, ctx.tally.point_s, measured, grid, searched, whole)
    t = replace(t, points_measured=len(loads))  # stored, every session's (a kill may beat its tally)
    if ctx.tally.sessions > 1:
        together = f"; this run took {ctx.tally.sessions} sessions (--resume): the wall time, points and " \
            "layouts of all of them"
        t = replace(t, definition=t.definition + together)
    mode = ctx.records.sweep() or SweepMode("served" if ctx.served else "virtual", "auto")
    ctx.records.set_sweep(SweepMode(mode.mode, mode.side_by_side, asdict(t), ctx.tally.progress()))


__all__ = [
    "DEFAULT_READY_TIMEOUT_S", "Observer", "Sweep", "SweepOptions", "SweepResult", "one_candidate",
    "outcomes_from_store", "point_outcome", "prune", "run_sweep", "served_candidate", "sweep_result",
]
