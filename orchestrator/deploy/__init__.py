"""Deploy targets: start a LaunchPlan, wait until it is healthy, always tear it down."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.faces import lazy_face

if TYPE_CHECKING:
    from orchestrator.deploy.base import Deployment as Deployment
    from orchestrator.deploy.base import Endpoint as Endpoint
    from orchestrator.deploy.base import Target as Target
    from orchestrator.deploy.base import deployed as deployed
    from orchestrator.deploy.base import free_base_port as free_base_port
    from orchestrator.deploy.base import signals_deferred as signals_deferred
    from orchestrator.deploy.fake import FakeTarget as FakeTarget
    from orchestrator.deploy.k8s_gc import collect_garbage as collect_garbage
    from orchestrator.deploy.local import LocalProcessTarget as LocalProcessTarget
    from orchestrator.deploy.packing import Placed as Placed
    from orchestrator.deploy.packing import nodes_held as nodes_held
    from orchestrator.deploy.packing import pack as pack
    from orchestrator.deploy.ray import RayTarget as RayTarget
    from orchestrator.deploy.targets import check_runs_here as check_runs_here
    from orchestrator.deploy.targets import make_target as make_target
    from orchestrator.deploy.targets import preflight as preflight
    from orchestrator.deploy.targets import probe_host as probe_host

__getattr__, __all__ = lazy_face(__name__, {
    "base": ("Deployment", "Endpoint", "Target", "deployed", "free_base_port", "signals_deferred",),
    "fake": ("FakeTarget",),
    "k8s_gc": ("collect_garbage",),
    "local": ("LocalProcessTarget",),
    "packing": ("Placed", "nodes_held", "pack",),
    "ray": ("RayTarget",),
    "targets": ("check_runs_here", "make_target", "preflight", "probe_host",),
})  # fmt: skip
