"""The deploy target a sweep spec asks for: local processes, a Ray cluster or a Kubernetes cluster."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.deploy.local import LocalProcessTarget
from orchestrator.deploy.ray import RayTarget
from orchestrator.engines.base import Placement
from orchestrator.errors import SpecError
from orchestrator.spec.models import KubernetesTarget, LocalTarget, TargetSpec
from orchestrator.spec.models import RayTarget as RayTargetSpec

if TYPE_CHECKING:
    from orchestrator.deploy.k8s import KubernetesRunTarget

def preflight(target: TargetSpec) -> None:
    """What can be checked before the first layout: on Kubernetes, that a kubeconfig (or the in-cluster
    config) loads, so a sweep without one stops with one line instead of failing every layout."""
    if isinstance(target, KubernetesTarget):
        from orchestrator.deploy.k8s import api_client

        api_client(target).close()


def probe_host(target: TargetSpec, where: Placement) -> str:
    """Where free ports are looked for: the local target's node; for Ray, this machine (each actor
    checks its ports again on its own node before it starts)."""
    return where.nodes[0] if isinstance(target, LocalTarget) else "127.0.0.1"


def make_target(
    target: TargetSpec, workdir: Path, where: Placement, *, run_id: str = "", spec_hash: str | None = None
) -> LocalProcessTarget | RayTarget | KubernetesRunTarget:
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
