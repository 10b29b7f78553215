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
down on success, failure and Ctrl-C. Stored per layout (extra `placement/<layout>`): the wave, the
layouts it shared the cluster with, and the nodes and GPU ids of each replica; each load point says
which layouts were running beside it (`side_by_side_with`).

Co-running layouts share the host: on GPUs only its network and CPU (each layout's load generator
has its own process), in the served simulator also the CPU that keeps the simulated clocks (a point
that loses its clock is marked unreliable and measured again, as alone).
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from orchestrator.deploy.base import signals_deferred
from orchestrator.deploy.packing import Placed, nodes_held, pack
from orchestrator.deploy.ray import RayTarget
from orchestrator.deploy.targets import make_target
from orchestrator.engines.base import PORT_STRIDE, Placement
from orchestrator.engines.from_spec import is_cpu, placement
from orchestrator.errors import DeployError, OrchError, SpecError, StoreError
from orchestrator.layout import Layout
from orchestrator.loadgen.bench import PointResult
from orchestrator.loadgen.engine_metrics import summarize_series
from orchestrator.loadgen.metrics import finite
from orchestrator.pipeline.capacity import load_point
from orchestrator.pipeline.loadgen_proc import Cancelled, LoadgenProcess, MainThreadCalls, OnMainThread
from orchestrator.pipeline.predict import predicted_metrics
from orchestrator.pipeline.repeats import reseeded
from orchestrator.pipeline.served import warm_up
from orchestrator.pipeline.served_layout import Compiled, clients_of, compile_layout, ready_timeout_s
from orchestrator.plan.planner import PlanRow
from orchestrator.spec.models import SweepSpec
from orchestrator.spec.targets import RayTarget as RayTargetSpec

if TYPE_CHECKING:
    from orchestrator.deploy.base import Deployment
    from orchestrator.pipeline.sweep import Sweep

SideBySide = Literal["auto", "on", "off"]
JOIN_S = 120.0  # per thread, after a cancel: its teardown is under way


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
    real_gpus = spec.engine.name != "sim" and not is_cpu(spec.hardware.gpu)
    return real_gpus and spec.target.kind in ("local", "ray")


def waves(sweep: Sweep, layouts: Sequence[Layout]) -> tuple[tuple[Placed, ...], ...]:
    """The layouts to measure in waves; one layout per wave unless side by side is on. A layout the
    planner rejects (without --force) needs no GPUs: it is recorded alone, as before."""
    if not sweep.side_by_side or len(layouts) < 2:
        return tuple((Placed(x, ()),) for x in layouts)
    deployable: list[Layout] = []
    alone: list[Layout] = []
    for layout in layouts:
        try:
            rejected = bool(sweep._plan(layout).rejected_because) and not sweep.opts.force
        except SpecError:
            rejected = True
        (alone if rejected else deployable).append(layout)
    where = placement(sweep.spec)
    nodes = len(where.nodes)
    if isinstance(sweep.spec.target, RayTargetSpec) and not where.on_cpu and len(deployable) > 1:
        nodes = _ray_nodes(sweep, where, nodes)
    packed = pack(deployable, nodes, where.gpus_per_node)
    return tuple((Placed(x, ()),) for x in alone) + packed


def _ray_nodes(sweep: Sweep, where: Placement, claimed: int) -> int:
    """The nodes to pack for on the Ray target: the spec's, unless the cluster holds fewer nodes of
    its size (stored, with one line the sweep prints: extra `cluster`). A cluster that does not
    answer is left to the first deploy, which says why."""
    target = make_target(sweep.spec.target, sweep.workdir, where)
    assert isinstance(target, RayTarget)
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
    sweep.store.set_extra(sweep.run_id, "cluster", {
        "source": "ray", "claimed_nodes": claimed, "gpus_per_node": gpn, "ray_node_gpus": node_gpus,
        "packed_nodes": sized, "note": note,
    })  # fmt: skip
    return sized


@dataclass
class _Run:
    """One layout of a wave, run on its own thread."""

    layout: Layout
    row: PlanRow
    compiled: Compiled
    others: tuple[str, ...]
    failed: str | None = None
    error: BaseException | None = None  # ends the sweep (a StoreError, or a bug) once the wave is down

    def __post_init__(self) -> None:
        self.cancelled = threading.Event()
        self.lock = threading.Lock()
        self.dep: Deployment | None = None
        self.worker: LoadgenProcess | None = None

    def hold(self, dep: Deployment) -> None:
        with self.lock:
            self.dep = dep
        if self.cancelled.is_set():  # the wave was stopped while this one deployed
            self.teardown()
            raise Cancelled

    def teardown(self) -> None:
        with self.lock:
            dep, self.dep = self.dep, None
        if dep is not None:
            self.compiled.target.teardown(dep)

    def cancel(self) -> None:
        self.cancelled.set()
        if self.worker is not None:
            self.worker.stop()
        self.teardown()


def run_wave(sweep: Sweep, wave: Sequence[Placed], number: int) -> None:
    """Deploy and measure the wave's layouts at once; see the module docstring."""
    store, run_id, nodes = sweep.store, sweep.run_id, placement(sweep.spec).nodes
    runs: list[_Run] = []
    taken: set[int] = set()
    for placed in wave:
        layout, name = placed.layout, sweep.name(placed.layout)
        sweep.obs.phase(name, f"compile (side by side, wave {number})")
        row = sweep._plan(layout)
        try:
            c = compile_layout(sweep, layout, placed.usable_gpus(len(nodes)), frozenset(taken))
        except (DeployError, OrchError, OSError) as exc:
            store.set_layout(run_id, name, layout.gpus, "failed", reason=str(exc))
            sweep.obs.layout_done(name, "failed", str(exc).splitlines()[0])
            continue
        # The whole port block (every replica slot's http and side ports), not just the listed ports.
        taken.update(range(c.where.base_port, c.where.base_port + PORT_STRIDE * max(layout.replicas, 1)))
        store.set_layout(run_id, name, layout.gpus, "pending", plan=finite(row.to_dict()),
                         launch=c.launch.to_dict())
        runs.append(_Run(layout, row, c, ()))
    for r in runs:
        r.others = tuple(str(o.layout) for o in runs if o is not r)
        placed = next(p for p in wave if p.layout == r.layout)
        store.set_extra(run_id, f"placement/{r.layout}", {
            "wave": number, "shared_cluster_with": list(r.others), **placed.to_dict(nodes)
        })
    if any(isinstance(r.compiled.target, RayTarget) for r in runs):
        next(r.compiled.target for r in runs if isinstance(r.compiled.target, RayTarget)).connect()
    calls = MainThreadCalls()
    threads = [threading.Thread(target=_layout_thread, args=(sweep, r, calls), daemon=True) for r in runs]
    try:
        for t in threads:
            t.start()
        calls.serve(threads)
    except BaseException:
        with signals_deferred():  # a second Ctrl-C must not leave engines behind
            calls.close()
            for r in runs:
                r.cancel()
            for t in threads:
                t.join(JOIN_S)
        raise
    for r in runs:
        if r.error is not None:
            raise r.error


def _layout_thread(sweep: Sweep, r: _Run, calls: MainThreadCalls) -> None:
    name, c, spec = sweep.name(r.layout), r.compiled, sweep.spec
    view = copy.copy(sweep)  # the sweep as this thread sees it: its own engine series, store via main
    view.store = OnMainThread(sweep.store, calls)  # type: ignore[assignment]
    view.obs = OnMainThread(sweep.obs, calls)
    view.engine_series = {}
    t0, in_points = time.monotonic(), [0.0]
    try:
        view.obs.phase(name, "deploy (side by side)")
        r.hold(c.target.deploy(c.launch))
        assert r.dep is not None
        dep = r.dep
        c.target.wait_ready(dep, ready_timeout_s(sweep))
        clients = clients_of(dep.endpoints, c.model_name)
        view.obs.phase(name, "warm-up")
        asyncio.run(warm_up(clients))
        r.worker = LoadgenProcess(spec, clients, r.layout, sweep.scale, sweep.opts.engine_metrics_interval_s)
        if r.cancelled.is_set():
            raise Cancelled

        def point(load: float, k: int) -> tuple[PointResult, dict[str, Any]]:
            assert r.worker is not None
            t = time.monotonic()
            lp, n = load_point(spec.workload, load), sweep.opts.num_requests
            result, series = r.worker.point(
                lp, n, k, r.cancelled,
                lambda label, done, total: view.obs.request_progress(name, label, done, total),
            )  # fmt: skip
            in_points[0] += time.monotonic() - t
            view.engine_series = series
            c.target.check_alive(dep)
            return result, {
                "predicted": predicted_metrics(reseeded(spec, k), sweep.inputs, r.layout, lp.rate, n,
                                               lp.concurrency),
                "engine": summarize_series(series),
                "side_by_side_with": list(r.others),
            }

        view._measure(r.layout, r.row, point)
        view.obs.phase(name, "teardown")
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
        r.teardown()
    sweep._layout_s.append(time.monotonic() - t0 - in_points[0])
    if r.error is not None:
        return
    status = "failed" if r.failed is not None else "measured"
    try:
        view.store.set_layout(sweep.run_id, name, r.layout.gpus, status, reason=r.failed)
        view.obs.layout_done(name, status, None if r.failed is None else r.failed.splitlines()[0])
    except Cancelled:
        return
    except StoreError as exc:
        r.error = exc


def placement_lines(extras: dict[str, dict[str, Any]]) -> list[str]:
    """`orch sweep`/`orch report`: which layouts shared the cluster, on which GPUs."""
    by_wave: dict[int, list[str]] = {}
    for key, p in extras.items():  # in the order stored: each wave in the order of the spec
        if not key.startswith("placement/"):
            continue
        gpus = ", ".join(
            "+".join(f"{b['node']} GPUs {_span(b['gpu_ids'])}" for b in blocks) for blocks in p["replicas"]
        )
        by_wave.setdefault(int(p["wave"]), []).append(f"{key.removeprefix('placement/')} on {gpus}")
    lines = [f"  wave {w}: " + " | ".join(parts) for w, parts in sorted(by_wave.items())]
    head = "side by side (layouts that shared the cluster, measured at the same time):"
    note = [str(extras["cluster"]["note"])] if "note" in extras.get("cluster", {}) else []
    return note + ([head, *lines] if lines else [])


def _span(ids: Sequence[int]) -> str:
    ids = list(ids)
    if ids and ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 1:
        return f"{ids[0]}-{ids[-1]}"
    return ",".join(map(str, ids))
