"""Engine /metrics scraping: vLLM and SGLang names, a poller against a real loopback server, the store's
new table (also in a store made before it existed), and the per-point summary."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from orchestrator.loadgen.engine_metrics import (
    EngineSample,
    parse_prometheus,
    series_to_dict,
    summarize_series,
    with_engine_metrics,
)
from orchestrator.store.db import Store

VLLM_PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 4.0
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
vllm:num_preemptions_total{engine="0",model_name="m"} 5.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 200.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 50.0
vllm:generation_tokens_total{model_name="m"} 1234.0
"""

SGLANG_PAGE = """# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m with space",engine_type="unified"} 7.0
sglang:num_queue_reqs{model_name="m with space",engine_type="unified"} 1.0
sglang:token_usage{model_name="m with space",engine_type="unified"} 0.5
sglang:cache_hit_rate{model_name="m with space",engine_type="unified"} 0.125
sglang:num_retracted_requests_total{model_name="m with space",engine_type="unified"} 3.0
sglang:num_retracted_reqs{model_name="m with space",engine_type="unified",pid="1"} 9.0
"""


def test_vllm_names_sum_counts_and_keep_the_fullest_cache() -> None:
    f = parse_prometheus(VLLM_PAGE)
    assert f == {
        "running": 7.0, "waiting": 2.0, "kv_usage": 0.75, "preemptions": 5.0, "prefix_hit_rate": 0.25,
        "prefix_hits": 50.0, "prefix_queries": 200.0,
    }


def test_older_vllm_and_sglang_names() -> None:
    assert parse_prometheus("vllm:gpu_cache_usage_perc 0.4\nvllm:num_requests_running 2\n") == {
        "kv_usage": 0.4,
        "running": 2.0,
    }
    assert parse_prometheus(SGLANG_PAGE) == {
        "running": 7.0, "waiting": 1.0, "kv_usage": 0.5, "prefix_hit_rate": 0.125, "preemptions": 3.0,
    }  # the retraction counter, not the gauge of the last batch
    assert parse_prometheus("garbage line\nfoo 1\nvllm:num_requests_running NaN\n") == {}


def test_summary_sums_endpoints_per_scrape_and_counts_preemptions_during_the_point() -> None:
    samples = [
        EngineSample(0.0, 0, running=2, waiting=0, kv_usage=0.1, preemptions=10),
        EngineSample(0.01, 1, running=3, waiting=1, kv_usage=0.2, preemptions=0),
        EngineSample(0.5, 0, running=4, waiting=2, kv_usage=0.9, preemptions=12),
        EngineSample(0.51, 1, running=5, waiting=3, kv_usage=0.3, preemptions=1),
    ]
    s = summarize_series(series_to_dict(samples, 0.25, time_scale=0.5))  # stored in simulated seconds
    assert s["samples"] == 4 and s["kv_usage_peak"] == 0.9
    assert s["running_mean"] == (5 + 9) / 2 and s["waiting_peak"] == 5
    assert s["preemptions"] == 3  # 2 on endpoint 0, 1 on endpoint 1; not the counters' totals
    assert summarize_series({})["kv_usage_peak"] is None


async def _metrics_server(
    pages: list[str], chunked: bool, keep_open: bool = False
) -> tuple[asyncio.Server, int, list[int]]:
    hits = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = pages[min(hits[0], len(pages) - 1)].encode()
        hits[0] += 1
        if chunked:
            half = len(body) // 2
            framed = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (body[:half], body[half:]))
            head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n"
            writer.write(head + framed + b"0\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        if keep_open:  # ignores Connection: close; the body's framing must end the scrape
            await asyncio.sleep(3)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], hits


@pytest.mark.parametrize("keep_open", [False, True])
@pytest.mark.parametrize("chunked", [False, True])
def test_poller_scrapes_a_real_server_while_the_work_runs(chunked: bool, keep_open: bool) -> None:
    pages = [f"vllm:num_requests_running {k}\nvllm:kv_cache_usage_perc 0.{k}\n" for k in range(1, 9)]

    async def main() -> tuple[str, list[EngineSample], int]:
        server, port, hits = await _metrics_server(pages, chunked, keep_open)
        async with server:
            # the second URL has nothing listening: its scrapes fail and are skipped, not invented
            dead = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
            dead_port = dead.sockets[0].getsockname()[1]
            dead.close()
            await dead.wait_closed()

            async def work() -> str:
                while hits[0] < 3:  # a property, not a duration: at least three scrapes happened
                    await asyncio.sleep(0.01)
                return "done"

            result, poller = await asyncio.wait_for(
                with_engine_metrics(
                    work(), [f"http://127.0.0.1:{port}/v1", f"http://127.0.0.1:{dead_port}"], 0.02
                ),
                timeout=60,
            )
        return result, poller.samples, poller.failed_scrapes

    result, samples, failed = asyncio.run(main())
    assert result == "done" and len(samples) >= 3 and failed >= 1
    assert all(s.endpoint == 0 for s in samples)
    assert [s.running for s in samples[:3]] == [1.0, 2.0, 3.0]
    assert samples[0].kv_usage == pytest.approx(0.1)
    assert [s.t_s for s in samples] == sorted(s.t_s for s in samples)


def test_store_keeps_series_per_point_and_opens_stores_from_before_the_table(tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    conn = sqlite3.connect(old)  # a store as the previous orch wrote it: no engine_metrics table
    conn.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema_version', '1');"
    )
    conn.commit()
    conn.close()
    store = Store(old)
    assert store.engine_metrics("any") == {}
    series = series_to_dict([EngineSample(0.0, 0, running=1.0)], 0.5)
    store.add_engine_metrics("r1", "tp8", "rate=2/s", series)
    store.add_engine_metrics("r1", "tp8", "rate=2/s", series)  # a re-measured point replaces
    assert store.engine_metrics("r1") == {("tp8", "rate=2/s"): series}
