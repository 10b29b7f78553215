"""One layout on served engines: compile its launch plan, deploy it, warm it up, measure its load
points over HTTP with the load generator (Sweep._measure), tear it down (always: deploy.base.deployed).

`compile_layout` is shared with the side-by-side path (pipeline/side_by_side.py), which deploys
several compiled layouts at once on disjoint GPUs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from orchestrator.deploy.base import deployed, free_base_port
from orchestrator.deploy.targets import make_target, probe_host
from orchestrator.engines.base import PORT_STRIDE, LaunchPlan, Placement
from orchestrator.engines.from_spec import engine_options, placement
from orchestrator.engines.sim import sim_args_from_spec
from orchestrator.errors import DeployError
from orchestrator.layout import Layout
from orchestrator.loadgen.bench import PointResult
from orchestrator.loadgen.client import ClientConfig
from orchestrator.loadgen.engine_metrics import summarize_series
from orchestrator.pipeline.capacity import load_point
from orchestrator.pipeline.predict import predicted_metrics
from orchestrator.pipeline.repeats import reseeded
from orchestrator.pipeline.served import bench_point, warm_up
from orchestrator.plan.planner import PlanRow
from orchestrator.spec.load import spec_hash

if TYPE_CHECKING:
    from orchestrator.deploy.k8s import KubernetesRunTarget
    from orchestrator.deploy.local import LocalProcessTarget
    from orchestrator.deploy.ray import RayTarget
    from orchestrator.pipeline.sweep import Sweep

DEFAULT_READY_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Compiled:
    launch: LaunchPlan
    target: LocalProcessTarget | RayTarget | KubernetesRunTarget
    model_name: str  # what the clients ask for
    where: Placement


def compile_layout(
    sweep: Sweep,
    layout: Layout,
    usable_gpus: tuple[tuple[int, ...], ...] = (),
    avoid_ports: frozenset[int] = frozenset(),
) -> Compiled:
    """The layout's launch plan on free ports (none of `avoid_ports`, which wave mates hold) and its
    deploy target; `usable_gpus` confines it to its share of the cluster (side by side)."""
    spec, name = sweep.spec, sweep.name(layout).replace(" ", "_")  # a directory name
    opts = engine_options(spec, extra_env=tuple(sorted(spec.engine.env.items())))
    if spec.engine.name == "sim":
        opts = replace(opts, sim_args=sim_args_from_spec(spec))
    where = replace(placement(spec), usable_gpus=usable_gpus)
    reasons = sweep.engine.unsupported(layout, where)
    if reasons:
        raise DeployError(f"{spec.engine.name} cannot run {name}: " + "; ".join(reasons))
    slots, host = max(layout.replicas, 1), probe_host(spec.target, where)
    base_port = free_base_port(slots, host)
    for _ in range(100):  # ports are only checked free, not held, until the engines bind them
        if not avoid_ports & set(range(base_port, base_port + PORT_STRIDE * slots)):
            break
        base_port = free_base_port(slots, host, start=base_port + PORT_STRIDE * slots)
    where = replace(where, base_port=base_port)
    launch = sweep.engine.launch_plan(layout, opts, where)
    target = make_target(
        spec.target, sweep.workdir / name, where, run_id=sweep.run_id, spec_hash=spec_hash(spec)
    )
    return Compiled(launch, target, opts.served_model_name or opts.model, where)


def ready_timeout_s(sweep: Sweep) -> float:
    return sweep.opts.ready_timeout_s or sweep.spec.engine.startup_s or DEFAULT_READY_TIMEOUT_S


def clients_of(endpoints: Any, model_name: str) -> tuple[ClientConfig, ...]:
    return tuple(ClientConfig(ep.openai_base_url, model_name, ignore_eos=True) for ep in endpoints)


def deploy_and_measure(sweep: Sweep, layout: Layout, row: PlanRow, plan_d: dict[str, Any]) -> None:
    """The layout alone on the cluster, its load generator in this process."""
    name, spec, obs = sweep.name(layout), sweep.spec, sweep.obs
    obs.phase(name, "compile")
    c = compile_layout(sweep, layout)
    sweep.store.set_layout(
        sweep.run_id, name, layout.gpus, "pending", plan=plan_d, launch=c.launch.to_dict()
    )
    obs.phase(name, "deploy")
    with deployed(c.target, c.launch, ready_timeout_s(sweep)) as dep:
        clients = clients_of(dep.endpoints, c.model_name)
        obs.phase(name, "warm-up")
        asyncio.run(warm_up(clients))

        def served_point(load: float, k: int) -> tuple[PointResult, dict[str, Any]]:
            # try k of the point is measured with workload seed + k (pipeline/repeats.py)
            n, point, spec_k = sweep.opts.num_requests, load_point(spec.workload, load), reseeded(spec, k)
            result, series = bench_point(
                spec_k, sweep.obs, clients, layout, point, n, sweep.scale,
                sweep.opts.engine_metrics_interval_s,
            )
            sweep.engine_series = series  # stored after the point (_measure): the point comes first
            c.target.check_alive(dep)
            return result, {
                "predicted": predicted_metrics(
                    spec_k, sweep.inputs, layout, point.rate, n, point.concurrency
                ),
                "engine": summarize_series(series),
            }

        sweep._measure(layout, row, served_point)
        obs.phase(name, "teardown")
