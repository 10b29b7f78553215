"""Placement groups of the Ray target, pure: one per replica (PACK on one node; STRICT_SPREAD with one
bundle per node for a replica spanning nodes), which process goes in which bundle, and the placeholder
node names of a launch plan replaced by the addresses Ray placed the bundles on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.engines.base import ReplicaPlan
from orchestrator.errors import SpecError


@dataclass(frozen=True)
class ActorSlot:
    process: int  # index into the replica's processes
    bundle: int
    num_gpus: int


@dataclass(frozen=True)
class ReplicaBundles:
    strategy: str  # PACK (one node) | STRICT_SPREAD (one bundle per node)
    bundles: tuple[dict[str, float], ...]
    actors: tuple[ActorSlot, ...]
    bundle_of_node: dict[int, int] = field(default_factory=dict)  # plan node_index -> bundle index


def replica_bundles(
    replica: ReplicaPlan, gpus_per_replica: int, gpus_per_node: int, on_cpu: bool = False
) -> ReplicaBundles:
    """The placement group of one replica: bundles, strategy and the bundle of every process."""
    if gpus_per_replica > gpus_per_node and gpus_per_replica % gpus_per_node:
        raise SpecError(
            f"hardware.gpus_per_node: a replica needs {gpus_per_replica} GPUs, not a multiple of "
            f"{gpus_per_node}; pick a layout whose replica fills whole nodes"
        )
    nodes = sorted({p.node_index for p in replica.processes})
    wanted = max(1, gpus_per_replica // gpus_per_node) if gpus_per_replica > gpus_per_node else 1
    if len(nodes) > wanted:
        raise SpecError(
            f"launch plan: a replica of {gpus_per_replica} GPUs has processes on {len(nodes)} nodes; "
            "compile the plan with the spec's hardware.gpus_per_node"
        )
    per_bundle = min(gpus_per_replica, gpus_per_node)
    bundle_of_node = {n: i for i, n in enumerate(nodes)}
    actors: list[ActorSlot] = []
    gpus = [0] * wanted
    cpus = [0] * wanted
    for b in range(wanted):
        members = [i for i, p in enumerate(replica.processes) if bundle_of_node.get(p.node_index) == b]
        pinned = any(replica.processes[i].gpu_ids for i in members)
        for k, i in enumerate(members):
            if on_cpu:
                n = 0
            elif pinned:
                n = len(replica.processes[i].gpu_ids)
            else:  # the sim: one process stands for the whole replica and holds its GPUs
                n = per_bundle if k == 0 else 0
            actors.append(ActorSlot(i, b, n))
            gpus[b] += n
            cpus[b] += 1
    bundles = []
    for b in range(wanted):
        bundle: dict[str, float] = {"CPU": float(max(1, cpus[b]))}
        if not on_cpu and max(gpus[b], per_bundle) > 0:  # a pair's router holds no GPU
            bundle["GPU"] = float(max(gpus[b], per_bundle))
        bundles.append(bundle)
    strategy = "PACK" if wanted == 1 else "STRICT_SPREAD"
    return ReplicaBundles(strategy, tuple(bundles), tuple(actors), bundle_of_node)


def substitute_hosts(text: str, hosts: Mapping[str, str]) -> str:
    """Replace placeholder node names in one argv token or env value: `node0`, `--x=node0`, `node0:29500`,
    and URLs such as `http://node1:8000` (a pair's router addresses its pool servers so)."""
    if not hosts:
        return text
    scheme, sep, rest = text.partition("://")
    if sep and scheme.isalpha():
        return f"{scheme}://{substitute_hosts(rest, hosts)}"
    prefix, _, value = text.rpartition("=") if text.startswith("-") and "=" in text else ("", "", text)
    head, sep, port = value.partition(":")
    if head in hosts and (not sep or port.isdigit()):
        value = hosts[head] + sep + port
    return f"{prefix}={value}" if prefix else value
