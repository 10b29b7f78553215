"""Virtual time: run a workload through simulated engines behind a balancer, get RequestRecords.

Each engine (one DP rank of one replica) steps on its own clock; arrivals go to the engine with the
fewest outstanding requests (or round-robin). The records carry virtual seconds and feed the same
metric code as a real measurement (loadgen.metrics), so `orch simulate` and `orch bench` agree on
every definition.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from orchestrator.loadgen.records import RequestRecord
from orchestrator.sim.engine import EngineCore, Seq, StepPlan

Balance = Literal["least_outstanding", "round_robin"]


@dataclass(frozen=True)
class SimRequest:
    request_id: str
    arrival_s: float
    prompt_tokens: int
    max_tokens: int


@dataclass(frozen=True)
class SimSummary:
    steps: int
    preemptions: int
    rejected: int
    virtual_s: float


def _choose(engines: Sequence[EngineCore], balance: Balance, counter: int) -> int:
    if balance == "round_robin" or len(engines) == 1:
        return counter % len(engines)
    best, best_load = 0, math.inf
    for i, eng in enumerate(engines):
        load = eng.outstanding
        if load < best_load:
            best, best_load = i, load
    return best


def simulate(engines: Sequence[EngineCore], requests: Sequence[SimRequest], *,
             balance: Balance = "least_outstanding") -> tuple[list[RequestRecord], SimSummary]:
    """Run `requests` (sorted by arrival) to completion; one record per request, in request order."""
    order = sorted(range(len(requests)), key=lambda i: requests[i].arrival_s)
    step_ends: list[list[float]] = [[] for _ in engines]
    plans: list[StepPlan | None] = [None] * len(engines)
    busy: list[tuple[float, int]] = []  # (step end time, engine)
    seqs: dict[str, tuple[Seq, int]] = {}
    rejected: list[str] = []
    now = 0.0

    def start(e: int, t: float) -> None:
        eng = engines[e]
        plan = eng.schedule()
        plans[e] = plan
        heapq.heappush(busy, (t + eng.step_time_s(plan), e))

    push, pop = heapq.heappush, heapq.heappop

    i = 0
    while i < len(order) or busy:
        next_arrival = requests[order[i]].arrival_s if i < len(order) else math.inf
        if busy and busy[0][0] < next_arrival:
            now, e = pop(busy)
            eng = engines[e]
            plan = plans[e]
            assert plan is not None
            eng.complete(plan)
            step_ends[e].append(now)
            if eng.waiting or eng.running:  # start the next step at once (inlined start(), hot path)
                plan = eng.schedule()
                plans[e] = plan
                push(busy, (now + eng.step_time_s(plan), e))
            else:
                plans[e] = None
            continue
        req = requests[order[i]]
        now = req.arrival_s
        e = _choose(engines, balance, i)
        i += 1
        if not engines[e].fits(req.prompt_tokens, req.max_tokens):
            rejected.append(req.request_id)
            continue
        seq = Seq(req.request_id, req.prompt_tokens, req.max_tokens, req.arrival_s)
        seqs[req.request_id] = (seq, e)
        engines[e].add(seq)
        if plans[e] is None:
            start(e, now)
    records = [_record(req, seqs.get(req.request_id), step_ends) for req in requests]
    summary = SimSummary(
        steps=sum(len(s) for s in step_ends),
        preemptions=sum(eng.preemptions for eng in engines),
        rejected=len(rejected), virtual_s=now,
    )
    return records, summary


def _record(req: SimRequest, entry: tuple[Seq, int] | None, ends: list[list[float]]) -> RequestRecord:
    if entry is None:  # longer than the KV cache can ever hold: the engine answers 400
        return RequestRecord(req.request_id, req.arrival_s, req.arrival_s, req.arrival_s,
                             prompt_tokens=req.prompt_tokens, error="http_400")
    seq, e = entry
    times: list[float] = []
    for first, last in seq.segments:
        times.extend(ends[e][first:last + 1])
    return RequestRecord(
        request_id=req.request_id, scheduled_s=req.arrival_s, sent_s=req.arrival_s,
        done_s=times[-1] if times else req.arrival_s, chunk_times_s=tuple(times),
        chunk_tokens=(1,) * len(times), output_tokens=len(times), prompt_tokens=req.prompt_tokens,
        extra={"preemptions": str(seq.preemptions)} if seq.preemptions else {},
    )
