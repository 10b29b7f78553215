"""Conversations and agentic sessions in virtual time: turns wait for the answers before them, the
history is reused from the prefix cache, and routing decides how much of it is found."""

from __future__ import annotations

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.layout import parse_layout
from orchestrator.loadgen.metrics import summarize
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.sessions import agentic_sessions, conversation_sessions
from orchestrator.plan.checks import Cluster
from orchestrator.plan.inputs import PlanInputs, layout_cost
from orchestrator.sim.engine import EngineConfig, EngineCore
from orchestrator.sim.sessions import simulate_sessions
from orchestrator.spec.workload import AgenticSpec, ConversationSpec
from tests.support.engines import LIMITS, fixed_settings

INPUTS = PlanInputs(cfg=load_model("qwen2.5-72b"), gpu=load_gpu("h100-sxm"), cluster=Cluster(1, 8),
                    settings=fixed_settings(32768))
COST = layout_cost(INPUTS, parse_layout("tp8"))
CONV = ConversationSpec(turns=5, first_input_tokens=3000, think_time_s=2.0)


def _engines(n: int, caching: bool = True, kv: int = 400_000) -> list[EngineCore]:
    config = EngineConfig(kv_capacity_tokens=kv, prefix_caching=caching, **LIMITS)  # type: ignore[arg-type]
    return [EngineCore(COST, config) for _ in range(n)]


def _ttft(recs: list[RequestRecord], first: bool) -> float:
    d = summarize(r.ttft_s * 1e3 for r in recs if r.ok and r.ttft_s is not None
                  and (r.extra["turn"] == "0") == first)
    assert d.p50 is not None
    return d.p50


def test_turns_follow_their_answers_and_reuse_the_history() -> None:
    sessions = conversation_sessions(20, CONV, 100, 200, seed=1)
    run = simulate_sessions(_engines(1), sessions.plans, starts=[i * 3.0 for i in range(20)])
    recs = run.records
    assert run.sessions_completed == 20 and len(recs) == 100 and all(r.ok for r in recs)
    by_id = {r.request_id: r for r in recs}
    for r in recs:  # each turn is sent after the previous answer plus 2 s of think time
        turn = int(r.extra["turn"])
        if turn:
            prev = by_id[f"{r.extra['session']}-t{turn - 1}"]
            assert prev.done_s is not None and abs(r.sent_s - (prev.done_s + 2.0)) < 1e-9
    later = [r for r in recs if r.extra["turn"] != "0"]
    assert all(int(r.extra["cached_tokens"]) >= (r.prompt_tokens or 0) - 16 - 100 - 200 for r in later)
    assert _ttft(recs, first=False) < _ttft(recs, first=True) / 3
    off = simulate_sessions(_engines(1, caching=False), sessions.plans, starts=[i * 3.0 for i in range(20)])
    assert _ttft(off.records, first=False) > _ttft(off.records, first=True)  # whole history recomputed


def test_a_closed_loop_keeps_n_sessions_going() -> None:
    sessions = conversation_sessions(12, CONV, 100, 50, seed=2)
    run = simulate_sessions(_engines(1), sessions.plans, concurrency=3)
    assert run.sessions_started == run.sessions_completed == 12
    # never more than 3 sessions have a call out at once
    events = sorted([(r.sent_s, 1) for r in run.records] + [(r.done_s or 0.0, -1) for r in run.records])
    live, peak = 0, 0
    for _, d in events:
        live += d
        peak = max(peak, live)
    assert peak <= 3
    timed = simulate_sessions(_engines(1), sessions.plans[:2], concurrency=2, duration_s=200.0)
    assert timed.sessions_started > 2  # the plans cycle until the duration ends


def test_sessions_are_cut_at_max_model_len() -> None:
    sessions = conversation_sessions(10, ConversationSpec(turns=8), 1000, 500, seed=3, max_model_len=5000)
    assert sessions.cut_sessions == 10 and sessions.dropped_calls == 10 * 5
    assert all(len(p.steps) == 3 for p in sessions.plans)
    note = sessions.note()
    assert note is not None and "max_model_len 5000" in note


def test_agentic_rounds_share_the_tools_and_parallel_calls_join() -> None:
    spec = AgenticSpec(rounds=3, parallel_calls=3, tool_time_s=0.5)
    sessions = agentic_sessions(6, spec, 300, 400, seed=4)
    assert all(len(p.steps[1].calls) == 3 for p in sessions.plans)
    run = simulate_sessions(_engines(1), sessions.plans, starts=[i * 1.0 for i in range(6)])
    recs = run.records
    assert run.sessions_completed == 6 and all(r.ok for r in recs)
    by_session: dict[str, list[RequestRecord]] = {}
    for r in recs:
        by_session.setdefault(r.extra["session"], []).append(r)
    for rs in by_session.values():
        sub = [r for r in rs if r.extra["turn"] == "1"]
        final = next(r for r in rs if r.extra["turn"] == "2")
        assert final.sent_s >= max(r.done_s or 0 for r in sub) + 0.5 - 1e-9  # the join, then tool time
    # every session after the first finds the shared system prompt and tools cached
    shared = 1000 + 2000
    firsts = [r for r in recs if r.extra["turn"] == "0"]
    assert sum(int(r.extra["cached_tokens"]) >= shared - 16 for r in firsts) >= 5


def test_prefix_aware_routing_keeps_the_history_where_it_is_cached() -> None:
    sessions = conversation_sessions(40, CONV, 100, 200, seed=5)
    starts = [i * 0.5 for i in range(40)]
    runs = {b: simulate_sessions(_engines(4), sessions.plans, starts=starts, balance=b)
            for b in ("round_robin", "prefix_aware")}
    rate = {b: r.summary.prefix_cache.hit_rate for b, r in runs.items()}  # type: ignore[union-attr]
    assert rate["prefix_aware"] is not None and rate["round_robin"] is not None
    assert rate["prefix_aware"] > rate["round_robin"] + 0.3
    assert _ttft(runs["prefix_aware"].records, first=False) < _ttft(runs["round_robin"].records, first=False)
