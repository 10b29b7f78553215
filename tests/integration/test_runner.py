import asyncio
import sys
import time
from collections import Counter
from pathlib import Path

from orchestrator.loadgen.client import ClientConfig, RequestSpec, run_closed_loop, run_open_loop
from orchestrator.loadgen.metrics import compute_metrics

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from streaming_server import ServerConfig, start_server


def _specs(n: int, **extra: object) -> list[RequestSpec]:
    return [RequestSpec(str(i), "hi", 2, extra_body=dict(extra)) for i in range(n)]


def test_round_robin_over_two_replicas() -> None:
    async def main() -> None:
        (r1, u1), (r2, u2) = await start_server(), await start_server()
        try:
            cfgs = [ClientConfig(u1, "m"), ClientConfig(u2, "m")]
            recs = await run_open_loop(cfgs, _specs(10, ttft_ms=5, itl_ms=1), [0.01 * i for i in range(10)])
        finally:
            await r1.cleanup()
            await r2.cleanup()
        assert all(r.ok for r in recs)
        assert Counter(r.extra["endpoint"] for r in recs) == {u1: 5, u2: 5}

    asyncio.run(main())


def test_least_outstanding_avoids_the_slow_replica() -> None:
    # The slow replica answers after 1 s, longer than the whole schedule (12 sends 50 ms apart): its
    # requests pile up, so least-outstanding sends there only while the fast one is as busy.
    async def main() -> None:
        (r1, slow), (r2, fast) = await start_server(ServerConfig(ttft_ms=1000)), await start_server(
            ServerConfig(ttft_ms=5)
        )
        try:
            cfgs = [ClientConfig(slow, "m"), ClientConfig(fast, "m")]
            offs = [0.05 * i for i in range(12)]
            lo = await run_open_loop(cfgs, _specs(12, itl_ms=1), offs, balance="least_outstanding")
            rr = await run_open_loop(cfgs, _specs(12, itl_ms=1), offs, balance="round_robin")
        finally:
            await r1.cleanup()
            await r2.cleanup()
        lo_counts = Counter(r.extra["endpoint"] for r in lo)
        assert Counter(r.extra["endpoint"] for r in rr) == {slow: 6, fast: 6}
        assert lo_counts[slow] <= 3 and lo_counts[fast] >= 9, lo_counts
        assert all(r.ok for r in lo + rr)

    asyncio.run(main())


def test_concurrency_cap_queue_wait_kept_apart_from_lag() -> None:
    async def main() -> None:
        runner, url = await start_server()
        try:
            specs = _specs(8, ttft_ms=50, itl_ms=0, tokens=1)
            recs = await run_open_loop(ClientConfig(url, "m"), specs, [0.0] * 8, max_concurrency=2)
        finally:
            await runner.cleanup()
        assert all(r.ok for r in recs)
        waits = sorted(r.queued_s for r in recs)
        # two at a time, ~50 ms each: waits of about 0, 0, 50, 50, 100, 100, 150, 150 ms
        for k, w in enumerate(waits):
            assert 0.05 * (k // 2) - 0.005 <= w <= 0.05 * (k // 2) + 0.04, waits
        m = compute_metrics(recs)
        assert m.queue_wait_ms is not None and m.queue_wait_ms.max is not None and m.queue_wait_ms.max >= 145
        assert m.sched_lag_ms is not None and m.sched_lag_ms.max is not None and m.sched_lag_ms.max < 30
        # TTFT is measured from the send, after the queue
        assert m.ttft_ms.max is not None and m.ttft_ms.max < 90

    asyncio.run(main())


def test_closed_loop_duration_limit_reuses_specs() -> None:
    async def main() -> None:
        runner, url = await start_server()
        try:
            t0 = time.perf_counter()
            recs = await run_closed_loop(
                ClientConfig(url, "m"), _specs(3, ttft_ms=20, itl_ms=1), 2, duration_s=0.3
            )
        finally:
            await runner.cleanup()
        assert all(r.ok for r in recs)
        # ~21 ms each on 2 workers over 0.3 s: about 28 requests, more than the 3 specs
        assert 8 <= len(recs) <= 40
        assert len({r.request_id for r in recs}) == len(recs)
        assert max(r.sent_s for r in recs) < t0 + 0.3 + 0.05

    asyncio.run(main())
