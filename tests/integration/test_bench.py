import asyncio
import contextlib
import itertools
import json
import sys
from functools import partial
from pathlib import Path

from orchestrator.loadgen.bench import BenchConfig, BenchRun, LoadPoint, run_bench, save_records
from orchestrator.loadgen.client import ClientConfig
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.workloads import random_workload, trace_workload

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from streaming_server import ServerConfig, start_server


class Recorder:
    def __init__(self) -> None:
        self.begun: list[tuple[str, int | None]] = []
        self.n = 0

    def begin(self, label: str, total: int | None) -> None:
        self.begun.append((label, total))

    def append(self, rec: RequestRecord, /) -> None:
        self.n += 1


def test_rates_and_concurrency_points(tmp_path: Path) -> None:
    async def main() -> BenchRun:
        runner, url = await start_server(ServerConfig(ttft_ms=15, itl_ms=3))
        try:
            cfg = BenchConfig((ClientConfig(url, "m"),), arrival="constant", num_requests=12,
                              slo={"ttft_p99_ms": 500.0})
            wl = partial(random_workload, input_len=16, output_len=5, seed=1)
            points = [LoadPoint(rate=40.0), LoadPoint(rate=80.0), LoadPoint(concurrency=3)]
            return await run_bench(BenchRun(cfg), wl, points, progress=prog)
        finally:
            await runner.cleanup()

    prog = Recorder()
    run = asyncio.run(main())
    assert [p.point.label for p in run.points] == ["rate=40/s", "rate=80/s", "concurrency=3"]
    assert prog.begun == [("rate=40/s", 12), ("rate=80/s", 12), ("concurrency=3", 12)] and prog.n == 36
    for p in run.points:
        m = p.metrics
        assert m.n_completed == 12 and m.n_failed == 0 and p.passed
        assert m.total_output_tokens == 60
        assert m.ttft_ms.p50 is not None and 15 <= m.ttft_ms.p50 <= 30
        assert m.goodput is not None and m.goodput > 0
    r40, r80 = run.points[0].metrics.achieved_rate, run.points[1].metrics.achieved_rate
    assert r40 is not None and r80 is not None and 34 <= r40 <= 46 and 68 <= r80 <= 92
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

    async def main() -> BenchRun:
        runner, url = await start_server(ServerConfig(ttft_ms=5, itl_ms=1))
        try:
            cfg = BenchConfig((ClientConfig(url, "m"),), duration_s=10.0)
            return await run_bench(BenchRun(cfg), lambda n: trace_workload(f), [LoadPoint(trace=True)])
        finally:
            await runner.cleanup()

    run = asyncio.run(main())
    (p,) = run.points
    assert p.metrics.n_completed == 6 and p.verdict is None
    sched = sorted(r.scheduled_s for r in p.records)
    gaps = [b - a for a, b in itertools.pairwise(sched)]
    assert all(abs(g - 0.1) < 1e-6 for g in gaps)
    assert sorted(r.n_output_tokens for r in p.records) == [2, 2, 3, 3, 4, 4]


def test_search_against_a_server_with_capacity() -> None:
    # 2 slots, each request ~20 ms TTFT + 2 x 15 ms: capacity about 2 / 0.05 s = 40 req/s. Below
    # capacity TTFT stays near 20 ms; above it the queue grows for the whole point (1 s) and TTFT
    # passes 150 ms by about 50 req/s. p90 and a wide bound keep a shared machine's stalls out of it.
    async def main() -> BenchRun:
        runner, url = await start_server(ServerConfig(ttft_ms=20, itl_ms=15, slots=2))
        try:
            cfg = BenchConfig((ClientConfig(url, "m"),), arrival="constant", duration_s=1.0,
                              slo={"ttft_p90_ms": 150.0})
            wl = partial(random_workload, input_len=8, output_len=3, seed=0)
            return await run_bench(BenchRun(cfg), wl, search=True, start_rate=10.0, rel_tol=0.15, max_runs=10)
        finally:
            await runner.cleanup()

    run = asyncio.run(main())
    assert run.best_rate is not None and 15.0 <= run.best_rate <= 70.0, [
        (p.point.rate, p.verdict) for p in run.points
    ]
    rates = [p.point.rate for p in run.points]
    assert rates[:2] == [10.0, 20.0]
    assert any(p.passed is False for p in run.points)  # the bracket found a failing rate
    top = max((p for p in run.points if p.passed), key=lambda p: p.point.rate or 0)
    assert top.point.rate == run.best_rate
    assert run.to_dict()["search"]["best_rate"] == run.best_rate


def test_interrupted_point_keeps_what_was_measured() -> None:
    async def main() -> BenchRun:
        runner, url = await start_server(ServerConfig(ttft_ms=5, itl_ms=1))
        try:
            cfg = BenchConfig((ClientConfig(url, "m"),), arrival="constant", duration_s=30.0)
            run = BenchRun(cfg)
            wl = partial(random_workload, input_len=4, output_len=2, seed=0)
            task = asyncio.create_task(run_bench(run, wl, [LoadPoint(rate=50.0)]))
            await asyncio.sleep(0.5)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return run
        finally:
            await runner.cleanup()

    run = asyncio.run(main())
    assert run.points == []  # the point never finished
    part = run.partial()
    assert part is not None and part.interrupted and part.point.label == "rate=50/s"
    # ~25 sent in 0.5 s at 50/s, each done ~7 ms later: about 20-25 kept, all complete
    assert 10 <= part.metrics.n_completed <= 30 and part.metrics.n_failed == 0
