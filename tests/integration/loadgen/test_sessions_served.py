"""Conversations over HTTP against two simulated replicas: each turn waits for the answer before it,
quotes the whole history with the answer the server returned, and the servers' own prefix-cache
counters agree with the simulator's prediction for the same sessions and routing."""

from __future__ import annotations

import asyncio
import urllib.request
from contextlib import ExitStack

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.layout import parse_layout
from orchestrator.loadgen.client import ClientConfig
from orchestrator.loadgen.engine_metrics import parse_prometheus
from orchestrator.loadgen.session_runner import run_sessions
from orchestrator.loadgen.sessions import conversation_sessions
from orchestrator.plan.checks import Cluster
from orchestrator.plan.inputs import PlanInputs
from orchestrator.sim.build import replica_engines
from orchestrator.sim.sessions import simulate_sessions
from orchestrator.spec.workload import ConversationSpec
from tests.support.engines import fixed_settings
from tests.support.sim_serving import MODEL, sim_server, wait_healthy

SCALE = 0.05  # wall seconds per simulated second: fast, and turn order is all that is asserted
CONV = ConversationSpec(turns=3, first_input_tokens=600, think_time_s=0.2)


def _counters(base: str) -> dict[str, float]:
    with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:
        return parse_prometheus(resp.read().decode())


def test_conversations_over_http_quote_their_history_and_hit_the_cache_as_predicted() -> None:
    sessions = conversation_sessions(10, CONV, 40, 30, seed=3)
    starts = [0.3 * i for i in range(10)]
    with ExitStack() as stack:
        bases = [stack.enter_context(sim_server(SCALE)) for _ in range(2)]
        assert all(wait_healthy(b) for b in bases)
        cfgs = [ClientConfig(b, MODEL, ignore_eos=True) for b in bases]
        ran = asyncio.run(run_sessions(cfgs, sessions.plans, starts=starts, balance="prefix_aware"))
        counters = [_counters(b) for b in bases]
    assert ran.started == ran.completed == 10 and ran.failed == 0
    recs = ran.records
    assert len(recs) == 30 and all(r.ok for r in recs), [r.error for r in recs if not r.ok]
    by_turn = {(r.extra["session"], int(r.extra["turn"])): r for r in recs}
    for (sid, turn), r in by_turn.items():
        if turn == 0:
            continue
        prev = by_turn[(sid, turn - 1)]
        assert prev.done_s is not None and r.sent_s >= prev.done_s  # after the answer it quotes
        # the prompt is the previous prompt, its answer (as returned), and the new user text
        user = sessions.plans[int(sid[1:])].steps[turn].calls[0].user.tokens
        assert r.prompt_tokens == (prev.prompt_tokens or 0) + (prev.output_tokens or 0) + user
        assert r.extra["endpoint"] == prev.extra["endpoint"]  # prefix-aware: the session stayed put
    hits = sum(c.get("prefix_hits", 0.0) for c in counters)
    queries = sum(c.get("prefix_queries", 0.0) for c in counters)
    # 30 prompts looked up once each (the same token counts as the records)
    assert queries == sum(r.prompt_tokens or 0 for r in recs)
    # the same sessions in virtual time, two replicas, the same routing: the same hit rate
    inputs = PlanInputs(cfg=load_model(MODEL), gpu=load_gpu("h100-sxm"), cluster=Cluster(1, 8),
                        settings=fixed_settings(8192))  # what the simulated server resolves for itself
    engines = replica_engines(inputs, parse_layout("tp8")) + replica_engines(inputs, parse_layout("tp8"))
    predicted = simulate_sessions(engines, sessions.plans, starts=starts, balance="prefix_aware").summary
    assert predicted.prefix_cache is not None and predicted.prefix_cache.hit_rate is not None
    assert abs(hits / queries - predicted.prefix_cache.hit_rate) < 0.02
    assert hits / queries > 0.5
