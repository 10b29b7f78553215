"""The open and closed loops over replicas, with a concurrency cap and a duration limit.

The test servers run in their own threads (serve_in_thread); assertions are counts, exact schedules
and bounds that the servers' own sleeps impose, none that a busy machine could break.
"""

import asyncio
import itertools
from collections import Counter
from contextlib import ExitStack

from orchestrator.loadgen.client import ClientConfig, RequestSpec, run_closed_loop, run_open_loop
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.loadgen.records import RequestRecord
from tests.support.streaming_server import ServerConfig, serve_in_thread


def _specs(n: int, **extra: object) -> list[RequestSpec]:
    return [RequestSpec(str(i), "hi", 2, extra_body=dict(extra)) for i in range(n)]


def _max_in_flight(recs: list[RequestRecord]) -> int:
    """The most requests open at once (each open from its send to its last byte)."""
    return max(sum(1 for o in recs if o.sent_s <= r.sent_s < (o.done_s or 0)) for r in recs)


def test_round_robin_over_two_replicas() -> None:
    with serve_in_thread() as u1, serve_in_thread() as u2:
        cfgs = [ClientConfig(u1, "m"), ClientConfig(u2, "m")]
        offs = [0.01 * i for i in range(10)]
        recs = asyncio.run(run_open_loop(cfgs, _specs(10, ttft_ms=5, itl_ms=1), offs))
    assert all(r.ok for r in recs)
    assert Counter(r.extra["endpoint"] for r in recs) == {u1: 5, u2: 5}
    assert [r.extra["endpoint"] for r in recs] == [u1, u2] * 5


def test_least_outstanding_avoids_the_slow_replica() -> None:
    # The slow replica never answers within the run (its requests time out after it): each request
    # sent there stays outstanding, so least-outstanding sends there only while the fast one has as
    # many in flight. With 12 sends 50 ms apart, half of them (round robin's share) would need the
    # fast replica, which answers in ~7 ms, to hold 5 requests at once.
    with ExitStack() as stack:
        slow = stack.enter_context(serve_in_thread(ServerConfig(ttft_ms=600_000)))
        fast = stack.enter_context(serve_in_thread(ServerConfig(ttft_ms=5)))
        cfgs = [ClientConfig(slow, "m", timeout_s=3.0), ClientConfig(fast, "m")]
        offs = [0.05 * i for i in range(12)]
        lo = asyncio.run(run_open_loop(cfgs, _specs(12, itl_ms=1), offs, balance="least_outstanding"))
        rr = asyncio.run(run_open_loop(cfgs, _specs(12, itl_ms=1), offs, balance="round_robin"))
    lo_counts = Counter(r.extra["endpoint"] for r in lo)
    assert Counter(r.extra["endpoint"] for r in rr) == {slow: 6, fast: 6}
    assert lo_counts[slow] < 6 and lo_counts[fast] > 6, lo_counts
    assert all(r.ok for r in lo + rr if r.extra["endpoint"] == fast)
    assert all(r.error == "timeout" for r in lo + rr if r.extra["endpoint"] == slow)


def test_concurrency_cap_queue_wait_kept_apart_from_lag() -> None:
    specs = _specs(8, ttft_ms=50, itl_ms=0, tokens=1)
    with serve_in_thread() as url:
        recs = asyncio.run(run_open_loop(ClientConfig(url, "m"), specs, [0.0] * 8, max_concurrency=2))
    assert all(r.ok for r in recs)
    assert _max_in_flight(recs) <= 2
    # Two at a time, each >= 50 ms (the server's sleep): the k-th wait (sorted) is >= 50 ms x (k // 2).
    waits = sorted(r.queued_s for r in recs)
    for k, w in enumerate(waits):
        assert w >= 0.05 * (k // 2) - 0.001, waits
    m = compute_metrics(recs)
    assert m.queue_wait_ms is not None and m.queue_wait_ms.max is not None and m.queue_wait_ms.max >= 149
    for r in recs:
        # the wait for a slot is part of send - schedule, and kept out of the client's own lag
        assert r.sent_s - r.scheduled_s >= r.queued_s and r.scheduling_lag_s >= 0
        # TTFT is measured from the send, after the queue: the server's 50 ms, not the wait
        assert r.ttft_s is not None and r.ttft_s >= 0.05
        assert r.chunk_times_s[0] - r.scheduled_s >= r.queued_s + 0.05


def test_closed_loop_duration_limit_reuses_specs() -> None:
    with serve_in_thread() as url:
        recs = asyncio.run(
            run_closed_loop(ClientConfig(url, "m"), _specs(3, ttft_ms=5, itl_ms=1), 2, duration_s=1.0)
        )
    assert all(r.ok for r in recs) and _max_in_flight(recs) <= 2
    # in send order: the 3 specs, then again with "#round" suffixes (1 s of ~7 ms requests: many)
    assert len(recs) > 3
    assert [r.request_id for r in recs] == [f"{k % 3}" + (f"#{k // 3}" if k >= 3 else "")
                                            for k in range(len(recs))]
    # A worker checks the clock before each request and starts none after the duration: only the
    # check's last pass (one per worker) can be timestamped after it. The run's clock started at or
    # before the first request.
    start = recs[0].scheduled_s
    assert len([r for r in recs if r.scheduled_s > start + 1.0]) <= 2
    assert all(b.scheduled_s >= a.scheduled_s for a, b in itertools.pairwise(recs))
