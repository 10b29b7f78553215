"""Virtual time: run a workload through simulated engines behind a balancer, get RequestRecords.

Each engine (one DP rank of one replica) steps on its own clock; arrivals go to a replica chosen by the
load generator's own Balancer (round robin, least outstanding, prefix aware: loadgen/balance.py), and
within a replica to the DP rank with the fewest outstanding requests. A request first spends the cost model's
`request_overhead_s` in front of the engines (HTTP handling, tokenisation: the API server's
work) and is balanced and queued when that ends; its TTFT counts from the send. The records carry
virtual seconds and feed the same metric code as a real measurement (loadgen.metrics), so
`orch simulate` and `orch bench` agree on every definition.

This module is the run itself (`VirtualRun`); the load generator's open and closed loops that drive
it are sim/loops.py, its sessions sim/sessions.py.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from orchestrator.loadgen.balance import Balance, Balancer
from orchestrator.loadgen.columns import GapSet, RequestColumns
from orchestrator.loadgen.content import Content
from orchestrator.loadgen.engine_metrics import EngineSample
from orchestrator.loadgen.records import RequestRecord
from orchestrator.sim.decode_steps import decode_steps
from orchestrator.sim.engine import EngineCore, Seq, StepPlan
from orchestrator.sim.prefix_cache import CacheStats
from orchestrator.sim.speculative import burst_sizes


@dataclass(frozen=True)
class SimRequest:
    request_id: str
    arrival_s: float
    prompt_tokens: int
    max_tokens: int
    content: Content | None = None  # what the prompt shares with others (prefix caching, routing)
    tags: tuple[tuple[str, str], ...] = ()  # copied into the record's extra (session, turn)


#: (request id, when it ended, whether it was answered) -> the requests that follow it
Follow = Callable[[str, float, bool], Sequence[SimRequest]]
MAX_SAMPLES = 20_000  # engine samples per run (0.5 s apart: hours of virtual time)


@dataclass(frozen=True)
class SimSummary:
    steps: int
    preemptions: int
    rejected: int
    virtual_s: float
    # The engines' own gauges at fixed virtual times, as a scrape of their /metrics would read them.
    engine_samples: tuple[EngineSample, ...] = ()
    prefix_cache: CacheStats | None = None  # summed over the engines; None without prefix caching


class VirtualRun:
    """One virtual-time run: engines stepping on their own clocks, arrivals, and the client's slots."""

    def __init__(self, engines: Sequence[EngineCore], balance: Balance, cap: int | None,
                 closed: bool, sample_s: float | None = None, dp: int = 1) -> None:
        if cap is not None and cap < 1:
            raise ValueError("max_concurrency must be >= 1")
        if dp < 1 or len(engines) % dp:
            raise ValueError(f"{len(engines)} engines are not replicas of {dp} DP ranks")
        self.dp = dp
        # least_outstanding breaks ties by index here, as the simulator always has (loadgen/balance.py)
        self.bal = Balancer(max(len(engines) // dp, 1), balance,
                            ties="first" if balance == "least_outstanding" else "rotate")
        if sample_s is not None and sample_s <= 0:
            raise ValueError("sample_interval_s must be > 0")
        self.sample_s = sample_s
        self.next_sample = 0.0 if sample_s else math.inf
        self.samples: list[EngineSample] = []
        self.engines, self.balance, self.cap, self.closed = engines, balance, cap or 0, closed
        self.step_ends: list[list[float]] = [[] for _ in engines]
        self.plans: list[StepPlan | None] = [None] * len(engines)
        self.busy: list[tuple[float, int]] = []  # (step end time, engine)
        self.sent: dict[str, tuple[SimRequest, float, Seq | None, int]] = {}  # id -> (req, sent, seq, engine)
        self.pending: deque[SimRequest] = deque()  # arrived, waiting for a concurrency slot
        self.in_flight = 0
        self.rejected = 0
        self.front_s = engines[0].request_overhead_s if engines else 0.0
        self.front: list[tuple[float, int, SimRequest]] = []  # (reaches the engines, order, request)
        self.fronted = 0
        self.refused_at: dict[str, float] = {}  # request id -> when the 400 went out
        # Requests that depend on earlier ones (a session's next turn): `follow(request id, time, ok)`
        # is told of every end and returns what is sent next, at its own arrival time.
        self.follow: Follow | None = None
        self.later: list[tuple[float, int, SimRequest]] = []
        self.followed = 0

    def _follow(self, rid: str, t: float, ok: bool) -> None:
        assert self.follow is not None
        for req in self.follow(rid, t, ok):
            self.followed += 1
            heapq.heappush(self.later, (req.arrival_s, self.followed, req))

    def _send(self, req: SimRequest, t: float) -> None:
        """The client sends `req` at `t`: it holds a concurrency slot from now on."""
        if self.front_s > 0:
            self.sent[req.request_id] = (req, t, None, -1)
            self.in_flight += 1
            self.fronted += 1
            heapq.heappush(self.front, (t + self.front_s, self.fronted, req))
            return
        self._admit(req, t, t)

    def _admit(self, req: SimRequest, sent_s: float, t: float) -> None:
        """`req` (sent at `sent_s`) reaches the engines at `t`, past the request overhead."""
        engines, dp = self.engines, self.dp
        delayed = self.front_s > 0  # the slot was taken at the send
        r = self.bal.acquire(req.content.route() if req.content is not None else None)
        e = r * dp
        if dp > 1:  # the replica's own DP balancing: its least busy rank
            e = min(range(e, e + dp), key=lambda k: engines[k].outstanding)
        if not engines[e].fits(req.prompt_tokens, req.max_tokens):
            self.bal.release(r)
            self.sent[req.request_id] = (req, sent_s, None, e)  # the engine answers 400 at once
            self.refused_at[req.request_id] = t
            self.rejected += 1
            if delayed:
                self.in_flight -= 1
            if self.follow is not None:
                self._follow(req.request_id, t, False)
            return
        seq = Seq(req.request_id, req.prompt_tokens, req.max_tokens, t, content=req.content)
        self.sent[req.request_id] = (req, sent_s, seq, e)
        if not delayed:
            self.in_flight += 1
        eng = engines[e]
        eng.add(seq)
        if self.plans[e] is None:
            plan = eng.schedule()
            self.plans[e] = plan
            heapq.heappush(self.busy, (t + eng.step_time_s(plan), e))

    def _refill(self, t: float, until_s: float | None) -> None:
        if until_s is not None and t >= until_s:
            self.pending.clear()
        while self.pending and self.in_flight < self.cap:
            self._send(self.pending.popleft(), t)

    def go(self, requests: Sequence[SimRequest], until_s: float | None,
           records: bool = True) -> tuple[list[RequestRecord], SimSummary]:
        order = sorted(range(len(requests)), key=lambda k: requests[k].arrival_s)
        engines, busy, plans, step_ends, cap = self.engines, self.busy, self.plans, self.step_ends, self.cap
        push, pop = heapq.heappush, heapq.heappop
        rounds = 0
        now = 0.0
        i = 0
        sampling = self.sample_s is not None
        front, later, follow = self.front, self.later, self.follow is not None
        while i < len(order) or busy or front or later:
            next_arrival = requests[order[i]].arrival_s if i < len(order) else math.inf
            if later and later[0][0] < next_arrival:
                next_arrival = later[0][0]
            next_in = min(next_arrival, front[0][0]) if front else next_arrival
            if sampling and (self.next_sample <= next_in or (busy and self.next_sample <= busy[0][0])):
                self._sample(min(next_in, busy[0][0] if busy else math.inf))
            if busy and busy[0][0] < next_in:
                now, e = pop(busy)
                eng = engines[e]
                plan = plans[e]
                assert plan is not None
                # A plain decode step after a plain decode step (hot path), and the steps after it
                # that end before anything else can happen: the next arrival or request past the
                # front end, the next sample, another engine's step (whose end may send this engine a
                # request). Ties go to the general order.
                bound = min(next_in, busy[0][0]) if busy else next_in
                if sampling and self.next_sample < bound:
                    bound = self.next_sample
                ran = decode_steps(eng, plan, now, bound, step_ends[e])
                if ran is not None:
                    plans[e] = ran[0]
                    push(busy, (ran[1], e))
                    continue
                finished = eng.complete(plan)[1]
                step_ends[e].append(now)
                for seq in finished:
                    self.bal.release(e // self.dp)
                    if follow:
                        self._follow(seq.request_id, now, True)
                if finished and cap:
                    self.in_flight -= len(finished)
                    if until_s is not None and not self.pending and i == len(order) and now < until_s:
                        rounds += 1  # a duration-bound closed loop: the next round of requests
                        self.pending.extend(
                            replace(r, request_id=f"{r.request_id}#{rounds}", arrival_s=now)
                            for r in (requests[k] for k in order))
                    self._refill(now, until_s)
                if eng.waiting or eng.running:  # start the next step at once (hot path)
                    plan = eng.schedule()
                    plans[e] = plan
                    push(busy, (now + eng.step_time_s(plan), e))
                else:
                    plans[e] = None
                continue
            if front and front[0][0] <= next_arrival:
                now, _, req = pop(front)
                rejected = self.rejected
                self._admit(req, self.sent[req.request_id][1], now)
                if cap and self.rejected > rejected:
                    self._refill(now, until_s)  # the slot the refused request held
                continue
            if later and (i == len(order) or later[0][0] < requests[order[i]].arrival_s):
                req = pop(later)[2]
            else:
                req = requests[order[i]]
                i += 1
            now = req.arrival_s
            if cap and (self.pending or self.in_flight >= cap):
                self.pending.append(req)
            else:
                self._send(req, now)
            if cap:
                self._refill(now, until_s)  # slots a refused request did not take
        self.ids = list(self.sent) if self.closed or follow else [r.request_id for r in requests]
        out = [self._record(*self.sent[rid]) for rid in self.ids] if records else []
        caches = [eng.cache.stats() for eng in engines if eng.cache is not None]
        summary = SimSummary(
            steps=sum(len(s) for s in step_ends),
            preemptions=sum(eng.preemptions for eng in engines),
            rejected=self.rejected, virtual_s=now, engine_samples=tuple(self.samples),
            prefix_cache=sum(caches[1:], caches[0]) if caches else None,
        )
        return out, summary

    def columns(self) -> RequestColumns:
        """The requests of the finished run (in record order) as columns. A gap between two steps of
        an engine is one value, shared by the requests running through it; a preempted request's gap
        between its segments is a value of its own."""
        offsets = [0]
        for ends in self.step_ends:
            offsets.append(offsets[-1] + max(len(ends) - 1, 0))
        diffs = [np.diff(np.asarray(ends, dtype=np.float64)) for ends in self.step_ends if len(ends) > 1]
        extra: list[float] = []  # gaps across a preemption, placed after the step gaps
        extra_req: list[int] = []
        n = len(self.ids)
        nan = math.nan
        scheduled, sent_a, done, first = (np.empty(n) for _ in range(4))
        out_tokens, in_tokens = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        cached = np.full(n, -1, dtype=np.int64)  # -1: not told (no cache, or refused), as _record tags
        errors: list[str | None] = []
        req: list[int] = []
        start: list[int] = []
        end: list[int] = []
        step_ends, closed, refused_at, sent_by_id = self.step_ends, self.closed, self.refused_at, self.sent
        for i, rid in enumerate(self.ids):
            r, sent_s, seq, e = sent_by_id[rid]
            scheduled[i] = sent_s if closed else r.arrival_s
            sent_a[i] = sent_s
            in_tokens[i] = r.prompt_tokens
            if seq is None:  # refused with a 400, as _record says
                done[i], first[i] = refused_at.get(rid, sent_s), nan
                errors.append("http_400")
                continue
            errors.append(None)
            if self.engines[e].cache is not None:
                cached[i] = seq.cached_tokens
            ends, off = step_ends[e], offsets[e]
            tokens, last_end = 0, -1
            for a, b in seq.segments:
                if last_end >= 0:  # the gap across a preemption
                    extra_req.append(i)
                    extra.append(ends[a] - ends[last_end])
                req.append(i)
                start.append(off + a)
                end.append(off + b)
                tokens += b - a + 1
                last_end = b
            segs = seq.segments
            first[i] = ends[segs[0][0]] if segs else nan
            done[i] = ends[last_end] if last_end >= 0 else sent_s
            out_tokens[i] = tokens
        at = offsets[-1] + np.arange(len(extra), dtype=np.int64)
        values = np.concatenate([*diffs, np.asarray(extra, dtype=np.float64)])
        gaps = GapSet(values, None, np.asarray(req + extra_req, dtype=np.int64),
                      np.concatenate([np.asarray(start, dtype=np.int64), at]),
                      np.concatenate([np.asarray(end, dtype=np.int64), at + 1]))
        return RequestColumns(
            scheduled_s=scheduled, sent_s=sent_a, done_s=done, first_s=first, queued_s=sent_a - scheduled,
            output_tokens=out_tokens, prompt_tokens=in_tokens, usage_counted=np.ones(n, dtype=np.bool_),
            errors=tuple(errors), itl_chunk=gaps, itl_token=gaps,  # one token a step: per chunk = per token
            cached_tokens=cached if any(eng.cache is not None for eng in self.engines) else None,
        )

    def _sample(self, until: float) -> None:
        """The engines' state at every sample time before the next event (it holds until then)."""
        step = self.sample_s
        assert step is not None
        while self.next_sample <= until and len(self.samples) < MAX_SAMPLES:
            t = self.next_sample
            for k, eng in enumerate(self.engines):
                cache = eng.cache
                self.samples.append(EngineSample(
                    t_s=t, endpoint=k, running=float(len(eng.running)), waiting=float(len(eng.waiting)),
                    kv_usage=eng.kv_usage, preemptions=float(eng.preemptions),
                    prefix_hits=None if cache is None else float(cache.hits),
                    prefix_queries=None if cache is None else float(cache.queries),
                ))
            self.next_sample = t + step
        if len(self.samples) >= MAX_SAMPLES:
            self.next_sample = math.inf  # a very long run: the first MAX_SAMPLES samples only

    def _record(self, req: SimRequest, sent_s: float, seq: Seq | None, e: int) -> RequestRecord:
        scheduled = sent_s if self.closed else req.arrival_s  # a closed-loop client schedules on send
        queued = sent_s - scheduled
        if seq is None:  # longer than the KV cache can ever hold: the engine answers 400
            refused = self.refused_at.get(req.request_id, sent_s)
            return RequestRecord(req.request_id, scheduled, sent_s, refused, prompt_tokens=req.prompt_tokens,
                                 error="http_400", queued_s=queued, extra=dict(req.tags))
        times: list[float] = []
        for first, last in seq.segments:
            times.extend(self.step_ends[e][first:last + 1])
        tokens = (1,) * len(times) if seq.rate == 1.0 else _bursts(seq)
        extra = dict(req.tags)
        if seq.preemptions:
            extra["preemptions"] = str(seq.preemptions)
        if self.engines[e].cache is not None:
            extra["cached_tokens"] = str(seq.cached_tokens)
        return RequestRecord(
            request_id=req.request_id, scheduled_s=scheduled, sent_s=sent_s,
            done_s=times[-1] if times else sent_s, chunk_times_s=tuple(times),
            chunk_tokens=tokens, output_tokens=sum(tokens), prompt_tokens=req.prompt_tokens,
            queued_s=queued, extra=extra,
        )


def _bursts(seq: Seq) -> tuple[int, ...]:
    """Tokens per emitting step of a speculatively decoded sequence: each segment (one run from a
    prefill to a finish or preemption) is the prefill's token, then its decode steps' bursts."""
    out: list[int] = []
    for first, last in seq.segments:
        out.append(1)
        out += burst_sizes(last - first, seq.rate, seq.phase, seq.max_tokens - sum(out))
    return tuple(out)
