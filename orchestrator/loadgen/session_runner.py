"""Session workloads over HTTP: each session sends a step's calls, waits for every answer, puts the
answers the server returned into the history (loadgen/sessions.py), waits the think time, and sends
the next step. Sessions start at their offsets (open loop: a rate of sessions) or `concurrency` at a
time (closed loop). With `duration_s` nothing is sent from then on (a session still going stops
there, unfinished), as in virtual time (sim/sessions.py). A failed call ends its session: the rest of
it is not sent (its history would hold no answer), and the session counts as failed.

Timing as the other runners: a call's scheduled time is when it was due (the session's start, or the
last answer plus the think time), taken on time.perf_counter(); sends are spun onto that time as
run_open_loop does. Each answer is decoded as soon as it ends (the next turn quotes it), and the
record carries the session and turn in `extra` ("session", "turn", and "session_end" on the calls
of a session's last step).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.loadgen.balance import Balance, Balancer
from orchestrator.loadgen.client import SPIN_S, ClientConfig, RequestSpec, send_balanced
from orchestrator.loadgen.decode import RecordSink, answer_text, to_record
from orchestrator.loadgen.http1 import Http1Client
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.sessions import PendingCall, SessionPlan, SessionState
from orchestrator.loadgen.texts import PromptMaker


@dataclass(frozen=True)
class SessionsResult:
    records: list[RequestRecord]  # in send order
    started: int
    completed: int
    failed: int
    unfinished: int = 0  # still going when duration_s ended


async def _until(at: float) -> None:
    delay = at - time.perf_counter()
    if delay > SPIN_S:
        await asyncio.sleep(delay - SPIN_S)
    while time.perf_counter() < at:
        await asyncio.sleep(0)


async def run_sessions(
    cfgs: Sequence[ClientConfig],
    plans: Sequence[SessionPlan],
    *,
    starts: Sequence[float] | None = None,
    concurrency: int | None = None,
    duration_s: float | None = None,
    balance: Balance = "round_robin",
    texts: PromptMaker | None = None,
    sink: RecordSink | None = None,
    session: Http1Client | None = None,
    extra_body: dict[str, Any] | None = None,
) -> SessionsResult:
    """Run the sessions: open loop at `starts` (offsets in seconds, one per plan) or a closed loop of
    `concurrency` sessions (with `duration_s`, plans cycle until then; ids suffixed "#k").
    `extra_body` goes into every request (e.g. vLLM's allowed_token_ids)."""
    if (starts is None) == (concurrency is None):
        raise ValueError("give session start offsets (open loop) or a concurrency (closed loop)")
    if not cfgs:
        raise ValueError("need at least one endpoint")
    chat = cfgs[0].endpoint == "chat"
    maker = texts or PromptMaker(None)
    bal = Balancer(len(cfgs), balance)
    own = session is None
    sess = session if session is not None else Http1Client()
    records: list[tuple[float, int, RequestRecord]] = []
    counts = {"started": 0, "completed": 0, "failed": 0, "unfinished": 0}
    order = 0
    t0 = time.perf_counter()

    async def call(c: PendingCall, at: float) -> RequestRecord:
        nonlocal order
        extra = {**(extra_body or {}), **({"messages": list(c.messages)} if chat else {})}
        spec = RequestSpec(c.request_id, c.prompt, c.max_tokens, None, extra, c.content)
        sent = await send_balanced(sess, list(cfgs), bal, spec, at, 0.0)
        rec = to_record(sent)
        rec = replace(rec, extra={**rec.extra, **dict(c.tags)})
        order += 1
        records.append((sent.sent_s, order, rec))
        if sink is not None:
            sink.append(rec)
        if rec.ok:
            state_of[c.request_id].answered(index_of[c.request_id], answer_text(sent.exchange),
                                            rec.output_tokens or c.max_tokens)
        return rec

    state_of: dict[str, SessionState] = {}
    index_of: dict[str, int] = {}

    async def one(plan: SessionPlan, at: float) -> None:
        state = SessionState(plan, maker, chat)
        counts["started"] += 1
        while True:
            await _until(at)
            calls = state.calls()
            for i, c in enumerate(calls):
                state_of[c.request_id], index_of[c.request_id] = state, i
            recs = await asyncio.gather(*(call(c, at) for c in calls))
            for c in calls:
                del state_of[c.request_id], index_of[c.request_id]
            if not all(r.ok for r in recs):
                counts["failed"] += 1
                return
            think = state.advance()
            if think is None:
                counts["completed"] += 1
                return
            at = time.perf_counter() + think
            if duration_s is not None and at - t0 >= duration_s:
                counts["unfinished"] += 1
                return

    tasks: list[asyncio.Task[None]] = []
    try:
        if starts is not None:
            tasks = [asyncio.create_task(one(p, t0 + off)) for p, off in zip(plans, starts, strict=True)]
            await asyncio.gather(*tasks)
        else:
            assert concurrency is not None
            queue: deque[SessionPlan] = deque(plans)
            cycle = 0

            def next_plan() -> SessionPlan | None:
                nonlocal cycle
                if duration_s is not None and time.perf_counter() - t0 >= duration_s:
                    return None
                if not queue and duration_s is not None and plans:
                    cycle += 1
                    queue.extend(replace(p, session_id=f"{p.session_id}#{cycle}") for p in plans)
                return queue.popleft() if queue else None

            async def worker() -> None:
                while (plan := next_plan()) is not None:
                    await one(plan, time.perf_counter())

            tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
            await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        if own:
            await sess.close()
    return SessionsResult([r for _, _, r in sorted(records, key=lambda x: (x[0], x[1]))],
                          counts["started"], counts["completed"], counts["failed"], counts["unfinished"])
