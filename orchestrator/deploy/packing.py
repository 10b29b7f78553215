"""Which layouts can be measured at the same time: waves of layouts on disjoint GPUs. Pure.

The cluster is `nodes` nodes of `gpus_per_node` GPUs. A replica that fits on one node stays on one
node (a TP group is never split over the slow inter-node link when one node holds it), in a block
of its size aligned to its size (GPUs 0-3 or 4-7 for four, never 2-5), first fit over the nodes in
order; a replica bigger than a node takes whole nodes. Layouts are placed biggest replica first
(then most GPUs, then the order given), each into the first wave with room, else a new wave: first
fit decreasing, deterministic for the same input; the waves come in the order of their first
layout in the input. A layout that cannot be placed on the empty
cluster at all gets a wave of its own with no GPUs, so that its deploy reports why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.layout import Layout


@dataclass(frozen=True)
class Block:
    """GPUs of one node held by one replica."""

    node: int
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Placed:
    layout: Layout
    replicas: tuple[tuple[Block, ...], ...]  # per replica, its blocks (one per node it spans); () = unplaced

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(sorted({b.node for blocks in self.replicas for b in blocks}))

    def usable_gpus(self, nodes: int) -> tuple[tuple[int, ...], ...]:
        """Per node of the cluster, the GPU ids this layout holds (engines.base.Placement.usable_gpus)."""
        held: list[set[int]] = [set() for _ in range(nodes)]
        for blocks in self.replicas:
            for b in blocks:
                held[b.node].update(b.gpus)
        return tuple(tuple(sorted(ids)) for ids in held)

    def to_dict(self, node_names: Sequence[str]) -> dict[str, Any]:
        return {
            "nodes": [node_names[n] for n in self.nodes],
            "replicas": [[{"node": node_names[b.node], "gpu_ids": list(b.gpus)} for b in blocks]
                         for blocks in self.replicas],
        }


@dataclass(eq=False)  # waves compare by identity
class _Wave:
    free: list[list[bool]]  # per node, per GPU: still free
    placed: list[tuple[int, Placed]] = field(default_factory=list)  # (index in the input, placement)


def pack(layouts: Sequence[Layout], nodes: int, gpus_per_node: int) -> tuple[tuple[Placed, ...], ...]:
    """The layouts in waves; inside a wave, in the order given. See the module docstring."""
    if nodes < 1 or gpus_per_node < 1:
        raise ValueError(f"a cluster of {nodes} x {gpus_per_node} GPUs")
    order = sorted(range(len(layouts)), key=lambda i: (-layouts[i].gpus_per_replica, -layouts[i].gpus, i))
    waves: list[_Wave] = []
    alone: list[tuple[int, Placed]] = []
    for i in order:
        layout = layouts[i]
        if _place(layout, _empty(nodes, gpus_per_node)) is None:
            alone.append((i, Placed(layout, ())))
            continue
        for w in [*waves, _Wave(_empty(nodes, gpus_per_node))]:
            placed = _place(layout, w.free)
            if placed is not None:
                w.placed.append((i, placed))
                if w not in waves:
                    waves.append(w)
                break
    groups = [sorted(w.placed, key=lambda x: x[0]) for w in waves] + [[x] for x in alone]
    groups.sort(key=lambda g: g[0][0])  # waves in the order of their first layout in the input
    return tuple(tuple(p for _, p in g) for g in groups)


def _empty(nodes: int, gpus_per_node: int) -> list[list[bool]]:
    return [[True] * gpus_per_node for _ in range(nodes)]


def _place(layout: Layout, free: list[list[bool]]) -> Placed | None:
    """Take the layout's GPUs from `free` (changed only when every replica fits)."""
    gpn = len(free[0])
    gpr, trial = layout.gpus_per_replica, [row[:] for row in free]
    replicas: list[tuple[Block, ...]] = []
    if gpr <= gpn:
        for _ in range(layout.replicas):
            block = _block(trial, gpr)
            if block is None:
                return None
            replicas.append((block,))
    else:
        if gpr % gpn:
            return None
        span = gpr // gpn
        for _ in range(layout.replicas):
            whole = [n for n, row in enumerate(trial) if all(row)][:span]
            if len(whole) < span:
                return None
            for n in whole:
                trial[n] = [False] * gpn
            replicas.append(tuple(Block(n, tuple(range(gpn))) for n in whole))
    free[:] = trial
    return Placed(layout, tuple(replicas))


def _block(free: list[list[bool]], size: int) -> Block | None:
    for n, row in enumerate(free):
        for start in range(0, len(row) - size + 1, size):
            if all(row[start : start + size]):
                for g in range(start, start + size):
                    row[g] = False
                return Block(n, tuple(range(start, start + size)))
    return None


def nodes_held(node_gpus: Sequence[float], gpus_per_node: int) -> int:
    """How many nodes of `gpus_per_node` GPUs a cluster of nodes with these GPU counts holds (a Ray
    node of 16 GPUs holds two nodes of 8; one of 4 holds none of 8): what waves are sized for when
    the cluster has less than the spec claims."""
    return sum(int(g + 1e-9) // gpus_per_node for g in node_gpus if g > 0)
