"""The streaming client against the test server (in its own thread) and against hostile servers.

Assertions are about what cannot depend on how busy the machine is: token and chunk counts, error
kinds, lower bounds the server's own sleeps impose (a client cannot see a token before the server
wrote it), and arithmetic over the same records. How close the timings are to the truth is a
benchmark (bench/timing_accuracy.py), not a test.
"""

import asyncio

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
from tests.support.hostile_server import RawServer, forever
from tests.support.streaming_server import serve_in_thread


async def _one(cfg: ClientConfig, max_tokens: int = 8, **extra: object) -> RequestRecord:
    async with Http1Client() as s:
        return await send_request(s, cfg, RequestSpec("r", "hi", max_tokens, extra_body=dict(extra)))


def test_timing_and_usage_completions() -> None:
    specs = [RequestSpec(str(i), "hi", 16, extra_body={"ttft_ms": 50, "itl_ms": 10}) for i in range(5)]
    offsets = arrival_offsets(5, 20.0, "constant")
    with serve_in_thread() as url:
        recs = asyncio.run(run_open_loop(ClientConfig(url, "m"), specs, offsets))
    assert all(r.ok for r in recs), [r.error for r in recs]
    assert all(r.output_tokens == 16 and r.output_tokens_source == "usage" for r in recs)
    assert all(r.prompt_tokens == 7 and len(r.chunk_times_s) == 16 for r in recs)
    for r in recs:
        ttft, e2e = r.ttft_s, r.e2e_s
        assert ttft is not None and e2e is not None
        assert ttft >= 0.050 and e2e >= 0.050 + 15 * 0.010  # the server's sleeps: never earlier
        assert r.scheduling_lag_s >= 0  # never sent before its time
    # Scheduled times are the schedule, exactly; the first send is the clock's zero.
    start = recs[0].scheduled_s
    assert [r.scheduled_s - start for r in recs] == pytest.approx(offsets, abs=1e-9)
    m = compute_metrics(recs)
    assert m.total_output_tokens == 80 and m.n_failed == 0 and m.n_completed == 5
    assert m.ttft_ms.p50 is not None and m.ttft_ms.p50 >= 50.0
    assert m.sched_lag_ms is not None and m.sched_lag_ms.p99 is not None and m.sched_lag_ms.p99 >= 0


def test_multi_token_chunks_chat() -> None:
    extra = {"tokens_per_chunk": 4, "itl_ms": 20, "ttft_ms": 30}
    with serve_in_thread() as url:
        r = asyncio.run(_one(ClientConfig(url, "m", endpoint="chat"), 10, **extra))
    assert r.ok and r.output_tokens == 10
    assert r.chunk_tokens == (4, 4, 2)
    gaps = r.itl_chunk_s
    assert len(gaps) == 2 and all(g >= 0 for g in gaps)
    # per token: each chunk's gap spread over the tokens it carries, from the same timestamps
    assert r.itl_token_s == pytest.approx([gaps[0] / 4] * 4 + [gaps[1] / 2] * 2)
    assert r.e2e_s is not None and r.e2e_s >= 0.030 + 2 * 0.020


def test_faults_counted_by_kind() -> None:
    faults = ["http_500", "drop", "truncated", "malformed", "error_event", None]
    specs = [RequestSpec(str(i), "hi", 6, extra_body={"fault": f, "ttft_ms": 5, "itl_ms": 2})
             for i, f in enumerate(faults)]
    with serve_in_thread() as url:
        cfg = ClientConfig(url, "m")
        recs = asyncio.run(run_open_loop(cfg, specs, [0.0] * len(specs), max_concurrency=2))
        hang = asyncio.run(_one(ClientConfig(url, "m", timeout_s=0.3), fault="hang"))
    dead = asyncio.run(_one(ClientConfig("http://127.0.0.1:9", "m", timeout_s=2)))  # nothing listens
    kinds = [r.error for r in recs]
    assert kinds == ["http_500", "connection", "truncated", "malformed", "http_400", None]
    assert hang.error == "timeout" and dead.error == "connection"
    m = compute_metrics(recs)
    assert m.failures == {"connection": 1, "http_400": 1, "http_500": 1, "malformed": 1, "truncated": 1}
    assert m.n_completed == 1


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
EVENT = b'data: {"choices": [{"text": " tok"}]}\n\n'
CHUNK = f"{len(EVENT):x}\r\n".encode() + EVENT + b"\r\n"


@pytest.mark.parametrize(
    ("pieces", "error"),
    [
        ([SSE_HEAD, CHUNK, b"-6\r\nab\r\n"], "protocol"),
        ([SSE_HEAD, CHUNK, b"1", forever(b"0" * 1024)], "protocol"),
        ([b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"], "protocol"),
        ([b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n"], "protocol"),
        ([SSE_HEAD, forever(CHUNK)], "too_large"),
        ([b"HTTP/1.0 200 OK\r\n\r\n", forever(EVENT * 100)], "too_large"),
    ],
    ids=["negative-chunk-size", "endless-chunk-size-line", "negative-length", "non-numeric-length",
         "endless-stream", "endless-close-delimited"],
)
def test_hostile_servers_give_classified_records(pieces: list[object], error: str) -> None:
    cfg_kw = {"timeout_s": 30.0, "max_response_bytes": 256 * 1024}
    with RawServer(lambda _: (pieces, False)) as srv:  # type: ignore[arg-type]
        rec = asyncio.run(_one(ClientConfig(srv.base_url, "m", **cfg_kw)))  # type: ignore[arg-type]
    assert rec.error == error
    assert rec.done_s is not None and rec.done_s >= rec.sent_s


def test_arrivals_seeded() -> None:
    a = arrival_offsets(1000, 100.0, "poisson", seed=1)
    assert a == arrival_offsets(1000, 100.0, "poisson", seed=1)
    assert a[0] == 0.0 and 8.0 < a[-1] < 12.0
    g = arrival_offsets(1000, 100.0, "gamma", burstiness=0.5, seed=2)
    assert 7.0 < g[-1] < 13.0
    assert arrival_offsets(3, 10.0, "constant") == pytest.approx([0.0, 0.1, 0.2])


def test_closed_loop_and_sink() -> None:
    specs = [RequestSpec(str(i), "hi", 4, extra_body={"ttft_ms": 20, "itl_ms": 5}) for i in range(8)]
    sink: list[RequestRecord] = []
    with serve_in_thread() as url:
        recs = asyncio.run(run_closed_loop(ClientConfig(url, "m"), specs, concurrency=2, sink=sink))
    assert [r.request_id for r in recs] == [str(i) for i in range(8)]
    assert all(r.ok for r in recs) and len(sink) == 8
    # Never more than 2 in flight: at every send, at most one other request is still open.
    for r in recs:
        assert r.done_s is not None
        others = [o for o in recs if o is not r and o.sent_s <= r.sent_s < (o.done_s or 0)]
        assert len(others) <= 1, r.request_id
    # 8 requests of >= 35 ms each (TTFT 20 + 3 gaps of 5), two at a time: the run spans >= 4 x 35 ms
    span = max(r.done_s or 0 for r in recs) - min(r.sent_s for r in recs)
    assert span >= 4 * 0.035
    m = compute_metrics(recs)
    assert m.ttft_ms.p50 is not None and m.ttft_ms.p50 >= 20.0
