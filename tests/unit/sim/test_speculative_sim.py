"""Speculative decoding in the simulated engine: bursts of tokens, the step formula, KV bookkeeping."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.layout import parse_layout
from orchestrator.plan.checks import Cluster
from orchestrator.plan.inputs import PlanInputs, layout_cost, speculative_step_cost
from orchestrator.plan.speculative import single_speculative
from orchestrator.sim.build import replica_engines
from orchestrator.sim.engine import EngineConfig, EngineCore, Seq, StepPlan
from orchestrator.sim.loops import closed_loop, simulate
from orchestrator.sim.speculative import burst_sizes, steps_to_emit, tokens_after
from orchestrator.sim.virtual import SimRequest
from orchestrator.spec.speculative import SpeculativeSpec
from tests.support.engines import LIMITS, fixed_settings

CFG = load_model("llama-3.1-70b")


def _inputs(acceptance: float | None = 0.5, k: int = 4, method: str = "ngram") -> PlanInputs:
    spec = None
    if acceptance is not None:
        spec = single_speculative(SpeculativeSpec.model_validate(
            {"method": method, "num_speculative_tokens": k, "acceptance_rate": acceptance}), CFG)
    return PlanInputs(cfg=CFG, gpu=load_gpu("h100-sxm"), cluster=Cluster(1, 8),
                      settings=replace(fixed_settings(8192), speculative=spec))


@given(rate=st.floats(1.0, 9.0), phase=st.floats(0.0, 0.999), tokens=st.integers(1, 5000))
def test_steps_to_emit_is_the_first_step_with_enough_tokens(rate: float, phase: float, tokens: int) -> None:
    n = steps_to_emit(tokens, rate, phase)
    assert tokens_after(n, rate, phase) >= tokens
    assert n == 1 or tokens_after(n - 1, rate, phase) < tokens


@given(rate=st.floats(1.0, 9.0), phase=st.floats(0.0, 0.999), steps=st.integers(1, 300))
def test_bursts_are_floor_or_ceil_of_the_rate(rate: float, phase: float, steps: int) -> None:
    sizes = burst_sizes(steps, rate, phase, cap=10**9)
    assert all(math.floor(rate) <= s <= math.ceil(rate) for s in sizes)
    assert sum(sizes) == tokens_after(steps, rate, phase)


def test_every_request_gets_exactly_its_tokens_in_bursts() -> None:
    (eng,) = replica_engines(_inputs(0.6), parse_layout("tp4"))
    rate = eng.rate
    assert rate == pytest.approx(1 + sum(0.6 ** i for i in range(1, 5)))
    reqs = [SimRequest(str(i), 0.05 * i, 300 + 7 * i, 40 + i) for i in range(40)]
    recs, summary = simulate([eng], reqs)
    for rec, req in zip(recs, reqs, strict=True):
        assert rec.ok and rec.output_tokens == req.max_tokens == sum(rec.chunk_tokens)
        assert rec.chunk_tokens[0] == 1  # the prefill's token
        assert all(1 <= t <= math.ceil(rate) for t in rec.chunk_tokens)
        assert len(rec.chunk_times_s) == len(rec.chunk_tokens)
    assert summary.steps < sum(r.max_tokens for r in reqs)  # fewer steps than tokens
    assert eng.decode_ctx == pytest.approx(0.0, abs=1e-6) and not eng.running


def test_preemption_keeps_the_token_count_exact() -> None:
    inputs = _inputs(0.7)
    layout = parse_layout("tp4")
    cost = layout_cost(inputs, layout)
    spec = speculative_step_cost(inputs, cost)
    eng = EngineCore(cost, EngineConfig(kv_capacity_tokens=3000, **LIMITS, speculative=spec))
    reqs = [SimRequest(str(i), 0.0, 400, 300) for i in range(12)]
    recs, summary = simulate([eng], reqs)
    assert summary.preemptions > 0
    assert all(r.ok and r.output_tokens == 300 == sum(r.chunk_tokens) for r in recs)
    assert eng.decode_ctx == pytest.approx(0.0, abs=1e-6)


def test_a_lone_request_runs_at_the_planners_speculative_step() -> None:
    inputs = _inputs(0.5)
    layout = parse_layout("tp4")
    (eng,) = replica_engines(inputs, layout)
    assert eng.spec is not None
    recs, _ = simulate([eng], [SimRequest("a", 0.0, 1000, 200)])
    gaps = recs[0].itl_chunk_s
    # Each gap is one speculative step at the context of the moment, as SpeculativeCost prices it.
    expected = eng.spec.decode_step_s(1, 1000 + 100)
    assert sorted(gaps)[len(gaps) // 2] == pytest.approx(expected, rel=0.02)


def test_speculation_wins_at_concurrency_one_and_loses_at_high_concurrency() -> None:
    layout = parse_layout("tp4")
    reqs = [SimRequest(str(i), 0.0, 500, 200) for i in range(300)]

    def tpot(inputs: PlanInputs, clients: int) -> float:
        engines = replica_engines(inputs, layout)
        recs, _ = closed_loop(engines, reqs[: max(clients * 2, 4)], clients)
        values = sorted(r.tpot_s for r in recs if r.tpot_s is not None)
        return values[len(values) // 2]

    off, on = _inputs(None), _inputs(0.5)
    assert tpot(on, 1) < 0.7 * tpot(off, 1)
    assert tpot(on, 256) > tpot(off, 256)


def _drive_speculative(fast: bool) -> tuple[list[tuple[object, ...]], int, int]:
    """A speculative engine with a small KV cache (it preempts) through staggered arrivals, taking the
    decode fast path (`next_decode`) where it applies, or never: (trace of plans, fast steps, preemptions)."""
    inputs = _inputs(0.6)
    cost = layout_cost(inputs, parse_layout("tp4"))
    eng = EngineCore(cost, EngineConfig(kv_capacity_tokens=2500, **LIMITS,
                                        speculative=speculative_step_cost(inputs, cost)))
    arrivals = {3 * k: Seq(str(k), 200 + 37 * (k % 5), 60 + 45 * (k % 7), 0.0) for k in range(40)}

    def row(p: StepPlan) -> tuple[object, ...]:
        return (p.index, p.tokens, p.kv_tokens, p.decodes, p.sequences, len(p.prefill_chunks),
                eng.kv_used_tokens())

    trace, taken = [], 0
    plan = eng.schedule()
    for tick in range(50_000):
        if (seq := arrivals.pop(tick, None)) is not None:
            eng.add(seq)
        nxt = eng.next_decode(plan) if fast else None
        if nxt is None:
            eng.complete(plan)
            plan = eng.schedule()
        else:
            taken, plan = taken + 1, nxt
        trace.append(row(plan))
        if not arrivals and not eng.has_work():
            break
    return trace, taken, eng.preemptions


def test_the_decode_fast_path_steps_a_speculative_engine_as_the_general_one() -> None:
    # next_decode must grow the context by the expected tokens per step and hold k+1 KV slots per
    # decode during the step, as complete() and schedule() do; with one token it drifted from them.
    plain, none, plain_preempted = _drive_speculative(False)
    fast, taken, fast_preempted = _drive_speculative(True)
    assert none == 0 and 0 < taken < len(fast)
    assert fast == plain and fast_preempted == plain_preempted > 0
