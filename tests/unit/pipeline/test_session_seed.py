"""A session workload's plan and seed are priced on what the engine processes per call: the whole
history as context, its uncached part as prefill (the cached prefix depending on where routing sends a
session's calls), and the rate counts sessions. Before, a call was priced as its new user text alone
(150 tokens of chat-multiturn.yaml's ~3,200-token prompts), and the seed came out 5-20x the capacity."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.layout import parse_layout
from orchestrator.loadgen.spec_workload import call_shape
from orchestrator.pipeline.points import call_tokens, plan_row, planner_seed
from orchestrator.pipeline.predict import planned_capacity_rate
from orchestrator.pipeline.sweep import Sweep
from orchestrator.plan.planner import PlanRow, plan_layout
from orchestrator.plan.run import itl_bound_ms
from orchestrator.spec.load import load_spec
from orchestrator.spec.workload import ConversationSpec, WorkloadSpec
from orchestrator.store.db import Store
from tests.support.observers import QuietObserver
from tests.support.paths import ROOT


def three_turns() -> WorkloadSpec:
    return WorkloadSpec(kind="conversation", input_tokens=100, output_tokens=200, rates_per_s=[1.0],
                       num_requests=10,
                        conversation=ConversationSpec(turns=3, first_input_tokens=1000))


def test_a_conversation_call_is_its_whole_history_less_the_cached_blocks() -> None:
    # prompts 1000, 1000+200+100, 1300+200+100: mean 1300; blocks of 16 cached after each answer:
    # turn 2 finds 1200 (75 blocks), turn 3 finds 1488 (93 blocks, the answer's partial block recomputed)
    shape = call_shape(three_turns(), same_engine=1.0, block_size=16)
    assert (shape.calls, shape.output_tokens, shape.prompt_tokens) == (3, 200, 1300)
    assert shape.cached_tokens == pytest.approx((0 + 1200 + 1488) / 3)
    # half the time on the engine that served the turn before: turn 2 hits 1200 with 1/2, turn 3
    # hits 1488 with 1/2, else turn 1's 1200 with 1/4
    half = call_shape(three_turns(), same_engine=0.5, block_size=16)
    assert half.cached_tokens == pytest.approx((0 + 600 + 744 + 300) / 3)
    off = call_shape(three_turns(), same_engine=1.0, block_size=16, prefix_caching=False)
    assert off.cached_tokens == 0 and off.uncached_tokens == 1300


def test_a_request_workloads_call_is_its_prompt() -> None:
    w = load_spec(ROOT / "layouts" / "qwen72b.yaml").workload
    shape = call_shape(w, same_engine=0.5)
    assert (shape.calls, shape.prompt_tokens, shape.cached_tokens, shape.output_tokens) == (1, 1024, 0, 256)


def test_a_conversation_seed_prices_the_uncached_history_in_sessions_per_s(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "layouts" / "chat-multiturn.yaml")
    seeds = {}
    for policy in ("prefix_aware", "round_robin"):
        one = spec.model_copy(update={"routing": policy})
        sweep = Sweep(one, Store(tmp_path / f"{policy}.db"), QuietObserver())
        cand = sweep.ctx.candidate(parse_layout("tp2x4"))
        shape = call_tokens(sweep.ctx, cand)
        assert 5 < shape.calls < 6  # turns: uniform 3-8
        assert shape.prompt_tokens > 2500  # a 2,000-token document, then the growing history
        row = plan_row(sweep.ctx, cand)
        assert isinstance(row, PlanRow) and row.best is not None
        priced = plan_layout(sweep.ctx.inputs.with_settings(cand.settings), cand.layout,
                             prompt_tokens=round(shape.uncached_tokens),
                             context_tokens=round(shape.prompt_tokens) + round(shape.output_tokens) // 2,
                             itl_bound_ms=itl_bound_ms(one), output_tokens=round(shape.output_tokens))
        assert row.best == priced.best
        seed, _, _ = planner_seed(sweep.ctx, cand, row)
        rate = planned_capacity_rate(row, round(shape.output_tokens))
        assert rate is not None and seed == pytest.approx(rate / shape.calls)  # sessions/s
        # the old pricing (a call = its 150 new tokens) claims far more
        old = plan_layout(sweep.ctx.inputs.with_settings(cand.settings), cand.layout, prompt_tokens=150,
                          context_tokens=150 + 150, itl_bound_ms=itl_bound_ms(one), output_tokens=300)
        old_rate = planned_capacity_rate(old, 300)
        assert old_rate is not None and seed < old_rate / shape.calls / 2
        seeds[policy] = (seed, shape.cached_tokens)
    # tp2x4 has 4 replicas: round robin finds a session's history on its engine a quarter of the time
    assert seeds["round_robin"][1] < seeds["prefix_aware"][1]
    assert seeds["round_robin"][0] < seeds["prefix_aware"][0]

