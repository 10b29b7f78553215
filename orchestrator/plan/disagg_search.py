"""`orch plan --disagg N`: every prefill/decode split of N GPUs, ranked beside the aggregated layouts.

Replica shapes come from the aggregated enumeration (plan/enumerate.py) on the nodes that hold N GPUs.
Each shape's prefill and decode estimates are computed once, each pair of shapes' facts (handover
rules, transfer, best split) once, and then every split n_p x prefill + n_d x decode = N GPUs costs a
few additions: 64 GPUs plan in well under a second (bench/plan_disagg_speed.py measures it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.disagg import DisaggLayout, pool_problems
from orchestrator.errors import SpecError
from orchestrator.layout import Layout
from orchestrator.plan.calls import CallShape, PlannedCall
from orchestrator.plan.checks import Cluster
from orchestrator.plan.disagg import (
    DecodeEngine,
    DisaggRow,
    PairFacts,
    PrefillEngine,
    combine,
    decode_engine,
    pair_facts,
    prefill_engine,
    shape_of,
)
from orchestrator.plan.enumerate import enumerate_layouts
from orchestrator.plan.inputs import PlanInputs
from orchestrator.plan.planner import PlanRow, plan_layout
from orchestrator.plan.run import SessionCalls

AnyRow = PlanRow | DisaggRow
#: a layout's mean call (an aggregated layout's, or a pair's prefill pool's): plan/calls.py
LayoutCall = Callable[[Layout], CallShape]


def output_tokens_per_s_per_gpu(row: AnyRow) -> float:
    """The ranking figure of either kind: predicted output tokens/s per GPU within the ITL bound."""
    if isinstance(row, DisaggRow):
        return row.output_tokens_per_s_per_gpu
    return row.best.output_tokens_per_s_per_gpu if row.best else 0.0


def rank_key(row: AnyRow) -> tuple[int, float, int]:
    """Fitting rows with an estimate first, best first; ties: fewer GPUs."""
    value = output_tokens_per_s_per_gpu(row)
    if not row.rejected_because and value > 0:
        return (0, -value, row.gpus)
    return (1 if not row.rejected_because else 2, 0.0, row.gpus)


@dataclass(frozen=True)
class SplitPlan:
    gpus: int
    cluster: Cluster
    prompt_tokens: int
    output_tokens: int
    itl_bound_ms: float | None
    rows: tuple[AnyRow, ...]  # ranked, both kinds
    splits: int  # disaggregated candidates considered
    sessions: SessionCalls | None = None  # a session workload: each row's call, by layout name

    def to_dict(self) -> dict[str, Any]:
        out = []
        for row in self.rows:
            d = row.to_dict()
            if self.sessions is not None:
                d.update(self.sessions.row_dict(str(row.layout)))
            d.setdefault("kind", "aggregated")
            d["output_tokens_per_s_per_gpu"] = output_tokens_per_s_per_gpu(row)
            out.append(d)
        return {"gpus": self.gpus, "nodes": self.cluster.nodes, "gpus_per_node": self.cluster.gpus_per_node,
                "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
                **({"call": self.sessions.to_dict()} if self.sessions is not None else {}),
                "itl_bound_ms": self.itl_bound_ms, "disaggregated_candidates": self.splits, "rows": out}


def split_cluster(inputs: PlanInputs, gpus: int) -> Cluster:
    """The nodes that hold `gpus` GPUs at the spec's GPUs per node."""
    if gpus < 2:
        raise SpecError(f"--disagg {gpus}: a prefill pool and a decode pool need at least 2 GPUs")
    gpn = inputs.cluster.gpus_per_node
    return Cluster(math.ceil(gpus / gpn), gpn)


def plan_splits(inputs: PlanInputs, gpus: int, *, engine: str, prompt_tokens: int, output_tokens: int,
                itl_bound_ms: float | None, connector: str | None = None,
                batches: tuple[int, ...] = (1, 16, 64, 256), calls: LayoutCall | None = None,
                pair_calls: LayoutCall | None = None, routing: str = "") -> SplitPlan:
    """`calls` / `pair_calls`: a session workload's call on an aggregated layout / a pair's prefill
    pool (whole history less its cached prefix, as a sweep prices its rows; `routing` names how they
    spread a session); without them every row is priced on one request of `prompt_tokens`."""
    cluster = split_cluster(inputs, gpus)
    inputs = replace(inputs, cluster=cluster)
    every = sorted({shape_of(lay) for lay in enumerate_layouts(inputs.cfg, cluster)
                    if lay.gpus_per_replica <= gpus},
                   key=lambda s: (s.gpus_per_replica, s.tp, s.pp, s.dp, s.ep))
    shapes = [s for s in every if s.gpus_per_replica < gpus]  # a pool leaves GPUs for the other
    request = CallShape(1.0, float(prompt_tokens), 0.0, float(output_tokens))
    one_request = request.planned()
    priced: dict[str, CallShape] = {}

    def call_of(lay: Layout | DisaggLayout, pricer: LayoutCall | None, on: Layout) -> PlannedCall:
        if pricer is None:
            return one_request
        shape = priced[str(lay)] = pricer(on)
        return shape.planned()

    rows: list[AnyRow] = []
    for shape in every:
        if gpus % shape.gpus_per_replica == 0:
            lay = replace(shape, replicas=gpus // shape.gpus_per_replica)
            call = call_of(lay, calls, lay)
            try:
                rows.append(plan_layout(inputs, lay, batches=batches, context_tokens=call.context_tokens,
                                        prompt_tokens=call.prefill_tokens, itl_bound_ms=itl_bound_ms,
                                        output_tokens=call.output_tokens))
            except SpecError as exc:  # as make_plan: the layout is rejected, not the plan
                rows.append(PlanRow(lay, lay.gpus, (str(exc),), ()))
    # Each engine and each pair's facts once per prompt it prefills (a session's cached prefix depends
    # on how many prefill engines spread its calls, so on the split; a request workload: one prompt).
    prefills: dict[tuple[Layout, int], PrefillEngine] = {}
    decodes: dict[tuple[Layout, int], DecodeEngine] = {}
    facts: dict[tuple[Layout, Layout, int], PairFacts] = {}
    splits = 0
    for p_shape in shapes:
        for d_shape in shapes:
            g_p, g_d = p_shape.gpus_per_replica, d_shape.gpus_per_replica
            last: tuple[int, PrefillEngine, DecodeEngine, PairFacts] | None = None  # this pair's, by prompt
            for n_p in range(1, gpus // g_p + 1):
                rest = gpus - n_p * g_p
                if rest < g_d or rest % g_d:
                    continue
                pd = DisaggLayout(Layout(p_shape.tp, p_shape.pp, p_shape.dp, p_shape.ep, n_p),
                                  Layout(d_shape.tp, d_shape.pp, d_shape.dp, d_shape.ep, rest // g_d))
                call = call_of(pd, pair_calls, pd.prefill)
                prompt, output = call.prefill_tokens, call.output_tokens  # as a sweep's pair rows
                if last is None or last[0] != prompt:
                    if (pf := prefills.get((p_shape, prompt))) is None:
                        pf = prefills[p_shape, prompt] = prefill_engine(inputs, p_shape, prompt)
                    if (dec := decodes.get((d_shape, prompt))) is None:
                        dec = decodes[d_shape, prompt] = decode_engine(inputs, d_shape, prompt, output,
                                                                       itl_bound_ms)
                    if (fact := facts.get((p_shape, d_shape, prompt))) is None:
                        fact = facts[p_shape, d_shape, prompt] = pair_facts(
                            inputs, pf, dec, gpus=gpus, engine=engine, prompt_tokens=prompt,
                            connector=connector)
                    last = (prompt, pf, dec, fact)
                _, pf, dec, fact = last
                structural = pool_problems(pd, nodes=cluster.nodes, gpus_per_node=cluster.gpus_per_node)
                rows.append(combine(inputs, pd, pf, dec, fact, prompt_tokens=prompt,
                                    output_tokens=output, structural=structural))
                splits += 1
    rows.sort(key=rank_key)
    sent = next(iter(priced.values()), request).planned()
    sessions = SessionCalls(routing, priced) if calls is not None or pair_calls is not None else None
    return SplitPlan(gpus, cluster, sent.prompt_tokens, sent.output_tokens, itl_bound_ms, tuple(rows), splits,
                     sessions)
