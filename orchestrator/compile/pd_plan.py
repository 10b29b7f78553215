"""The launch plan of a prefill/decode candidate: each pool's servers as its engine launches them on
the pool's share of the cluster, with the role's flags (engines/pd_flags.py), and the router.

Pools get disjoint GPUs: replicas of the larger size first, whole nodes for replicas that span nodes,
otherwise the first free GPUs of the first node that holds them (disagg.pool_problems has already
said that they pack). Ports: the prefill replicas' blocks from the placement's base port, the decode
replicas' after them, then the router's. The plan holds every replica (role prefill / decode / router)
and each pool's own plan (`LaunchPlan.pools`). Pure: no cluster access.
"""

from __future__ import annotations

import re
from dataclasses import replace

from orchestrator.candidate import DisaggCandidate, Pool
from orchestrator.disagg import one_node
from orchestrator.engines import PORT_STRIDE, Engine, EngineOptions, LaunchPlan, Placement, ReplicaPlan
from orchestrator.engines.pd_flags import SGLANG_ROUTER_POLICIES, PoolRole, router_process
from orchestrator.errors import DeployError, SpecError
from orchestrator.kv_handover import KVShape, handover

LOOPBACK = "127.0.0.1"


def pool_placements(cand: DisaggCandidate, where: Placement) -> tuple[Placement, Placement, int]:
    """Each pool's share of `where` (its GPUs per node and its first port) and the router's port."""
    gpn, nodes = where.gpus_per_node, len(where.nodes)
    free = [list(where.node_gpus(n)) for n in range(nodes)]
    held: dict[str, list[list[int]]] = {p.role: [[] for _ in range(nodes)] for p in cand.pools}
    for pool in sorted(cand.pools, key=lambda p: -p.layout.gpus_per_replica):
        g = pool.layout.gpus_per_replica
        for _ in range(pool.layout.replicas):
            if g >= gpn:
                empty = [n for n in range(nodes) if len(free[n]) == gpn][: g // gpn]
                if len(empty) < g // gpn:
                    raise SpecError(f"layout {cand.layout}: no {g // gpn} free whole node(s) left for a "
                                    f"{pool.role} replica of {g} GPUs; shrink the pools or add nodes")
                for n in empty:
                    held[pool.role][n] += free[n]
                    free[n] = []
                continue
            n = next((n for n in range(nodes) if len(free[n]) >= g), -1)
            if n < 0:
                raise SpecError(f"layout {cand.layout}: no node has {g} free GPUs left for a {pool.role} "
                                "replica; shrink the pools or add nodes")
            held[pool.role][n] += free[n][:g]
            free[n] = free[n][g:]
    n_p, n_d = cand.prefill.layout.replicas, cand.decode.layout.replicas
    base = where.base_port
    prefill = replace(where, usable_gpus=tuple(tuple(sorted(h)) for h in held["prefill"]), base_port=base)
    decode = replace(where, usable_gpus=tuple(tuple(sorted(h)) for h in held["decode"]),
                     base_port=base + PORT_STRIDE * n_p)
    return prefill, decode, base + PORT_STRIDE * (n_p + n_d)


def storage_dir(cand: DisaggCandidate) -> str:
    """ExampleConnector's directory (both pools on one node) in compiled output: one per candidate. The
    connector never deletes what it stores and loads any prompt it finds there, so a served sweep gives
    each launch its own directory under the run's workdir instead (pipeline/serving.py): KV left by an
    earlier run (another model under the same layout name) must not be loaded as this one's."""
    return "/tmp/orch-kv/" + re.sub(r"[^A-Za-z0-9_.-]+", "-", cand.name).strip("-")


def pair_plan(eng: Engine, cand: DisaggCandidate, pool_options: tuple[EngineOptions, EngineOptions],
              where: Placement, *, to_serve: bool = False, kv: KVShape | None = None,
              kv_dir: str | None = None) -> tuple[LaunchPlan, tuple[str, ...]]:
    """The pair's launch plan on `where` and what to warn about. `pool_options`: each pool's engine
    options (its redundant experts). `to_serve`: refuse (DeployError) what cannot be served here.
    `kv_dir`: the ExampleConnector's directory (default storage_dir(cand))."""
    if cand.engine != eng.name:
        raise SpecError(f"{cand}: its pools' settings are {cand.engine}'s, not {eng.name}'s; resolve them "
                        "for the engine that runs it")
    p_where, d_where, router_port = pool_placements(cand, where)
    link = "intra_node" if one_node(cand.layout, where.gpus_per_node) else "inter_node"
    notes: list[str] = []
    plans: list[LaunchPlan] = []
    for pool, pool_where, options in zip(cand.pools, (p_where, d_where), pool_options, strict=True):
        reasons = eng.unsupported(pool.layout, pool_where)
        if to_serve and reasons:
            raise DeployError(f"{eng.name} cannot run the {pool.role} pool {pool.layout} of {cand}: "
                              + "; ".join(reasons))
        notes += [f"{pool.role} pool: {w}" for w in (*eng.warnings(pool.layout, pool_where), *reasons)]
        plans.append(_pool_plan(eng, cand, pool, options, pool_where, link, kv_dir or storage_dir(cand)))
    if kv is not None:
        notes += list(handover(eng.name, cand.prefill.layout, cand.decode.layout, kv,
                               connector=cand.transfer).warnings)
    if eng.name == "sglang" and cand.router_policy != SGLANG_ROUTER_POLICIES[cand.router_policy]:
        notes.append(f"SGLang's router has no {cand.router_policy} policy: it runs "
                     f"{SGLANG_ROUTER_POLICIES[cand.router_policy]}, its load-aware one (the simulator "
                     f"modelled {cand.router_policy})")
    host = where.nodes[0] if len(where.nodes) == 1 or not eng.simulated else LOOPBACK
    proc = router_process(eng.name, plans[0].replicas, plans[1].replicas, host=where.bind_host,
                          port=router_port, policy=cand.router_policy)
    router = ReplicaPlan((proc,), f"http://{host}:{router_port}/health", f"http://{host}:{router_port}/v1",
                         role="router")
    plan = LaunchPlan(eng.name, cand, (*plans[0].replicas, *plans[1].replicas, router), tuple(plans))
    return plan, tuple(notes)


def _pool_plan(eng: Engine, cand: DisaggCandidate, pool: Pool, options: EngineOptions, where: Placement,
               link: str, kv_dir: str) -> LaunchPlan:
    role = PoolRole(eng.name, pool.role, cand.transfer, where.nodes, on_cpu=where.on_cpu, kv_link=link,
                    storage_dir=kv_dir)
    plan = eng.launch_plan(pool.candidate, options, where)
    return replace(plan, replicas=tuple(role.replica(r) for r in plan.replicas))


__all__ = ["pair_plan", "pool_placements", "storage_dir"]
