"""Session workloads in virtual time: each turn (or round) is sent once every call of the step before it
has answered, plus the think time, with the answer the simulated engine returns in the history (the
same state machine the load generator runs over HTTP: loadgen/sessions.py).

Open loop: sessions start at their arrival offsets (a rate of sessions). Closed loop: `concurrency`
sessions at a time, the next starting as one ends (with `duration_s`, the plans cycle, ids suffixed
"#k"). With `duration_s`, nothing is sent from then on: a session still going stops there (counted
as unfinished), so an overloaded point ends when its queues drain, not when every late session has
run its course. A call the engine refuses (longer than it can ever hold) ends its session: nothing
after it is sent.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

from orchestrator.loadgen.balance import Balance
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.sessions import SessionPlan, SessionState
from orchestrator.sim.engine import EngineCore
from orchestrator.sim.virtual import SimRequest, SimSummary, VirtualRun


@dataclass(frozen=True)
class SessionsRun:
    records: list[RequestRecord]
    summary: SimSummary
    sessions_started: int
    sessions_completed: int  # every call answered
    sessions_failed: int  # a call refused: the rest not sent
    sessions_unfinished: int = 0  # still going when the load point's duration ended


class _Driver:
    def __init__(self, plans: Sequence[SessionPlan], starts: Sequence[float] | None, concurrency: int | None,
                 duration_s: float | None) -> None:
        self.plans, self.starts, self.duration_s = list(plans), starts, duration_s
        self.queue: deque[SessionPlan] = deque(self.plans)
        self.cycle = 0
        self.states: dict[str, SessionState] = {}
        self.calls: dict[str, tuple[str, int, int]] = {}  # request id -> (session, call index, max tokens)
        self.open_calls: dict[str, int] = {}
        self.failed: set[str] = set()
        self.started = self.completed = self.unfinished = 0
        self.concurrency = concurrency

    def first(self) -> list[SimRequest]:
        if self.starts is not None:
            out: list[SimRequest] = []
            for plan, t in zip(self.plans, self.starts, strict=True):
                out += self._start(plan, t)
            return out
        assert self.concurrency is not None
        out = []
        for _ in range(self.concurrency):
            nxt = self._next_plan(0.0)
            if nxt is None:
                break
            out += self._start(nxt, 0.0)
        return out

    def _next_plan(self, t: float) -> SessionPlan | None:
        if not self.queue:
            if self.duration_s is None or t >= self.duration_s or not self.plans:
                return None
            self.cycle += 1
            self.queue.extend(replace(p, session_id=f"{p.session_id}#{self.cycle}") for p in self.plans)
        if self.duration_s is not None and t >= self.duration_s:
            return None
        return self.queue.popleft()

    def _start(self, plan: SessionPlan, t: float) -> list[SimRequest]:
        state = SessionState(plan)
        self.states[plan.session_id] = state
        self.started += 1
        return self._send(state, t)

    def _send(self, state: SessionState, t: float) -> list[SimRequest]:
        sid = state.plan.session_id
        calls = state.calls()
        self.open_calls[sid] = len(calls)
        out = []
        for i, c in enumerate(calls):
            self.calls[c.request_id] = (sid, i, c.max_tokens)
            out.append(SimRequest(c.request_id, t, c.content.end, c.max_tokens, c.content, c.tags))
        return out

    def follow(self, rid: str, t: float, ok: bool) -> list[SimRequest]:
        sid, i, max_tokens = self.calls.pop(rid)
        state = self.states[sid]
        if ok:
            state.answered(i, None, max_tokens)  # the simulated engine answers exactly max_tokens
        else:
            self.failed.add(sid)
        self.open_calls[sid] -= 1
        if self.open_calls[sid]:
            return []  # the step's other calls are still out
        think = None if sid in self.failed else state.advance()
        if think is not None and (self.duration_s is None or t + think < self.duration_s):
            return self._send(state, t + think)
        del self.states[sid]
        if think is not None:
            self.unfinished += 1
        elif sid not in self.failed:
            self.completed += 1
        if self.concurrency is None:
            return []
        plan = self._next_plan(t)
        return self._start(plan, t) if plan is not None else []


def simulate_sessions(engines: Sequence[EngineCore], plans: Sequence[SessionPlan], *,
                      starts: Sequence[float] | None = None, concurrency: int | None = None,
                      duration_s: float | None = None, balance: Balance = "least_outstanding", dp: int = 1,
                      sample_interval_s: float | None = None) -> SessionsRun:
    """Run sessions through the engines: open loop at `starts` (one offset per plan) or a closed loop of
    `concurrency` sessions. Records come in send order, tagged with their session and turn."""
    if (starts is None) == (concurrency is None):
        raise ValueError("give session start times (open loop) or a concurrency (closed loop)")
    if concurrency is not None and concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    driver = _Driver(plans, starts, concurrency, duration_s)
    run = VirtualRun(engines, balance, None, closed=False, sample_s=sample_interval_s, dp=dp)
    run.follow = driver.follow
    records, summary = run.go(driver.first(), None)
    return SessionsRun(records, summary, driver.started, driver.completed, len(driver.failed),
                       driver.unfinished)
