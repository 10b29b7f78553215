import asyncio
import statistics
import sys
import time
from pathlib import Path

import pytest

from orchestrator.loadgen.client import (
    ClientConfig,
    RequestSpec,
    arrival_offsets,
    run_closed_loop,
    run_open_loop,
    send_request,
)
from orchestrator.loadgen.http1 import Http1Client
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.loadgen.records import RequestRecord

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from streaming_server import start_server


async def _one(cfg: ClientConfig, **extra: object) -> object:
    async with Http1Client() as s:
        return await send_request(s, cfg, RequestSpec("r", "hi", 8, extra_body=dict(extra)))


def test_timing_and_usage_completions() -> None:
    async def main() -> None:
        runner, url = await start_server()
        try:
            cfg = ClientConfig(url, "m")
            specs = [
                RequestSpec(str(i), "hi", 16, extra_body={"ttft_ms": 50, "itl_ms": 10}) for i in range(5)
            ]
            recs = await run_open_loop(cfg, specs, arrival_offsets(5, 20.0, "constant"))
        finally:
            await runner.cleanup()
        assert all(r.ok for r in recs), [r.error for r in recs]
        m = compute_metrics(recs)
        assert m.ttft_ms.p50 is not None and 50.0 <= m.ttft_ms.p50 <= 65.0
        assert m.itl_chunk_ms.p50 is not None and 8.0 <= m.itl_chunk_ms.p50 <= 14.0
        assert m.tpot_ms.p50 is not None and 8.0 <= m.tpot_ms.p50 <= 14.0
        assert all(r.output_tokens == 16 and r.output_tokens_source == "usage" for r in recs)
        assert all(r.prompt_tokens == 7 for r in recs)
        assert m.total_output_tokens == 80 and m.n_failed == 0
        assert m.achieved_rate is not None and 15.0 < m.achieved_rate < 25.0
        assert m.sched_lag_ms is not None and m.sched_lag_ms.p99 is not None
        assert m.sched_lag_ms.p99 < 20.0

    asyncio.run(main())


def test_multi_token_chunks_chat() -> None:
    async def main() -> None:
        runner, url = await start_server()
        try:
            cfg = ClientConfig(url, "m", endpoint="chat")
            async with Http1Client() as s:
                r = await send_request(
                    s,
                    cfg,
                    RequestSpec(
                        "c", "hi", 10, extra_body={"tokens_per_chunk": 4, "itl_ms": 20, "ttft_ms": 30}
                    ),
                )
        finally:
            await runner.cleanup()
        assert r.ok and r.output_tokens == 10
        assert r.chunk_tokens == (4, 4, 2)
        gaps = r.itl_chunk_s
        assert len(gaps) == 2 and all(0.015 <= g <= 0.03 for g in gaps)
        per_tok = r.itl_token_s
        assert len(per_tok) == 6
        assert statistics.median(per_tok) == pytest.approx(0.005, abs=0.003)

    asyncio.run(main())


def test_faults_counted_by_kind() -> None:
    async def main() -> None:
        runner, url = await start_server()
        try:
            cfg = ClientConfig(url, "m")
            faults = ["http_500", "drop", "truncated", "malformed", "error_event", None]
            specs = [
                RequestSpec(str(i), "hi", 6, extra_body={"fault": f, "ttft_ms": 5, "itl_ms": 2})
                for i, f in enumerate(faults)
            ]
            recs = await run_open_loop(cfg, specs, [0.0] * len(specs), max_concurrency=2)
            cfg_t = ClientConfig(url, "m", timeout_s=0.3)
            hang = await _one(cfg_t, fault="hang")
            # nothing listening: connection error
            dead = await _one(ClientConfig("http://127.0.0.1:9", "m", timeout_s=2))
        finally:
            await runner.cleanup()
        kinds = [r.error for r in recs]
        assert kinds == ["http_500", "connection", "truncated", "malformed", "http_400", None]
        assert getattr(hang, "error", None) == "timeout"
        assert getattr(dead, "error", None) == "connection"
        m = compute_metrics(recs)
        assert m.failures == {"connection": 1, "http_400": 1, "http_500": 1, "malformed": 1, "truncated": 1}
        assert m.n_completed == 1

    asyncio.run(main())


def test_arrivals_seeded() -> None:
    a = arrival_offsets(1000, 100.0, "poisson", seed=1)
    assert a == arrival_offsets(1000, 100.0, "poisson", seed=1)
    assert a[0] == 0.0 and 8.0 < a[-1] < 12.0
    g = arrival_offsets(1000, 100.0, "gamma", burstiness=0.5, seed=2)
    assert 7.0 < g[-1] < 13.0
    assert arrival_offsets(3, 10.0, "constant") == pytest.approx([0.0, 0.1, 0.2])


def test_closed_loop_and_sink() -> None:
    async def main() -> None:
        runner, url = await start_server()
        try:
            cfg = ClientConfig(url, "m")
            specs = [RequestSpec(str(i), "hi", 4, extra_body={"ttft_ms": 20, "itl_ms": 5}) for i in range(8)]
            sink: list[RequestRecord] = []
            t0 = time.perf_counter()
            recs = await run_closed_loop(cfg, specs, concurrency=2, sink=sink)
            elapsed = time.perf_counter() - t0
        finally:
            await runner.cleanup()
        assert [r.request_id for r in recs] == [str(i) for i in range(8)]
        assert all(r.ok for r in recs) and len(sink) == 8
        # 4 rounds of ~35 ms each: clearly serialised by the cap of 2
        assert 0.12 <= elapsed <= 0.5
        m = compute_metrics(recs)
        assert m.ttft_ms.p50 is not None and 20.0 <= m.ttft_ms.p50 <= 30.0

    asyncio.run(main())
