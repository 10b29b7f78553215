"""The simulated engine against hand-derived expectations from the cost model it calls."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.errors import SpecError
from orchestrator.layout import parse_layout
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.plan.checks import Cluster
from orchestrator.plan.inputs import PlanInputs, layout_cost
from orchestrator.sim.build import replica_engines
from orchestrator.sim.engine import EngineConfig, EngineCore, Seq, StepPlan
from orchestrator.sim.loops import simulate
from orchestrator.sim.virtual import SimRequest
from tests.support.engines import LIMITS, fixed_settings

INPUTS = PlanInputs(cfg=load_model("qwen2.5-72b"), gpu=load_gpu("h100-sxm"), cluster=Cluster(1, 8),
                    settings=fixed_settings(8192))


def _engine(layout: str = "tp8", **cfg: int) -> EngineCore:
    cost = layout_cost(INPUTS, parse_layout(layout))
    config = EngineConfig(kv_capacity_tokens=cfg.pop("kv", 500_000), **(LIMITS | cfg))
    return EngineCore(cost, config)


def test_single_request_timing_is_the_cost_model() -> None:
    eng = _engine()
    recs, summary = simulate([eng], [SimRequest("a", 1.0, 1000, 5)])
    rec = recs[0]
    cost = eng.cost
    prefill = cost.step(1000, 0, 1000 * 1001 / 2).total_s
    assert rec.ok and rec.output_tokens == 5 and len(rec.chunk_times_s) == 5
    assert rec.ttft_s == pytest.approx(prefill)
    # The k-th decode step reads the prompt plus the tokens generated so far.
    gaps = rec.itl_chunk_s
    for k, gap in enumerate(gaps):
        ctx = 1000 + 1 + k
        assert gap == pytest.approx(cost.step(1, ctx, ctx + 1).total_s)
    assert summary.steps == 5 and summary.preemptions == 0


def test_long_prompt_is_chunked_by_the_token_budget() -> None:
    eng = _engine(max_num_batched_tokens=2048)
    recs, summary = simulate([eng], [SimRequest("a", 0.0, 5000, 2)])
    assert summary.steps == 3 + 1  # ceil(5000/2048) prefill steps, then one decode
    whole = eng.cost.step(5000, 0, 5000 * 5001 / 2).total_s
    assert recs[0].ttft_s is not None and recs[0].ttft_s > whole  # chunks re-read the weights


def test_max_num_seqs_caps_the_batch() -> None:
    eng = _engine(max_num_seqs=4)
    reqs = [SimRequest(str(i), 0.0, 100, 50) for i in range(8)]
    recs, _ = simulate([eng], reqs)
    first_four = max(r.done_s or 0 for r in recs[:4])
    last_four_ttft = min(r.chunk_times_s[0] for r in recs[4:])
    assert last_four_ttft > first_four - 1e-9  # admitted only when the first batch finished
    assert all(r.output_tokens == 50 for r in recs)


def test_kv_pressure_preempts_and_recomputes_but_every_request_completes() -> None:
    eng = _engine(kv=3000)
    reqs = [SimRequest(str(i), 0.0, 500, 400) for i in range(6)]
    recs, summary = simulate([eng], reqs)
    assert summary.preemptions > 0
    assert all(r.ok and r.output_tokens == 400 and len(r.chunk_times_s) == 400 for r in recs)
    assert all(list(r.chunk_times_s) == sorted(r.chunk_times_s) for r in recs)


def test_request_longer_than_the_cache_is_refused() -> None:
    recs, summary = simulate([_engine(kv=1000)], [SimRequest("big", 0.0, 2000, 10)])
    assert recs[0].error == "http_400" and summary.rejected == 1


def test_deterministic_and_two_engines_queue_less() -> None:
    reqs = [SimRequest(str(i), i * 0.01, 2000, 100) for i in range(200)]
    a, _ = simulate([_engine(max_num_seqs=8)], reqs)
    b, _ = simulate([_engine(max_num_seqs=8)], reqs)
    assert [r.chunk_times_s for r in a] == [r.chunk_times_s for r in b]
    two, _ = simulate([_engine(max_num_seqs=8), _engine(max_num_seqs=8)], reqs)
    one_m = compute_metrics(a)
    two_m = compute_metrics(two)
    assert two_m.ttft_ms.p50 is not None and one_m.ttft_ms.p50 is not None
    assert two_m.ttft_ms.p50 < one_m.ttft_ms.p50
    assert two_m.total_output_tokens == one_m.total_output_tokens == 200 * 100


def test_pipeline_parallel_splits_into_micro_batches() -> None:
    pp = _engine("tp4pp2")
    reqs = [SimRequest(str(i), 0.0, 64, 20) for i in range(16)]
    recs, _ = simulate([pp], reqs)
    assert all(r.output_tokens == 20 for r in recs)
    plan = replace(pp.schedule(), tokens=16, kv_tokens=16 * 500, attn_pairs=16 * 500.0, sequences=16)
    stage = max(pp.cost.stage_times_s(8, 8 * 500, 8 * 500))
    assert pp.step_time_s(plan) >= 2 * stage


def test_replica_engines_use_planner_capacity() -> None:
    engines = replica_engines(INPUTS, parse_layout("tp4dp2"))
    assert len(engines) == 2
    assert engines[0].config.kv_capacity_tokens > 0
    with pytest.raises(SpecError, match="leave no room for KV"):
        replica_engines(INPUTS, parse_layout("dp8"))  # 145 GB of weights per GPU


def _poisson(n: int, rate: float, prompt: int, out: int, seed: int = 3) -> list[SimRequest]:
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    return [SimRequest(str(i), float(t[i]), prompt, out) for i in range(n)]


def test_littles_law_holds() -> None:
    """The engine's own queue length, averaged over time, equals arrival rate x mean time in system."""

    class Counting(EngineCore):
        weighted = 0.0

        def step_time_s(self, plan: StepPlan) -> float:
            dt = super().step_time_s(plan)
            self.weighted += dt * (len(self.running) + len(self.waiting))
            return dt

    cost = layout_cost(INPUTS, parse_layout("tp8"))
    eng = Counting(cost, EngineConfig(kv_capacity_tokens=500_000, **LIMITS))
    recs, _ = simulate([eng], _poisson(800, 3.0, 800, 200))
    start, end = min(r.sent_s for r in recs), max(r.done_s or 0 for r in recs)
    queue_length = eng.weighted / (end - start)
    little = len(recs) / (end - start) * sum((r.done_s or 0) - r.sent_s for r in recs) / len(recs)
    assert queue_length == pytest.approx(little, rel=0.05)


def test_throughput_saturates_near_the_planned_capacity() -> None:
    from orchestrator.plan.capacity import kv_capacity_tokens
    from orchestrator.plan.decode import decode_estimate

    eng = _engine(max_num_seqs=64)
    recs, _ = simulate([eng], [SimRequest(str(i), 0.0, 512, 256) for i in range(512)])
    span = max(r.done_s or 0 for r in recs) - min(r.sent_s for r in recs)
    measured = sum(r.output_tokens or 0 for r in recs) / span
    kv = kv_capacity_tokens(INPUTS, eng.cost)[0]
    estimate = decode_estimate(eng.cost, parse_layout("tp8"), 64, 512 + 128, kv, step_budget_tokens=8192)
    planned = estimate.output_tokens_per_s_per_replica
    # Prefill steps take time that pure decode does not, so the simulated engine stays below the plan.
    assert 0.6 * planned < measured < planned


def test_kv_exhaustion_queues_and_preempts() -> None:
    roomy, _ = simulate([_engine(kv=400_000)], [SimRequest(str(i), 0.0, 1500, 300) for i in range(40)])
    tight_engine = _engine(kv=12_000)
    tight, summary = simulate([tight_engine], [SimRequest(str(i), 0.0, 1500, 300) for i in range(40)])
    assert summary.preemptions > 0
    assert max(r.chunk_times_s[0] for r in tight) > max(r.chunk_times_s[0] for r in roomy)


# -- the scheduler's rules (vLLM v1): whole chunks or nothing, no admission in a preempting step ----

def test_a_waiting_request_is_not_admitted_with_a_chunk_shrunk_to_the_free_kv() -> None:
    eng = _engine(kv=3000)
    eng.add(Seq("a", 2500, 10, 0.0))
    eng.add(Seq("b", 1000, 10, 0.0))  # 2500 + 1000 tokens do not fit together
    plan = eng.schedule()
    assert [(s.request_id, c) for s, c in plan.prefill_chunks] == [("a", 2500)]
    pair = [SimRequest("a", 0.0, 2500, 10), SimRequest("b", 0.0, 1000, 10)]
    recs, summary = simulate([_engine(kv=3000)], pair)
    assert summary.preemptions == 0  # b waits for a's blocks instead of being admitted and evicted
    assert recs[1].chunk_times_s[0] > (recs[0].done_s or 0) - 1e-12


def test_a_step_that_preempts_admits_nothing() -> None:
    eng = _engine(kv=1000)
    eng.add(Seq("a", 400, 300, 0.0))
    eng.add(Seq("b", 400, 300, 0.0))
    preempting: list[StepPlan] = []
    for _ in range(400):
        before = eng.preemptions
        plan = eng.schedule()
        if eng.preemptions > before:
            preempting.append(plan)
        eng.complete(plan)
    assert preempting, "decode growth of a and b must overflow 1000 tokens of KV"
    # b (the newer) is preempted and would fit a shrunk chunk at once; vLLM v1 admits no one that step.
    assert all(p.prefill_chunks == () for p in preempting)


def test_every_step_fits_the_cache_and_chunks_are_cut_only_by_the_token_budget() -> None:
    import numpy as np

    rng = np.random.default_rng(5)
    budget = 2048
    eng = _engine(kv=30_000, max_num_batched_tokens=budget, max_num_seqs=64)
    for i in range(300):
        eng.add(Seq(str(i), int(rng.integers(100, 6000)), int(rng.integers(10, 800)), 0.0))
    steps = 0
    while eng.has_work():
        plan = eng.schedule()
        assert plan.tokens > 0
        assert eng.kv_used_tokens() + sum(c for _, c in plan.prefill_chunks) + plan.decodes <= 30_000
        chunks = plan.prefill_chunks
        for k, (seq, chunk) in enumerate(chunks):
            remaining = seq.prefill_target - seq.computed
            # Only the last chunk of a step may be cut, and only when the step uses its whole budget.
            assert chunk == remaining or (k == len(chunks) - 1 and plan.tokens == budget)
        eng.complete(plan)
        steps += 1
    assert eng.preemptions > 0 and steps > 0


def test_kv_bound_burst_keeps_the_planned_throughput_with_few_preemptions() -> None:
    """1,000 requests of 4,000 + 1,000 tokens (5M tokens of KV) on a cache of about 410k tokens.

    The planner's capacity: a KV-limited decode batch B = KV / (prompt + output/2) at the planner's
    decode step time, plus every prompt's prefill once. The simulated engine must reach 0.8 to 1.1
    of it (0.89 when written; recomputing preempted requests and mixed steps cost the rest; with
    chunks shrunk to the free KV it was 0.28). Preemptions stay rare: a newly admitted request is
    evicted only when decode growth outruns the KV that finishing requests free: 237 when written,
    under the bound of 0.3 per request
    (before vLLM v1's rules: 10,169). The first wave alone preempts about output/(prompt+output) of
    the requests it admitted, since admission fills the cache with prompts that then grow.
    """
    from orchestrator.plan.capacity import kv_capacity_tokens
    from orchestrator.plan.decode import decode_estimate

    inputs = PlanInputs(cfg=load_model("llama-3.1-70b"), gpu=load_gpu("h100-sxm"), cluster=Cluster(1, 8),
                        settings=fixed_settings(8192))
    layout = parse_layout("tp4")
    n, prompt, out = 1000, 4000, 1000
    eng = replica_engines(inputs, layout)[0]
    kv = kv_capacity_tokens(inputs, eng.cost)[0]
    assert n * (prompt + out) > 10 * kv  # KV-bound by an order of magnitude
    recs, summary = simulate([eng], [SimRequest(str(i), 0.0, prompt, out) for i in range(n)])
    assert all(r.ok and r.output_tokens == out for r in recs)
    span = max(r.done_s or 0 for r in recs)
    simulated = n * out / span
    batch = min(kv // (prompt + out // 2), eng.config.max_num_seqs)
    decode = decode_estimate(eng.cost, layout, batch, prompt + out // 2, kv, step_budget_tokens=8192)
    prefill_s = eng.cost.step(prompt, 0, prompt * (prompt + 1) / 2).total_s
    planned = n * out / (n * prefill_s + n * out / batch * decode.itl_ms / 1e3)
    assert 0.8 * planned < simulated < 1.1 * planned
    assert summary.preemptions < 0.3 * n
