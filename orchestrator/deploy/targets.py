"""The deploy target a sweep spec asks for: local processes or a Ray cluster (Kubernetes: Helm)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.deploy.local import LocalProcessTarget
from orchestrator.deploy.ray import RayTarget
from orchestrator.engines.base import Placement
from orchestrator.errors import SpecError
from orchestrator.spec.models import KubernetesTarget, LocalTarget, SweepSpec, TargetSpec
from orchestrator.spec.models import RayTarget as RayTargetSpec

KUBERNETES_HINT = (
    "target.kind: 'kubernetes' is not swept by orch itself; sweep with kind: local | ray, then write the "
    "winner's Helm values with `orch promote RUN --format helm-values` and install them with helm"
)


def check_sweepable(target: TargetSpec) -> None:
    if isinstance(target, KubernetesTarget):
        raise SpecError(KUBERNETES_HINT)


def check_runs_here(spec: SweepSpec, source: str) -> None:
    """The local target runs every process on this machine: a real engine cannot span several nodes
    there (the simulator can: one process stands in for a whole multi-node replica)."""
    nodes = spec.hardware.nodes
    if isinstance(spec.target, LocalTarget) and nodes > 1 and spec.engine.name != "sim":
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


def make_target(target: TargetSpec, workdir: Path, where: Placement) -> LocalProcessTarget | RayTarget:
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
    raise SpecError(KUBERNETES_HINT)
