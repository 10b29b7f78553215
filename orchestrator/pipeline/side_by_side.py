"""Layouts side by side: layouts that fit on disjoint GPUs of the cluster are deployed and measured
at the same time (tp8 on node0 while tp4x2 runs on node1), each with its load generator in its own
process (pipeline/loadgen_proc.py).

The waves come from deploy/packing.py over the spec's hardware (nodes x GPUs per node); on Ray, over
the nodes of that size the cluster holds when it has fewer (`_ray_nodes`). Each layout
of a wave gets its share of the GPUs in its placement (CUDA_VISIBLE_DEVICES on the local target; on
Ray and Kubernetes the cluster's scheduler picks the devices, the share only decides what runs
together), its own free ports, and a thread that deploys it, waits for it, warms it up and runs its
own load points (the spec's grid, or its own capacity search: layouts do not wait for each other).
The store and the display are used from the main thread only. Every deployment of the wave is torn
down on success, failure and Ctrl-C: each runs through the serve step (pipeline/serving.py), which the
main thread can cancel. Stored per layout (extra `placement/<layout>`): the wave, the
layouts it shared the cluster with, and the nodes and GPU ids of each replica; each load point says
which layouts were running beside it (`side_by_side_with`).

Co-running layouts share the host: on GPUs only its network and CPU (each layout's load generator
has its own process), in the served simulator also the CPU that keeps the simulated clocks (a point
that loses its clock is marked unreliable and measured again, as alone).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.candidate import Candidate
from orchestrator.compile import placement
from orchestrator.deploy.packing import Placed, nodes_held, pack
from orchestrator.deploy.ray import RayTarget
from orchestrator.deploy.targets import make_target
from orchestrator.engines import Placement
from orchestrator.errors import DeployError, OrchError, SpecError, StoreError
from orchestrator.loadgen.bench import LoadPoint, PointResult
from orchestrator.loadgen.metrics import finite
from orchestrator.pipeline.context import Observer, SweepContext
from orchestrator.pipeline.loadgen_proc import LoadgenProcess, MainThreadCalls, on_main_thread
from orchestrator.pipeline.points import AnyRow, measure_candidate, plan_row, served_point_fn
from orchestrator.pipeline.serving import Cancel, Cancelled, Launch, launch_for, port_block, serve
from orchestrator.spec.targets import RayTarget as RayTargetSpec
from orchestrator.store.extras import CLUSTER, PLACEMENT, named

JOIN_S = 120.0  # per thread, after a cancel: its teardown is under way


def waves(ctx: SweepContext, candidates: Sequence[Candidate]) -> tuple[tuple[Candidate, ...], ...]:
    """The candidates to measure in waves, each with its share of the cluster (`shares`); one per wave
    unless side by side is on. A candidate the planner rejects (without --force) needs no GPUs: it
    is recorded alone, as before."""
    return tuple(tuple(c for c, _ in w) for w in placed_waves(ctx, candidates))


def placed_waves(
    ctx: SweepContext, candidates: Sequence[Candidate]
) -> tuple[tuple[tuple[Candidate, Placed], ...], ...]:
    """The waves, each candidate with its placement in the wave (deploy/packing.py)."""
    if not ctx.side_by_side or len(candidates) < 2:
        return tuple(((c, Placed(c.layout, ())),) for c in candidates)
    deployable: list[Candidate] = []
    alone: list[Candidate] = []
    for c in candidates:
        try:
            rejected = bool(plan_row(ctx, c).rejected_because) and not ctx.opts.force
        except SpecError:
            rejected = True
        (alone if rejected else deployable).append(c)
    where = placement(ctx.spec)
    nodes = len(where.nodes)
    if isinstance(ctx.spec.target, RayTargetSpec) and not where.on_cpu and len(deployable) > 1:
        nodes = _ray_nodes(ctx, where, nodes)
    by_layout = {c.layout: c for c in deployable}
    packed = pack([c.layout for c in deployable], nodes, where.gpus_per_node)
    return tuple(((c, Placed(c.layout, ())),) for c in alone) + tuple(
        tuple((by_layout[p.layout], p) for p in wave) for wave in packed
    )


def _ray_nodes(ctx: SweepContext, where: Placement, claimed: int) -> int:
    """The nodes to pack for on the Ray target: the spec's, unless the cluster holds fewer nodes of
    its size (stored, with one line the sweep prints: the `cluster` record). A cluster that does not
    answer is left to the first deploy, which says why."""
    target = make_target(ctx.spec.target, ctx.workdir, where)
    assert isinstance(target, RayTarget)  # the spec's target is Ray's
    try:
        ray = target.connect()
        node_gpus = [float(n["Resources"].get("GPU", 0.0)) for n in ray.nodes() if n.get("Alive")]
    except DeployError:
        return claimed
    held, gpn = nodes_held(node_gpus, where.gpus_per_node), where.gpus_per_node
    if held >= claimed:
        return claimed
    sized = max(1, held)
    note = (
        f"side by side: the spec claims {claimed} x {gpn} GPUs, the Ray cluster at "
        f"{target.address!r} has {sum(node_gpus):g} ({len(node_gpus)} node{'s' * (len(node_gpus) != 1)}); "
        f"layouts share it as "
        f"{sized} x {gpn}"
    )
    ctx.records.set_cluster({
        "source": "ray", "claimed_nodes": claimed, "gpus_per_node": gpn, "ray_node_gpus": node_gpus,
        "packed_nodes": sized, "note": note,
    })  # fmt: skip
    return sized


@dataclass
class _Run:
    """One candidate of a wave, run on its own thread."""

    candidate: Candidate
    row: AnyRow
    launch: Launch
    others: tuple[str, ...] = ()
    failed: str | None = None
    error: BaseException | None = None  # ends the sweep (a StoreError, or a bug) once the wave is down
    cancel: Cancel = field(default_factory=Cancel)
    worker: LoadgenProcess | None = None

    def stop(self) -> None:
        """From the main thread: stop its load generator and tear its deployment down now."""
        self.cancel.cancel()
        if self.worker is not None:
            self.worker.stop()


@dataclass(frozen=True)
class _ProcessBench:
    """A load point through the candidate's own load generator process (pipeline/points.Bench), with
    its progress forwarded to the display."""

    run: _Run
    obs: Observer

    def point(self, point: LoadPoint, num_requests: int | None, k: int) -> tuple[PointResult, dict[str, Any]]:
        worker, name = self.run.worker, self.run.candidate.name
        assert worker is not None  # started before the first point
        return worker.point(
            point, num_requests, k, self.run.cancel,
            lambda label, done, total: self.obs.request_progress(name, label, done, total),
        )


def run_wave(ctx: SweepContext, wave: Sequence[tuple[Candidate, Placed]], number: int) -> None:
    """Deploy and measure the wave's candidates at once; see the module docstring."""
    store, run_id, nodes = ctx.store, ctx.run_id, placement(ctx.spec).nodes
    runs: list[_Run] = []
    taken: set[int] = set()
    for candidate, placed in wave:
        name = candidate.name
        ctx.obs.phase(name, f"compile (side by side, wave {number})")
        row = plan_row(ctx, candidate)
        try:
            launch = launch_for(ctx, candidate, placed.usable_gpus(len(nodes)), frozenset(taken))
        except (DeployError, OrchError, OSError) as exc:
            store.set_layout(run_id, name, candidate.gpus, "failed", reason=str(exc))
            ctx.obs.layout_done(name, "failed", str(exc).splitlines()[0])
            continue
        taken |= port_block(launch)
        store.set_layout(run_id, name, candidate.gpus, "pending", plan=finite(row.to_dict()),
                         launch=launch.compiled.plan.to_dict())
        runs.append(_Run(candidate, row, launch))
    shares = {c.name: p for c, p in wave}
    for r in runs:
        r.others = tuple(o.candidate.name for o in runs if o is not r)
        ctx.records.set_placement(r.candidate.name, {
            "wave": number, "shared_cluster_with": list(r.others), **shares[r.candidate.name].to_dict(nodes)
        })
    ray_targets = [r.launch.target for r in runs if isinstance(r.launch.target, RayTarget)]
    if ray_targets:
        ray_targets[0].connect()  # once, on the main thread, before the threads share the driver
    calls = MainThreadCalls()
    view = ctx.on_thread(on_main_thread(ctx.store, calls), on_main_thread(ctx.obs, calls))
    threads = [threading.Thread(target=_candidate_thread, args=(view, r), daemon=True) for r in runs]
    try:
        for t in threads:
            t.start()
        calls.serve(threads)
    except BaseException:
        calls.close()
        for r in runs:  # teardown with signals deferred (the serve step): a second Ctrl-C waits
            r.stop()
        for t in threads:
            t.join(JOIN_S)
        raise
    for r in runs:
        if r.error is not None:
            raise r.error


def _candidate_thread(ctx: SweepContext, r: _Run) -> None:
    """One candidate of a wave: the serve step and its load points, its store and display calls made
    on the main thread (ctx is the thread's view)."""
    name, spec, t0, spent = r.candidate.name, ctx.spec, time.monotonic(), 0.0
    try:
        with serve(r.launch.target, r.launch.compiled, ctx.ready_timeout_s, cancel=r.cancel,
                   phase=lambda what: ctx.obs.phase(name, f"{what} (side by side)")) as served:
            r.worker = LoadgenProcess(spec, served.clients, r.candidate.layout, ctx.scale,
                                      ctx.opts.engine_metrics_interval_s)
            if r.cancel.is_set():
                raise Cancelled
            point_fn = served_point_fn(ctx, r.candidate, served, _ProcessBench(r, ctx.obs),
                                       beside={"side_by_side_with": list(r.others)})
            spent = measure_candidate(ctx, r.candidate, r.row, point_fn)
    except Cancelled:
        return
    except StoreError as exc:
        r.error = exc
    except (DeployError, OrchError, OSError) as exc:
        r.failed = str(exc)
    except BaseException as exc:  # a bug: the main thread raises it once the wave is torn down
        r.error = exc
    finally:
        if r.worker is not None:
            r.worker.stop()
    ctx.tally.layout_s.append(time.monotonic() - t0 - spent)
    ctx.save_progress()
    if r.error is not None:
        return
    status = "failed" if r.failed is not None else "measured"
    try:
        ctx.store.set_layout(ctx.run_id, name, r.candidate.gpus, status, reason=r.failed)
        ctx.obs.layout_done(name, status, None if r.failed is None else r.failed.splitlines()[0])
    except Cancelled:
        return
    except StoreError as exc:
        r.error = exc


def placement_lines(extras: dict[str, dict[str, Any]]) -> list[str]:
    """`orch sweep`/`orch report`: which layouts shared the cluster, on which GPUs (from a run's side
    records, store.extras)."""
    by_wave: dict[int, list[str]] = {}
    for name, p in named(extras, PLACEMENT).items():  # in the order stored: each wave in the spec's order
        gpus = ", ".join(
            "+".join(f"{b['node']} GPUs {_span(b['gpu_ids'])}" for b in blocks) for blocks in p["replicas"]
        )
        by_wave.setdefault(int(p["wave"]), []).append(f"{name} on {gpus}")
    lines = [f"  wave {w}: " + " | ".join(parts) for w, parts in sorted(by_wave.items())]
    head = "side by side (layouts that shared the cluster, measured at the same time):"
    cluster = extras.get(CLUSTER) or {}
    note = [str(cluster["note"])] if "note" in cluster else []
    return note + ([head, *lines] if lines else [])


def _span(ids: Sequence[int]) -> str:
    ids = list(ids)
    if ids and ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 1:
        return f"{ids[0]}-{ids[-1]}"
    return ",".join(map(str, ids))


__all__ = ["placed_waves", "placement_lines", "run_wave", "waves"]
