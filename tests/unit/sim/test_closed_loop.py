"""Closed loop and the concurrency cap in virtual time: `closed_loop`, `simulate(max_concurrency=)`,
`orch simulate --concurrency`, and `workload.max_concurrency` in the prediction stored by a sweep."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.layout import parse_layout
from orchestrator.loadgen.records import RequestRecord
from orchestrator.pipeline.predict import predicted_metrics
from orchestrator.plan.checks import Cluster
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.plan.inputs import PlanInputs, layout_cost
from orchestrator.sim.engine import EngineConfig, EngineCore
from orchestrator.sim.loops import closed_loop, simulate
from orchestrator.sim.run import simulate_point
from orchestrator.sim.virtual import SimRequest
from orchestrator.spec.load import load_spec
from tests.support.cli import Orch
from tests.support.engines import LIMITS, fixed_settings
from tests.support.paths import ROOT

INPUTS = PlanInputs(cfg=load_model("qwen2.5-72b"), gpu=load_gpu("h100-sxm"), cluster=Cluster(1, 8),
                    settings=fixed_settings(8192))


def _engines(k: int = 1) -> list[EngineCore]:
    cost = layout_cost(INPUTS, parse_layout("tp8"))
    return [EngineCore(cost, EngineConfig(kv_capacity_tokens=500_000, **LIMITS)) for _ in range(k)]


def _max_in_flight(recs: list[RequestRecord]) -> int:
    events = sorted([(r.sent_s, 1) for r in recs] + [(r.done_s or r.sent_s, -1) for r in recs],
                    key=lambda e: (e[0], e[1]))  # an end before a send at the same instant
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    return peak


def _reqs(n: int, gap_s: float = 0.0) -> list[SimRequest]:
    return [SimRequest(str(i), i * gap_s, 300 + 37 * (i % 7), 20 + 11 * (i % 5)) for i in range(n)]


def test_closed_loop_keeps_n_in_flight_and_sends_as_one_ends() -> None:
    recs, summary = closed_loop(_engines(2), _reqs(60), 8)
    assert len(recs) == 60 and all(r.ok for r in recs)
    assert _max_in_flight(recs) == 8
    done = {r.done_s for r in recs}
    later = sorted(recs, key=lambda r: r.sent_s)[8:]
    assert all(r.sent_s in done for r in later)  # each later send is some request's end
    assert all(r.sent_s == 0.0 for r in sorted(recs, key=lambda r: r.sent_s)[:8])
    assert all(r.scheduled_s == r.sent_s and r.queued_s == 0 for r in recs)  # as the real client
    assert summary.rejected == 0


def test_closed_loop_with_a_duration_cycles_requests_and_stops_sending() -> None:
    recs, _ = closed_loop(_engines(), _reqs(10), 4, duration_s=3.0)
    assert len(recs) > 10  # the 10 requests were sent again
    assert any(r.request_id.endswith("#1") for r in recs)
    assert max(r.sent_s for r in recs) < 3.0
    assert len({r.request_id for r in recs}) == len(recs)


def test_concurrency_cap_queues_open_loop_arrivals() -> None:
    reqs = _reqs(80, gap_s=0.005)  # 200 req/s: far more than 4 in flight without a cap
    free, _ = simulate(_engines(), reqs)
    capped, _ = simulate(_engines(), reqs, max_concurrency=4)
    assert _max_in_flight(free) > 4 and _max_in_flight(capped) == 4
    assert all(r.scheduled_s == q.arrival_s for r, q in zip(capped, reqs, strict=True))
    assert max(r.queued_s for r in capped) > 0
    assert all(r.queued_s == pytest.approx(r.sent_s - r.scheduled_s) for r in capped)
    assert [r.request_id for r in capped] == [r.request_id for r in reqs]


def test_a_cap_above_the_load_changes_nothing() -> None:
    reqs = _reqs(30, gap_s=2.0)
    a, _ = simulate(_engines(), reqs)
    b, _ = simulate(_engines(), reqs, max_concurrency=1000)
    assert [r.chunk_times_s for r in a] == [r.chunk_times_s for r in b]


def _spec(tmp_path: Path, extra: str = "") -> Path:
    text = (ROOT / "layouts" / "qwen72b.yaml").read_text().replace("  seed: 0\n", "  seed: 0\n" + extra)
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def test_workload_max_concurrency_reaches_the_simulated_point_and_the_stored_prediction(
        tmp_path: Path) -> None:
    plain = load_spec(str(_spec(tmp_path)))
    capped = load_spec(str(_spec(tmp_path, "  max_concurrency: 2\n")))
    assert capped.workload.max_concurrency == 2
    inputs = plan_inputs(capped)
    layout = parse_layout("tp8")
    free = simulate_point(plain, inputs, layout, 8.0, num_requests=60)
    cap = simulate_point(capped, inputs, layout, 8.0, num_requests=60)
    assert _max_in_flight(list(cap.result.records)) <= 2 < _max_in_flight(list(free.result.records))
    predicted = predicted_metrics(capped, inputs, layout, 8.0, 60)
    assert predicted["max_concurrency"] == 2
    assert predicted["tpot_p50_ms"] == pytest.approx(cap.result.metrics.tpot_ms.p50)
    assert predicted["tpot_p50_ms"] != pytest.approx(free.result.metrics.tpot_ms.p50)


def test_cli_simulate_concurrency_levels(orch: Orch) -> None:
    proc = orch("simulate", "layouts/qwen72b.yaml", "--layouts", "tp8", "--concurrency", "2,16",
                 "--num-requests", "40", "--json", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    points = json.loads(proc.stdout)["points"]
    assert [p["label"] for p in points] == ["concurrency=2", "concurrency=16"]
    assert [p["concurrency"] for p in points] == [2, 16]
    tput = [p["metrics"]["output_throughput"] for p in points]
    assert tput[1] > tput[0]  # more clients in flight: a larger decode batch
    bad = orch("simulate", "layouts/qwen72b.yaml", "--concurrency", "4", "--rates", "2", cwd=ROOT)
    assert bad.returncode == 2 and "not both" in bad.stderr


def test_virtual_runs_sample_the_engine_gauges_like_a_scrape() -> None:
    from orchestrator.loadgen.engine_metrics import series_to_dict, summarize_series

    engines = _engines(2)
    recs, summary = simulate(engines, _reqs(200, gap_s=0.01), sample_interval_s=0.05)
    samples = summary.engine_samples
    assert samples, "no samples"
    assert {s.endpoint for s in samples} == {0, 1}
    times = sorted({s.t_s for s in samples})
    assert times[0] == 0.0 and all(abs(b - a - 0.05) < 1e-9 for a, b in itertools.pairwise(times))
    assert times[-1] <= summary.virtual_s
    assert max(s.running or 0 for s in samples) >= 1  # requests were in flight at some sample
    assert all(0.0 <= (s.kv_usage or 0.0) <= 1.0 for s in samples)
    for k in (0, 1):
        counters = [s.preemptions for s in samples if s.endpoint == k]
        assert counters == sorted(counters)  # a counter, never decreasing
    engine = summarize_series(series_to_dict(list(samples), 0.05))
    assert engine["samples"] >= len(times) and engine["kv_usage_peak"] is not None
    # Without an interval nothing is sampled, and the records are the same.
    recs2, summary2 = simulate(_engines(2), _reqs(200, gap_s=0.01))
    assert summary2.engine_samples == () and recs2 == recs
