"""The deploy target a sweep spec asks for: local processes, a Ray cluster or a Kubernetes cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.deploy.base import Target
from orchestrator.deploy.local import LocalProcessTarget
from orchestrator.deploy.ray import RayTarget
from orchestrator.engines import Placement, get_engine
from orchestrator.errors import SpecError
from orchestrator.extras import require_for_target
from orchestrator.spec.models import SweepSpec
from orchestrator.spec.targets import KubernetesTarget, LocalTarget, TargetSpec
from orchestrator.spec.targets import RayTarget as RayTargetSpec


def preflight(target: TargetSpec) -> None:
    """What can be checked before the first layout: on Kubernetes, that a kubeconfig (or the in-cluster
    config) loads, so a sweep without one stops with one line instead of failing every layout."""
    if isinstance(target, KubernetesTarget):
        from orchestrator.deploy.k8s_api import api_client

        api_client(target).close()


def check_runs_here(spec: SweepSpec, source: str) -> None:
    """The local target runs every process on this machine: a real engine cannot span several nodes
    there (the simulator can: one process stands in for a whole multi-node replica). A Ray or Kubernetes
    target needs its extra installed."""
    require_for_target(spec.target.kind, f"{source}: target.kind {spec.target.kind!r}")
    nodes = spec.hardware.nodes
    if isinstance(spec.target, LocalTarget) and nodes > 1 and not get_engine(spec.engine.name).simulated:
        raise SpecError(
            f"{source}: hardware.nodes is {nodes} but target.kind 'local' runs every engine on this machine; "
            f"a multi-node {spec.engine.name} sweep needs target.kind: ray (or kubernetes); "
            "engine.name: sim (or --engine sim) simulates it here"
        )


def probe_host(target: TargetSpec, where: Placement) -> str:
    """Where free ports are looked for: the local target's node (loopback when the spec has several,
    which only the simulator runs here); for Ray, this machine (each actor checks its ports again on
    its own node before it starts)."""
    if isinstance(target, LocalTarget) and len(where.nodes) == 1:
        return where.nodes[0]
    return "127.0.0.1"


def make_target(
    target: TargetSpec, workdir: Path, where: Placement, *, run_id: str = "", spec_hash: str | None = None
) -> Target[Any]:
    """The deploy target the spec's `target` section names, for one candidate's work directory."""
    if isinstance(target, KubernetesTarget):
        # Imported here: the kubernetes client is a heavy, optional dependency (extra [k8s]).
        from orchestrator.deploy.k8s import KubernetesRunTarget

        return KubernetesRunTarget(target, run_id or workdir.parent.name, workdir, spec_hash=spec_hash)
    if isinstance(target, LocalTarget):
        return LocalProcessTarget(workdir)
    if isinstance(target, RayTargetSpec):
        return RayTarget(
            workdir,
            address=target.address,
            namespace=target.namespace,
            runtime_env=target.runtime_env,
            gpus_per_node=where.gpus_per_node,
            on_cpu=where.on_cpu,
            node_names=where.nodes,
        )
    raise SpecError(f"target.kind: {target.kind!r} is not a deploy target orch knows")
