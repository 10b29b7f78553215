"""Disaggregated prefill/decode layouts: a prefill pool and a decode pool, each an ordinary Layout.

Grammar: ``p:<layout>+d:<layout>``, e.g. ``p:tp4+d:tp4``, ``p:tp2x2+d:tp4``, ``p:tp4dp8ep+d:tp4dp80ep``
(DeepSeek-V3's serving units). Each side has its own replica count (``x<R>`` inside the side). The
pools sit on disjoint GPUs, so the pair needs the sum of both. Input may name the decode pool first and
may carry spaces around ``+``; `str()` writes the canonical ``p:...+d:...`` form and round-trips.

A comma-separated list mixes both kinds (``tp8,p:tp4+d:tp4``): `parse_any_layouts`.

Structural checks that need only the cluster's shape live here too (`pool_problems`): a pool larger
than the hardware, pools that together need more GPUs than there are (they would have to share GPUs),
replicas that cannot be packed onto whole nodes. What the engines can hand over between two
parallelisms is in `kv_handover.py`; memory and time are the planner's (plan/disagg.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.errors import SpecError
from orchestrator.layout import Layout, parse_layout

HINT = "expected p:<layout>+d:<layout>, e.g. p:tp4+d:tp4 or p:tp2x2+d:tp4"
ROLES = ("prefill", "decode")


@dataclass(frozen=True, order=True)
class DisaggLayout:
    """A prefill pool and a decode pool on disjoint GPUs, with a router in front of both."""

    prefill: Layout
    decode: Layout

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus

    def pool(self, role: str) -> Layout:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        return self.prefill if role == "prefill" else self.decode

    def __str__(self) -> str:
        return f"p:{self.prefill}+d:{self.decode}"

    @classmethod
    def parse(cls, text: str) -> DisaggLayout:
        return parse_disagg(text)


AnyLayout = Layout | DisaggLayout


def is_disagg_text(text: str) -> bool:
    """Whether a layout string is meant as a prefill/decode pair (so its errors speak of pools)."""
    s = text.strip().lower()
    return "+" in s or s.startswith(("p:", "d:"))


def parse_disagg(text: str) -> DisaggLayout:
    """Parse ``p:<layout>+d:<layout>``; raise SpecError naming the layout, the part and the fix."""
    raw = text
    parts = [part.strip() for part in text.strip().lower().split("+")]
    if len(parts) != 2 or not all(parts):
        raise SpecError(f"layout {raw!r}: a disaggregated layout is two pools joined by '+'; {HINT}")
    sides: dict[str, Layout] = {}
    for part in parts:
        role_key, colon, body = part.partition(":")
        role_key = role_key.strip()
        if not colon or role_key not in ("p", "d"):
            raise SpecError(f"layout {raw!r}: pool {part!r} must start with 'p:' (prefill) or 'd:' "
                            f"(decode); {HINT}")
        role = "prefill" if role_key == "p" else "decode"
        if role in sides:
            raise SpecError(f"layout {raw!r}: the {role} pool is given twice; {HINT}")
        try:
            sides[role] = parse_layout(body.strip())
        except SpecError as exc:
            raise SpecError(f"layout {raw!r}: {role} pool: {exc}") from None
    return DisaggLayout(prefill=sides["prefill"], decode=sides["decode"])


def parse_any_layout(text: str) -> AnyLayout:
    """One aggregated layout (``tp8``) or one prefill/decode pair (``p:tp4+d:tp4``)."""
    return parse_disagg(text) if is_disagg_text(text) else parse_layout(text)


def parse_any_layouts(text: str) -> list[AnyLayout]:
    """A comma-separated list that may mix both kinds, e.g. ``tp8,p:tp4+d:tp4``."""
    items = [item for item in (part.strip() for part in text.split(",")) if item]
    if not items:
        raise SpecError(f"layouts {text!r}: no layout given; expected e.g. tp8,p:tp4+d:tp4")
    return [parse_any_layout(item) for item in items]


# -- placement on the cluster's nodes ---------------------------------------------------------------


def _node_bins(sizes: dict[int, int], nodes: int, gpus_per_node: int) -> bool:
    """Whether replicas ({GPUs per replica: count}) pack onto `nodes` nodes without a replica straddling
    a node boundary: replicas of whole nodes take whole nodes, the rest go first-fit decreasing."""
    small = sorted((size for size in sizes if size < gpus_per_node), reverse=True)
    if all(gpus_per_node % a == 0 and a % b == 0 for a, b in zip(small, [*small[1:], 1], strict=False)):
        # Sizes that divide the node and each other (1, 2, 4, 8 on 8-GPU nodes) leave no gaps that a
        # smaller replica cannot fill: packing fails only when the GPUs run out.
        whole = sum(size // gpus_per_node * n for size, n in sizes.items() if size >= gpus_per_node)
        rest = sum(size * n for size, n in sizes.items() if size < gpus_per_node)
        return whole * gpus_per_node + rest <= nodes * gpus_per_node
    free = [gpus_per_node] * nodes
    for size in sorted(sizes, reverse=True):
        count = sizes[size]
        if size >= gpus_per_node:
            whole = size // gpus_per_node * count
            empty = [i for i, f in enumerate(free) if f == gpus_per_node]
            if len(empty) < whole:
                return False
            for i in empty[:whole]:
                free[i] = 0
            continue
        for i, room in enumerate(free):
            if count == 0:
                break
            placed = min(count, room // size)
            free[i] -= placed * size
            count -= placed
        if count:
            return False
    return True


def pool_problems(pd: DisaggLayout, *, nodes: int, gpus_per_node: int) -> list[str]:
    """Why this pair cannot be placed on `nodes` x `gpus_per_node` GPUs; empty when it can.

    Each reason is one line that names the pool and a fix (callers put the layout in front).
    """
    total = nodes * gpus_per_node
    out: list[str] = []
    for role in ROLES:
        pool = pd.pool(role)
        if pool.gpus > total:
            out.append(f"the {role} pool {pool} needs {pool.gpus} GPUs, the cluster has {total} "
                       f"({nodes} x {gpus_per_node}); shrink it or add nodes")
        per = pool.gpus_per_replica
        if per > gpus_per_node and per % gpus_per_node:
            out.append(f"a {role} replica of {per} GPUs spans nodes but is not a whole number of "
                       f"{gpus_per_node}-GPU nodes; use a replica of 1..{gpus_per_node} GPUs or whole nodes")
    if out:
        return out
    if pd.gpus > total:
        return [f"the pools overlap: prefill {pd.prefill.gpus} + decode {pd.decode.gpus} = "
                f"{pd.gpus} GPUs, the cluster has {total}; prefill and decode need disjoint GPUs, so "
                "shrink one pool (fewer replicas or a smaller TP) or add nodes"]
    sizes: dict[int, int] = {}
    for pool in (pd.prefill, pd.decode):
        sizes[pool.gpus_per_replica] = sizes.get(pool.gpus_per_replica, 0) + pool.replicas
    if not _node_bins(sizes, nodes, gpus_per_node):
        return [f"the replicas of both pools ({pd.prefill.replicas} x {pd.prefill.gpus_per_replica} + "
                f"{pd.decode.replicas} x {pd.decode.gpus_per_replica} GPUs) do not pack onto {nodes} "
                f"node(s) of {gpus_per_node} GPUs without a replica straddling a node; use replica sizes "
                f"that divide {gpus_per_node}"]
    return []


def one_node(pd: DisaggLayout, gpus_per_node: int) -> bool:
    """Whether both pools fit one node, so every KV transfer runs over the intra-node link (NVLink).

    Otherwise orch takes the inter-node network for every transfer: the targets place the pools
    independently (one Deployment or placement group per pool) and cannot promise that a prefill
    replica and the decode replica it hands to share a node.
    """
    return pd.gpus <= gpus_per_node


def check_pools(pd: DisaggLayout, *, nodes: int, gpus_per_node: int) -> None:
    """Raise SpecError (exit 2) with the first placement problem of `pd`, naming the layout."""
    problems = pool_problems(pd, nodes=nodes, gpus_per_node=gpus_per_node)
    if problems:
        raise SpecError(f"layout {pd}: {problems[0]}")
