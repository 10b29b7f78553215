"""Every sensible layout for a cluster: TP in powers of two within a node, PP across nodes, replicas
to fill the cluster, and for MoE models DP+EP groups."""

from __future__ import annotations

from orchestrator.catalog.types import ModelConfig
from orchestrator.layout import Layout
from orchestrator.plan.checks import Cluster


def _powers_of_two(limit: int) -> list[int]:
    out, n = [], 1
    while n <= limit:
        out.append(n)
        n *= 2
    return out


def _fill(tp: int, pp: int, dp: int, ep: bool, cluster: Cluster) -> Layout | None:
    per_replica = tp * pp * dp
    if per_replica > cluster.gpus:
        return None
    if per_replica > cluster.gpus_per_node and per_replica % cluster.gpus_per_node:
        return None
    return Layout(tp=tp, pp=pp, dp=dp, ep=ep, replicas=cluster.gpus // per_replica)


def enumerate_layouts(cfg: ModelConfig, cluster: Cluster) -> list[Layout]:
    found: set[Layout] = set()
    tps = [t for t in _powers_of_two(cluster.gpus_per_node) if cfg.num_heads % t == 0]
    pps = [p for p in _powers_of_two(cluster.gpus) if p <= cfg.num_layers]
    for tp in tps:
        for pp in pps:
            layout = _fill(tp, pp, 1, False, cluster)
            if layout is not None:
                found.add(layout)
    if cfg.is_moe:
        for tp in tps:
            for dp in _powers_of_two(cluster.gpus // tp):
                if cfg.num_routed_experts % (tp * dp):
                    continue
                layout = _fill(tp, 1, dp, True, cluster)
                if layout is not None:
                    found.add(layout)
    return sorted(found, key=lambda lay: (lay.gpus_per_replica, lay.tp, lay.pp, lay.dp, lay.ep))
