"""A closed loop that ramps its clients up and is measured past its first wave, as benchmark tools do."""

from __future__ import annotations

import statistics

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.layout import parse_layout
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.loadgen.window import closed_loop_warmup_s
from orchestrator.plan.checks import Cluster
from orchestrator.plan.inputs import PlanInputs, layout_cost
from orchestrator.sim.engine import EngineConfig, EngineCore
from orchestrator.sim.loops import closed_loop, single_request_s
from orchestrator.sim.virtual import SimRequest
from tests.support.engines import LIMITS, fixed_settings

INPUTS = PlanInputs(cfg=load_model("llama-3.1-70b"), gpu=load_gpu("h100"), cluster=Cluster(1, 8),
                    settings=fixed_settings(8192))


def _engine() -> EngineCore:
    config = EngineConfig(kv_capacity_tokens=400_000, **LIMITS)
    return EngineCore(layout_cost(INPUTS, parse_layout("tp2")), config)


def _reqs(n: int) -> list[SimRequest]:
    return [SimRequest(str(i), 0.0, 5000, 500) for i in range(n)]


def test_ramp_staggers_the_first_sends_and_breaks_the_lockstep() -> None:
    ramp = single_request_s(_engine(), 5000, 500)
    assert ramp > 500 * 0.005  # 500 tokens at several ms each, plus a 5,000-token prefill
    together, _ = closed_loop([_engine()], _reqs(200), 20)
    ramped, _ = closed_loop([_engine()], _reqs(200), 20, ramp_s=ramp)
    firsts = sorted(r.sent_s for r in ramped)[:20]
    assert firsts[0] == 0.0 and firsts[-1] == ramp * 19 / 20
    assert [r.sent_s for r in together].count(0.0) == 20
    steady = [r for r in ramped if r.sent_s >= ramp]
    # Staggered clients send one at a time: fewer prompts wait behind each other than in lockstep waves
    ttft = statistics.mean(r.ttft_s for r in steady if r.ttft_s is not None)
    lock = statistics.mean(r.ttft_s for r in together[20:] if r.ttft_s is not None)
    assert ttft < lock


def test_default_warmup_cuts_the_first_wave() -> None:
    recs, _ = closed_loop([_engine()], _reqs(100), 10)
    warm = closed_loop_warmup_s(recs, 10)
    first = sorted(recs, key=lambda r: r.sent_s)[:10]
    assert warm == max(r.done_s for r in first if r.done_s is not None)
    cut = compute_metrics(recs, warmup_s=warm)
    whole = compute_metrics(recs)
    assert cut.n_completed < whole.n_completed
    assert cut.ttft_ms.mean is not None and whole.ttft_ms.mean is not None
    assert cut.ttft_ms.mean < whole.ttft_ms.mean
    assert closed_loop_warmup_s(recs[:25], 10) == 0.0  # under three requests per client: nothing cut
    assert closed_loop_warmup_s(recs, 1) == 0.0
