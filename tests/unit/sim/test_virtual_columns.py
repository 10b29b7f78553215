"""The simulator's columns (shared step gaps, no record per request) give exactly the metrics its
records give: preemptions, refusals, several engines, open and closed loops, with and without an SLO
on each request's own ITL."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.layout import parse_layout
from orchestrator.loadgen.metrics import Metrics, compute_metrics, metrics_of
from orchestrator.plan.checks import Cluster
from orchestrator.plan.inputs import PlanInputs, layout_cost
from orchestrator.sim.engine import EngineConfig, EngineCore
from orchestrator.sim.loops import closed_loop, closed_loop_columns, simulate, simulate_columns
from orchestrator.sim.virtual import SimRequest
from tests.support.engines import LIMITS, fixed_settings

INPUTS = PlanInputs(cfg=load_model("qwen2.5-72b"), gpu=load_gpu("h100-sxm"), cluster=Cluster(1, 8),
                    settings=fixed_settings(8192))
SLO = {"ttft_p99_ms": 400.0, "itl_p99_ms": 30.0, "itl_token_p50_ms": 25.0, "tpot_p90_ms": 28.0}


def _engines(n: int, kv: int) -> list[EngineCore]:
    cost = layout_cost(INPUTS, parse_layout("tp8"))
    limits = LIMITS | {"max_num_seqs": 16}
    return [EngineCore(cost, EngineConfig(kv_capacity_tokens=kv, **limits)) for _ in range(n)]


def _requests(n: int, rate: float, seed: int) -> list[SimRequest]:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, n))
    ins = rng.integers(50, 3000, n)
    outs = rng.integers(1, 300, n)
    reqs = [SimRequest(str(i), float(t[i]), int(ins[i]), int(outs[i])) for i in range(n)]
    reqs.append(SimRequest("too-long", 0.5, 9000, 10))  # refused: longer than the cache holds
    return reqs


def _same(a: Metrics, b: Metrics) -> None:
    da, db = a.to_dict(), b.to_dict()
    for dist in ("itl_chunk_ms", "itl_token_ms"):  # weighted means are summed in another order
        ma, mb = da[dist].pop("mean"), db[dist].pop("mean")
        assert (ma is None and mb is None) or ma == pytest.approx(mb, rel=1e-12), dist
    assert da == db


@pytest.mark.parametrize(("engines", "kv", "rate"), [(1, 500_000, 4.0), (1, 6_000, 6.0), (3, 20_000, 12.0)])
def test_open_loop_columns_give_the_records_metrics(engines: int, kv: int, rate: float) -> None:
    reqs = _requests(150, rate, seed=engines)
    recs, summary = simulate(_engines(engines, kv), reqs, max_concurrency=40)
    cols, summary2 = simulate_columns(_engines(engines, kv), reqs, max_concurrency=40)
    assert summary == summary2
    if kv < 10_000:
        assert summary.preemptions > 0  # the gap across a preemption is covered
    for slo in ({}, SLO):
        _same(metrics_of(cols, warmup_s=1.0, gpus=8, slo=slo),
              compute_metrics(recs, warmup_s=1.0, gpus=8, slo=slo))


def test_closed_loop_columns_give_the_records_metrics() -> None:
    reqs = _requests(60, 1.0, seed=7)
    recs, _ = closed_loop(_engines(2, 12_000), reqs, 8, duration_s=30.0)
    cols, _ = closed_loop_columns(_engines(2, 12_000), reqs, 8, duration_s=30.0)
    _same(metrics_of(cols, slo=SLO), compute_metrics(recs, slo=SLO))


def test_simulate_point_without_records_has_the_same_metrics() -> None:
    from orchestrator.plan.from_spec import plan_inputs
    from orchestrator.sim.run import simulate_point
    from orchestrator.spec import parse_spec

    spec = parse_spec("model: {name: qwen2.5-7b}\nhardware: {gpu: h100-sxm}\nlayouts: [tp1]\n"
                      "workload: {rates_per_s: [20], num_requests: 300, warmup_s: 1, "
                      "input_tokens: {kind: uniform, mean: 600, min: 100, max: 1100}, output_tokens: 64}\n"
                      "slo: {ttft_p99_ms: 500, itl_p99_ms: 40}\n")
    inputs = plan_inputs(spec)
    for kw in ({"rate": 20.0}, {"concurrency": 16, "num_requests": 100}):
        with_records = simulate_point(spec, inputs, parse_layout("tp1"), **kw)  # type: ignore[arg-type]
        without = simulate_point(spec, inputs, parse_layout("tp1"), keep_records=False, **kw)  # type: ignore[arg-type]
        assert without.result.records == () and len(with_records.result.records) > 0
        _same(without.result.metrics, with_records.result.metrics)
        assert without.result.verdict == with_records.result.verdict
