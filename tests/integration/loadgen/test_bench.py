"""run_bench against the test streaming server, which runs in its own thread (serve_in_thread).

Only what a busy machine cannot change is asserted: counts, token totals, scheduled times, the
search's own logic, and latencies from below (the server sleeps before each token).
"""

import asyncio
import contextlib
import itertools
import json
import time
from functools import partial
from pathlib import Path

import pytest

from orchestrator.loadgen.bench import BenchConfig, BenchRun, LoadPoint, run_bench, save_records
from orchestrator.loadgen.client import ClientConfig
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.workloads import random_workload, trace_workload
from tests.support.streaming_server import ServerConfig, serve_in_thread


class Recorder:
    def __init__(self) -> None:
        self.begun: list[tuple[str, int | None]] = []
        self.n = 0

    def begin(self, label: str, total: int | None) -> None:
        self.begun.append((label, total))

    def append(self, rec: RequestRecord, /) -> None:
        self.n += 1


def test_rates_and_concurrency_points(tmp_path: Path) -> None:
    prog = Recorder()
    with serve_in_thread(ServerConfig(ttft_ms=15, itl_ms=3)) as url:
        cfg = BenchConfig((ClientConfig(url, "m"),), arrival="constant", num_requests=12,
                          slo={"ttft_p99_ms": 60_000.0})
        wl = partial(random_workload, input_len=16, output_len=5, seed=1)
        points = [LoadPoint(rate=40.0), LoadPoint(rate=80.0), LoadPoint(concurrency=3)]
        run = asyncio.run(run_bench(BenchRun(cfg), wl, points, progress=prog))
    assert [p.point.label for p in run.points] == ["rate=40/s", "rate=80/s", "concurrency=3"]
    assert prog.begun == [("rate=40/s", 12), ("rate=80/s", 12), ("concurrency=3", 12)] and prog.n == 36
    for p in run.points:
        m = p.metrics
        assert m.n_requests == 12 and len(p.records) == 12 and all(r.ok for r in p.records)
        assert m.n_failed == 0 and p.passed
        if p.point.concurrency:  # measured past its clients' first wave (a closed loop's default warm-up)
            assert 0 < m.n_completed == m.n_in_window < 12
        else:
            assert m.n_completed == 12
        assert m.total_output_tokens == 5 * m.n_completed
        assert m.ttft_ms.p50 is not None and m.ttft_ms.p50 >= 15
        assert m.goodput is not None and m.goodput > 0
    for p, gap in zip(run.points[:2], (1 / 40, 1 / 80), strict=True):  # constant arrivals, as scheduled
        sched = sorted(r.scheduled_s for r in p.records)
        assert all(b - a == pytest.approx(gap, abs=1e-6) for a, b in itertools.pairwise(sched))
    out = tmp_path / "recs.jsonl"
    assert save_records(out, run.points) == 36
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["point"] == "rate=40/s" and lines[-1]["point"] == "concurrency=3"
    assert all(x["error"] is None and len(x["chunk_times_s"]) == 5 for x in lines)
    d = run.to_dict()
    assert d["points"][0]["metrics"]["n_completed"] == 12
    assert d["config"]["targets"] == [run.config.targets[0].url]


def test_trace_point_uses_trace_arrivals(tmp_path: Path) -> None:
    f = tmp_path / "t.jsonl"
    rows = [{"arrival_s": 0.1 * i, "input_tokens": 4, "output_tokens": 2 + i % 3} for i in range(6)]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))

    with serve_in_thread(ServerConfig(ttft_ms=5, itl_ms=1)) as url:
        cfg = BenchConfig((ClientConfig(url, "m"),), duration_s=10.0)
        run = asyncio.run(run_bench(BenchRun(cfg), lambda n: trace_workload(f), [LoadPoint(trace=True)]))
    (p,) = run.points
    assert p.metrics.n_completed == 6 and p.verdict is None
    sched = sorted(r.scheduled_s for r in p.records)
    gaps = [b - a for a, b in itertools.pairwise(sched)]
    assert all(abs(g - 0.1) < 1e-6 for g in gaps)
    assert sorted(r.n_output_tokens for r in p.records) == [2, 2, 3, 3, 4, 4]


def test_search_against_a_server_with_capacity() -> None:
    # 2 slots, each held >= 20 ms TTFT + 2 x 15 ms: at most 2 / 0.05 s = 40 req/s, however fast the
    # machine. Offered R req/s for 1 s, the request sent at t waits >= (R t - 40 t - 2) / 40 s for a
    # slot, so a p90 TTFT within 150 ms needs R < 50: no faster rate can pass, and 80 (reached by
    # doubling from 10) cannot. Which slower rates pass depends on the machine, so is not asserted.
    with serve_in_thread(ServerConfig(ttft_ms=20, itl_ms=15, slots=2)) as url:
        cfg = BenchConfig((ClientConfig(url, "m"),), arrival="constant", duration_s=1.0,
                          slo={"ttft_p90_ms": 150.0})
        wl = partial(random_workload, input_len=8, output_len=3, seed=0)
        run = asyncio.run(run_bench(BenchRun(cfg), wl, search=True, start_rate=10.0, rel_tol=0.15,
                                    max_runs=10))
    trail = [(p.point.rate, p.verdict) for p in run.points]
    assert all((p.point.rate or 0) < 50 or p.passed is False for p in run.points), trail
    assert any(p.passed is False for p in run.points), trail  # the bracket found a failing rate
    for p in run.points:  # each verdict is the SLO's, over that point's own records
        ttft = p.metrics.ttft_ms.stat("p90")
        ok = p.metrics.n_completed > 0 and p.metrics.error_rate <= 0.01 and ttft is not None and ttft <= 150
        assert p.passed is ok, (p.point.rate, p.verdict, ttft)
    first = run.points[0]
    assert first.point.rate == 10.0 and run.points[1].point.rate == (20.0 if first.passed else 5.0)
    passing = [p.point.rate for p in run.points if p.passed]
    assert run.best_rate == (max(passing) if passing else None)  # type: ignore[type-var]
    assert run.to_dict()["search"]["best_rate"] == run.best_rate


def test_interrupted_point_keeps_what_was_measured() -> None:
    prog = Recorder()

    async def main() -> tuple[BenchRun, float]:
        cfg = BenchConfig((ClientConfig(url, "m"),), arrival="constant", duration_s=30.0)
        run = BenchRun(cfg)
        wl = partial(random_workload, input_len=4, output_len=2, seed=0)
        task = asyncio.create_task(run_bench(run, wl, [LoadPoint(rate=50.0)], progress=prog))
        for _ in range(60_000):  # until a few requests are done (at most 60 s)
            if prog.n >= 3:
                break
            await asyncio.sleep(0.001)
        cancelled_at = time.perf_counter()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return run, cancelled_at

    with serve_in_thread(ServerConfig(ttft_ms=5, itl_ms=1)) as url:
        run, cancelled_at = asyncio.run(main())
    assert run.points == []  # the point never finished
    part = run.partial()
    assert part is not None and part.interrupted and part.point.label == "rate=50/s"
    # every request that ended before the cancel is kept, complete; none was scheduled after it
    assert part.metrics.n_completed >= 3 and part.metrics.n_failed == 0
    assert all(r.ok and r.scheduled_s <= cancelled_at for r in part.records)
