"""Virtual time for a prefill/decode deployment: router -> prefill engine -> KV transfer -> decode engine.

A request spends the request overhead in front of the engines, then the router sends it to a prefill
engine (policy: round robin, or the fewest outstanding requests). When its prompt is done, the router
picks a decode engine; the request waits there until the decode engine has free KV for its prompt
and a sequence slot (pd_engines.DecodeCore.has_room), then its KV moves over the link: one transfer at
a time per engine's GPUs on each side (the prefill engine sends, the decode engine receives), each
taking `transfer_s(prompt tokens)` (plan/kv_transfer.py). The prefill engine keeps the KV until the
transfer ends; the decode engine's first step then emits the first token. Records carry the client's
view (first token and every token from the decode engine) and feed loadgen.metrics like any run.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchestrator.loadgen.balance import Balance
from orchestrator.loadgen.engine_metrics import EngineSample
from orchestrator.loadgen.records import RequestRecord
from orchestrator.sim.engine import EngineCore, Seq, StepPlan
from orchestrator.sim.pd_engines import DecodeCore, PrefillCore
from orchestrator.sim.virtual import MAX_SAMPLES, SimRequest, SimSummary

_ARRIVE, _FRONT, _PREFILL, _XFER, _DECODE = range(5)


@dataclass(frozen=True)
class DisaggSummary(SimSummary):
    prefill_engines: int = 0  # engine samples: endpoints 0..prefill_engines-1 are prefill engines
    prefill_steps: int = 0
    decode_steps: int = 0
    transfers: int = 0
    transfer_s_sum: float = 0.0  # seconds on the links
    kv_wait_s_sum: float = 0.0  # prefill done -> transfer start (decode KV, a sequence slot, the links)


class _Req:
    __slots__ = ("d", "done_p", "dseq", "p", "pseq", "refused_s", "req", "sent_s", "xfer_start")

    def __init__(self, req: SimRequest, sent_s: float) -> None:
        self.req, self.sent_s = req, sent_s
        self.p = self.d = -1
        self.pseq: Seq | None = None
        self.dseq: Seq | None = None
        self.done_p = self.xfer_start = 0.0
        self.refused_s: float | None = None


def _pick(engines: Sequence[EngineCore], policy: Balance, counter: int, extra: Sequence[int] = ()) -> int:
    if policy == "round_robin" or len(engines) == 1:
        return counter % len(engines)
    loads = [eng.outstanding + (extra[i] if extra else 0) for i, eng in enumerate(engines)]
    low = min(loads)
    n = len(engines)
    # Ties in round-robin order from the counter, so equal engines share the load evenly.
    return min((i for i in range(n) if loads[i] == low), key=lambda i: (i - counter) % n)


class DisaggRun:
    def __init__(self, prefill: Sequence[PrefillCore], decode: Sequence[DecodeCore],
                 transfer_s: Callable[[int], float], *, policy: Balance = "least_outstanding",
                 cap: int | None = None, front_s: float = 0.0, sample_s: float | None = None) -> None:
        if not prefill or not decode:
            raise ValueError("a disaggregated run needs prefill and decode engines")
        if cap is not None and cap < 1:
            raise ValueError("max_concurrency must be >= 1")
        self.prefill, self.decode, self.transfer_s, self.policy = prefill, decode, transfer_s, policy
        self.cap, self.front_s, self.sample_s = cap or 0, front_s, sample_s
        self.heap: list[tuple[float, int, int, int]] = []  # (time, order, kind, index)
        self.order = 0
        self.reqs: list[_Req] = []
        self.p_plan: list[StepPlan | None] = [None] * len(prefill)
        self.d_plan: list[StepPlan | None] = [None] * len(decode)
        self.d_ends: list[list[float]] = [[] for _ in decode]
        self.p_steps = 0
        self.owner_p: list[dict[str, int]] = [{} for _ in prefill]  # request id -> _Req index
        self.owner_d: list[dict[str, int]] = [{} for _ in decode]
        self.waiting_room: list[deque[int]] = [deque() for _ in decode]  # for KV and a slot
        self.send_free = [0.0] * len(prefill)
        self.recv_free = [0.0] * len(decode)
        self.p_count = self.d_count = 0
        self.transfers, self.transfer_sum, self.kv_wait_sum = 0, 0.0, 0.0
        self.pending: deque[SimRequest] = deque()
        self.in_flight = 0
        self.rejected = 0
        self.samples: list[EngineSample] = []
        self.next_sample = 0.0 if sample_s else math.inf
        self.rounds = 0

    def _push(self, t: float, kind: int, index: int) -> None:
        self.order += 1
        heapq.heappush(self.heap, (t, self.order, kind, index))

    # -- stages ------------------------------------------------------------------------------------
    def _send(self, req: SimRequest, t: float) -> None:
        self.in_flight += 1
        self.reqs.append(_Req(req, t))
        k = len(self.reqs) - 1
        if self.front_s > 0:
            self._push(t + self.front_s, _FRONT, k)
        else:
            self._to_prefill(k, t)

    def _to_prefill(self, k: int, t: float) -> None:
        r = self.reqs[k]
        prompt, max_tokens = r.req.prompt_tokens, r.req.max_tokens
        p = _pick(self.prefill, self.policy, self.p_count)
        self.p_count += 1
        if not (self.prefill[p].fits(prompt, 1) and self.decode[0].fits(prompt, max_tokens)):
            r.refused_s = t  # the router's first server answers 400 at once
            self.rejected += 1
            self.in_flight -= 1
            return
        r.p = p
        r.pseq = Seq(r.req.request_id, prompt, 1, t)
        self.owner_p[p][r.req.request_id] = k
        eng = self.prefill[p]
        eng.add(r.pseq)
        if self.p_plan[p] is None:
            self._step_prefill(p, t)

    def _step_prefill(self, p: int, t: float) -> None:
        eng = self.prefill[p]
        plan = eng.schedule()
        if plan.tokens == 0:  # nothing admissible now (its KV is held by transfers): wait for one
            self.p_plan[p] = None
            return
        self.p_plan[p] = plan
        self._push(t + eng.step_time_s(plan), _PREFILL, p)

    def _prefill_done(self, p: int, t: float) -> None:
        eng = self.prefill[p]
        plan = self.p_plan[p]
        assert plan is not None
        self.p_steps += 1
        _, finished = eng.complete(plan)
        for seq in finished:
            k = self.owner_p[p].pop(seq.request_id)
            eng.hold(seq.prompt_tokens)
            r = self.reqs[k]
            r.done_p = t
            extra = [len(q) for q in self.waiting_room]
            d = _pick(self.decode, self.policy, self.d_count, extra)
            self.d_count += 1
            r.d = d
            self.waiting_room[d].append(k)
            self._admit_transfers(d, t)
        if eng.has_work():
            self._step_prefill(p, t)
        else:
            self.p_plan[p] = None

    def _admit_transfers(self, d: int, t: float) -> None:
        """Start the transfers of requests waiting at decode engine `d`, in order, while it has room."""
        eng, room = self.decode[d], self.waiting_room[d]
        while room:
            r = self.reqs[room[0]]
            if not eng.has_room(r.req.prompt_tokens):
                return
            k = room.popleft()
            eng.reserve(r.req.prompt_tokens)
            start = max(t, self.send_free[r.p], self.recv_free[d])
            end = start + self.transfer_s(r.req.prompt_tokens)
            self.send_free[r.p] = self.recv_free[d] = end
            r.xfer_start = start
            self.kv_wait_sum += start - r.done_p
            self.transfer_sum += end - start
            self.transfers += 1
            self._push(end, _XFER, k)

    def _transfer_done(self, k: int, t: float) -> None:
        r = self.reqs[k]
        self.prefill[r.p].release(r.req.prompt_tokens)
        if self.p_plan[r.p] is None and self.prefill[r.p].has_work():
            self._step_prefill(r.p, t)  # the released KV may admit a waiting prompt
        r.dseq = Seq(r.req.request_id, r.req.prompt_tokens, r.req.max_tokens, t)
        self.owner_d[r.d][r.req.request_id] = k
        eng = self.decode[r.d]
        eng.arrive(r.dseq)
        if self.d_plan[r.d] is None:
            self._step_decode(r.d, t)

    def _step_decode(self, d: int, t: float) -> None:
        eng = self.decode[d]
        plan = eng.schedule()
        if plan.tokens == 0:
            self.d_plan[d] = None
            return
        self.d_plan[d] = plan
        self._push(t + eng.step_time_s(plan), _DECODE, d)

    def _decode_done(self, d: int, t: float, until_s: float | None, loop: list[SimRequest]) -> None:
        eng = self.decode[d]
        plan = self.d_plan[d]
        assert plan is not None
        _, finished = eng.complete(plan)
        self.d_ends[d].append(t)
        for seq in finished:
            self.owner_d[d].pop(seq.request_id, None)
        if finished and self.cap:
            self.in_flight -= len(finished)
            if until_s is not None and not self.pending and t < until_s and loop:
                self.rounds += 1  # a duration-bound closed loop: the next round of requests
                self.pending.extend(SimRequest(f"{q.request_id}#{self.rounds}", t, q.prompt_tokens,
                                               q.max_tokens) for q in loop)
            self._refill(t, until_s)
        elif finished:
            self.in_flight -= len(finished)
        self._admit_transfers(d, t)
        if eng.has_work():
            self._step_decode(d, t)
        else:
            self.d_plan[d] = None

    def _refill(self, t: float, until_s: float | None) -> None:
        if until_s is not None and t >= until_s:
            self.pending.clear()
        while self.pending and self.in_flight < self.cap:
            self._send(self.pending.popleft(), t)

    # -- the loop ----------------------------------------------------------------------------------
    def go(self, requests: Sequence[SimRequest], until_s: float | None,
           closed: bool) -> tuple[list[RequestRecord], DisaggSummary]:
        order = sorted(range(len(requests)), key=lambda i: requests[i].arrival_s)
        loop = [requests[i] for i in order] if closed and until_s is not None else []
        heap, pop = self.heap, heapq.heappop
        now, i = 0.0, 0
        while i < len(order) or heap:
            next_arrival = requests[order[i]].arrival_s if i < len(order) else math.inf
            next_event = heap[0][0] if heap else math.inf
            if self.next_sample <= min(next_arrival, next_event):
                self._sample(min(next_arrival, next_event))
            if next_event < next_arrival:
                now, _, kind, index = pop(heap)
                if kind == _FRONT:
                    self._to_prefill(index, now)
                    if self.cap and self.reqs[index].refused_s is not None:
                        self._refill(now, until_s)
                elif kind == _PREFILL:
                    self._prefill_done(index, now)
                elif kind == _XFER:
                    self._transfer_done(index, now)
                else:
                    self._decode_done(index, now, until_s, loop)
                continue
            req = requests[order[i]]
            now = req.arrival_s
            i += 1
            if self.cap and (self.pending or self.in_flight >= self.cap):
                self.pending.append(req)
            else:
                self._send(req, now)
            if self.cap:
                self._refill(now, until_s)
        records = [self._record(r, closed) for r in self.reqs]
        if not closed:  # open loop: in request order, refused ones included
            by_id = {rec.request_id: rec for rec in records}
            records = [by_id[r.request_id] for r in requests if r.request_id in by_id]
        steps = sum(len(e) for e in self.d_ends)
        summary = DisaggSummary(
            steps=self.p_steps + steps,
            preemptions=sum(e.preemptions for e in (*self.prefill, *self.decode)),
            rejected=self.rejected, virtual_s=now, engine_samples=tuple(self.samples),
            prefill_engines=len(self.prefill), prefill_steps=self.p_steps, decode_steps=steps,
            transfers=self.transfers, transfer_s_sum=self.transfer_sum, kv_wait_s_sum=self.kv_wait_sum,
        )
        return records, summary

    def _sample(self, until: float) -> None:
        step = self.sample_s
        assert step is not None
        engines: list[EngineCore] = [*self.prefill, *self.decode]
        while self.next_sample <= until and len(self.samples) < MAX_SAMPLES:
            t = self.next_sample
            for k, eng in enumerate(engines):
                self.samples.append(EngineSample(
                    t_s=t, endpoint=k, running=float(len(eng.running)), waiting=float(len(eng.waiting)),
                    kv_usage=eng.kv_usage, preemptions=float(eng.preemptions)))
            self.next_sample = t + step
        if len(self.samples) >= MAX_SAMPLES:
            self.next_sample = math.inf

    def _record(self, r: _Req, closed: bool) -> RequestRecord:
        req = r.req
        scheduled = r.sent_s if closed else req.arrival_s
        queued = r.sent_s - scheduled
        if r.refused_s is not None:
            return RequestRecord(req.request_id, scheduled, r.sent_s, r.refused_s,
                                 prompt_tokens=req.prompt_tokens, error="http_400", queued_s=queued)
        seq = r.dseq
        times: list[float] = []
        if seq is not None:
            for first, last in seq.segments:
                times.extend(self.d_ends[r.d][first:last + 1])
        extra = {"prefill_engine": str(r.p), "decode_engine": str(r.d)}
        if seq is not None and seq.preemptions:
            extra["preemptions"] = str(seq.preemptions)
        return RequestRecord(
            request_id=req.request_id, scheduled_s=scheduled, sent_s=r.sent_s,
            done_s=times[-1] if times else None, chunk_times_s=tuple(times), chunk_tokens=(1,) * len(times),
            output_tokens=len(times), prompt_tokens=req.prompt_tokens, queued_s=queued, extra=extra,
        )


def simulate_disagg(prefill: Sequence[PrefillCore], decode: Sequence[DecodeCore],
                    requests: Sequence[SimRequest], transfer_s: Callable[[int], float], *,
                    policy: Balance = "least_outstanding",
                    max_concurrency: int | None = None, front_s: float = 0.0,
                    sample_interval_s: float | None = None) -> tuple[list[RequestRecord], DisaggSummary]:
    """Open loop: every request sent at its arrival (capped by `max_concurrency` as the load generator
    caps it); one record per request, in request order."""
    run = DisaggRun(prefill, decode, transfer_s, policy=policy, cap=max_concurrency, front_s=front_s,
                    sample_s=sample_interval_s)
    return run.go(requests, None, closed=False)


def closed_loop_disagg(prefill: Sequence[PrefillCore], decode: Sequence[DecodeCore],
                       requests: Sequence[SimRequest], transfer_s: Callable[[int], float],
                       concurrency: int, *,
                       duration_s: float | None = None, policy: Balance = "least_outstanding",
                       front_s: float = 0.0,
                       sample_interval_s: float | None = None) -> tuple[list[RequestRecord], DisaggSummary]:
    """Closed loop of `concurrency` clients (sim/loops.closed_loop's semantics); records in send order."""
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    at_zero = [SimRequest(r.request_id, 0.0, r.prompt_tokens, r.max_tokens) for r in requests]
    run = DisaggRun(prefill, decode, transfer_s, policy=policy, cap=concurrency, front_s=front_s,
                    sample_s=sample_interval_s)
    return run.go(at_zero, duration_s, closed=True)
