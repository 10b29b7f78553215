"""The API server's serial per-request work (sim/front_end.py): a burst queues for it in arrival
order, one request alone pays it once, and the planner's unloaded TTFT charges it like the simulator."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.layout import parse_layout
from orchestrator.plan.checks import Cluster
from orchestrator.plan.planner import PlanInputs, layout_cost, plan_layout
from orchestrator.sim.build import replica_engines
from orchestrator.sim.front_end import FrontEnd
from orchestrator.sim.virtual import SimRequest, simulate
from tests.support.engines import fixed_settings

H100 = load_gpu("h100-sxm")
LLAMA8B = load_model("llama-3.1-8b")


def _inputs(parallel_s: float, serial_s: float) -> PlanInputs:
    gpu = replace(H100, request_overhead_s=parallel_s, serial_request_overhead_s=serial_s)
    return PlanInputs(cfg=LLAMA8B, gpu=gpu, cluster=Cluster(1, 8), settings=fixed_settings(8192))


def test_front_end_queues_a_burst_and_idles_between_sparse_requests() -> None:
    front = FrontEnd(parallel_s=0.002, serial_s=0.010)
    # Three sent at once: the k-th leaves the serial part at (k+1) x 10 ms, then 2 ms in parallel.
    assert [front.reach_s(0.0) for _ in range(3)] == pytest.approx([0.012, 0.022, 0.032])
    # One sent after the queue drained waits for nobody.
    assert front.reach_s(1.0) == pytest.approx(1.012)
    assert FrontEnd(parallel_s=0.002).reach_s(5.0) == pytest.approx(5.002)
    assert not FrontEnd().active


def test_a_burst_reaches_the_engine_one_serial_time_apart() -> None:
    """Ten 16-token prompts sent at t=0 with 50 ms of serial work each: request k cannot have its
    first token before (k+1) x 50 ms, and without the serial part all ten are done far sooner."""
    serial = 0.05
    (eng,) = replica_engines(_inputs(0.0, serial), parse_layout("tp1"))
    reqs = [SimRequest(str(k), 0.0, 16, 2) for k in range(10)]
    records, _ = simulate([eng], reqs)
    by_id = {r.request_id: r for r in records}
    for k in range(10):
        ttft = by_id[str(k)].ttft_s
        assert ttft is not None and ttft >= (k + 1) * serial
        assert ttft < (k + 1) * serial + 0.05  # a 16-token prefill on an H100 is well under 50 ms
    (eng0,) = replica_engines(_inputs(0.0, 0.0), parse_layout("tp1"))
    records0, _ = simulate([eng0], [SimRequest(str(k), 0.0, 16, 2) for k in range(10)])
    assert max(r.ttft_s or 0.0 for r in records0) < serial


def test_the_planners_ttft_charges_both_parts_once() -> None:
    inputs = _inputs(3e-3, 7e-3)
    row = plan_layout(inputs, parse_layout("tp1"), prompt_tokens=1000)
    prefill_s = layout_cost(inputs, parse_layout("tp1")).prefill(1000).total_s
    assert row.prefill_ms == pytest.approx((10e-3 + prefill_s) * 1e3)
    (eng,) = replica_engines(inputs, parse_layout("tp1"))
    (rec,), _ = simulate([eng], [SimRequest("a", 0.0, 1000, 1)])
    assert rec.ttft_s is not None and rec.ttft_s * 1e3 == pytest.approx(row.prefill_ms)


def test_each_replica_has_its_own_api_server() -> None:
    """Two replicas: a burst of four is served two at a time, not one at a time."""
    front = FrontEnd(serial_s=0.010, servers=2)
    assert [front.reach_s(0.0) for _ in range(4)] == pytest.approx([0.010, 0.010, 0.020, 0.020])
    inputs = _inputs(0.0, 0.05)
    (a,), (b,) = (replica_engines(inputs, parse_layout("tp1")) for _ in range(2))
    records, _ = simulate([a, b], [SimRequest(str(k), 0.0, 16, 2) for k in range(4)])
    ttfts = sorted(r.ttft_s or 0.0 for r in records)
    assert ttfts[1] < 0.1 <= ttfts[2]  # two reach the engines at 50 ms, two at 100 ms
