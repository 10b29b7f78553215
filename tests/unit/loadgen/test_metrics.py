import math

import pytest

from orchestrator.loadgen.metrics import compute_metrics, slo_met, summarize
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.slo import meets_slo, parse_slo
from orchestrator.loadgen.sse import SSEParser


def rec(i: int, sent: float, chunks: list[tuple[float, int]], done: float, **kw: object) -> RequestRecord:
    return RequestRecord(
        request_id=str(i),
        scheduled_s=kw.pop("scheduled", sent),  # type: ignore[arg-type]
        sent_s=sent,
        done_s=done,
        chunk_times_s=tuple(sent + t for t, _ in chunks),
        chunk_tokens=tuple(k for _, k in chunks),
        **kw,  # type: ignore[arg-type]
    )


def test_single_request_known_values() -> None:
    # send at 10; chunks at +0.05 (1 tok), +0.07 (2 tok), +0.10 (1 tok); done at +0.11; usage says 4
    r = rec(0, 10.0, [(0.05, 1), (0.07, 2), (0.10, 1)], 10.11, output_tokens=4, prompt_tokens=6)
    assert r.ttft_s == pytest.approx(0.05)
    assert r.e2e_s == pytest.approx(0.11)
    assert r.tpot_s == pytest.approx((0.11 - 0.05) / 3)
    assert r.itl_chunk_s == pytest.approx((0.02, 0.03))
    assert r.itl_token_s == pytest.approx((0.01, 0.01, 0.03))
    m = compute_metrics([r])
    assert m.ttft_ms.p50 == pytest.approx(50.0)
    assert m.e2e_ms.mean == pytest.approx(110.0)
    assert m.itl_chunk_ms.count == 2 and m.itl_token_ms.count == 3
    assert m.total_output_tokens == 4 and m.total_input_tokens == 6
    assert m.window_s == pytest.approx(0.11)
    assert m.output_throughput == pytest.approx(4 / 0.11)
    assert m.total_throughput == pytest.approx(10 / 0.11)


def test_percentiles_linear() -> None:
    d = summarize(float(x) for x in range(1, 101))
    assert d.p50 == pytest.approx(50.5)
    assert d.p99 == pytest.approx(99.01)
    assert d.mean == pytest.approx(50.5)
    assert d.max == 100.0
    assert summarize([]).p50 is None


def test_tpot_undefined_for_one_token_and_fallback_counted() -> None:
    r = rec(0, 0.0, [(0.1, 1)], 0.1, output_tokens=None, output_tokens_source="fallback")
    assert r.tpot_s is None and r.n_output_tokens == 1
    m = compute_metrics([r])
    assert m.tpot_ms.count == 0 and m.fallback_token_counts == 1


def test_window_throughput_goodput_and_failures() -> None:
    # 10 requests sent one per second, each 2 tokens, ttft 0.1 s (odd ones 0.3 s), done 0.2 / 0.4 s later
    recs = []
    for i in range(10):
        ttft = 0.3 if i % 2 else 0.1
        recs.append(rec(i, float(i), [(ttft, 1), (ttft + 0.05, 1)], i + ttft + 0.1, output_tokens=2))
    recs.append(RequestRecord("f1", 3.5, 3.5, done_s=3.6, error="http_500"))
    recs.append(RequestRecord("f2", 4.5, 4.5, done_s=4.6, error="timeout"))
    m = compute_metrics(recs, warmup_s=2.0, cooldown_s=1.0, gpus=2, slo={"ttft_p99_ms": 200})
    # 12 sends over 9 s: a mean gap of 9/11 s; window [2, 9 + 9/11 - 1): requests 2..8 and both failures
    w = 9 + 9 / 11 - 1 - 2
    assert m.window_s == pytest.approx(w)
    assert m.n_in_window == 9 and m.n_completed == 7
    assert m.request_throughput == pytest.approx(7 / w)
    assert m.per_gpu is not None and m.per_gpu["request_throughput"] == pytest.approx(7 / w / 2)
    # inside the window, even ones (2, 4, 6, 8) meet ttft <= 200 ms
    assert m.goodput == pytest.approx(4 / w)
    assert m.failures == {"http_500": 1, "timeout": 1} and m.n_failed == 2
    assert m.achieved_rate == pytest.approx(9 / w)  # the same window as goodput
    # tokens streamed in the window: requests 2..8 (8's second chunk at 8.15 is inside), 2 each
    assert m.output_throughput == pytest.approx(14 / w)
    assert m.to_dict()["ttft_ms"]["count"] == 7


def test_goodput_equals_the_achieved_rate_when_every_request_passes() -> None:
    """One window for both: a slow last request stretches nothing (issue 29: 1.02 against 1.63 req/s)."""
    fast = [rec(i, i * 0.5, [(0.1, 1), (0.2, 1)], i * 0.5 + 0.3, output_tokens=2) for i in range(17)]
    slow = [*fast[:-1], rec(16, 8.0, [(0.1, 1), (6.0, 1)], 14.0, output_tokens=2)]
    for recs in (fast, slow):
        m = compute_metrics(recs, slo={"ttft_p99_ms": 500})
        assert m.goodput == pytest.approx(m.achieved_rate) and m.goodput == pytest.approx(2.0)
        assert m.goodput == pytest.approx(m.request_throughput)


def test_throughput_past_capacity_is_what_was_served() -> None:
    """Requests sent at 10/s into a server that streams one token per 0.1 s for one request at a time:
    tokens counted as they stream, not as offered (offered: 10 tokens x 10/s = 100 tok/s)."""
    recs, free = [], 0.0
    for i in range(50):
        sent = i * 0.1
        first = max(sent, free) + 0.1
        chunks = tuple(first + 0.1 * k for k in range(10))
        free = chunks[-1]
        recs.append(RequestRecord(str(i), sent, sent, done_s=free, chunk_times_s=chunks,
                                  chunk_tokens=(1,) * 10, output_tokens=10))
    m = compute_metrics(recs, warmup_s=1.0)
    assert m.output_throughput == pytest.approx(10.0, rel=0.05)
    assert m.achieved_rate == pytest.approx(10.0, rel=0.05)


def test_all_at_once_runs_to_the_last_end() -> None:
    recs = [rec(i, 0.0, [(0.1 * (i + 1), 1)], 0.1 * (i + 1) + 0.05, output_tokens=1) for i in range(4)]
    m = compute_metrics(recs)
    assert m.window_s == pytest.approx(0.45) and m.n_completed == 4
    assert m.output_throughput == pytest.approx(4 / 0.45)


def test_slo_per_request_itl_and_aggregate() -> None:
    r = rec(0, 0.0, [(0.01, 1), (0.02, 1), (0.1, 1)], 0.1, output_tokens=3)
    assert meets_slo(r, {"itl_max_ms": 100})
    assert not meets_slo(r, {"itl_max_ms": 50})
    assert meets_slo(r, {"itl_p50_ms": 50})
    assert not meets_slo(RequestRecord("x", 0, 0, done_s=1, error="timeout"), {})
    m = compute_metrics([r])
    assert slo_met(m, {"ttft_p99_ms": 20}) and not slo_met(m, {"e2e_mean_ms": 50})
    with pytest.raises(ValueError):
        parse_slo({"latency_p99_ms": 1})
    assert parse_slo({"itl_token_p95_ms": 5}) == [("itl_token", "p95", 5.0)]


def test_scheduling_lag() -> None:
    recs = [RequestRecord(str(i), float(i), i + 0.001 * i, done_s=i + 1.0) for i in range(5)]
    m = compute_metrics(recs)
    assert m.sched_lag_ms is not None and m.sched_lag_ms.p50 == pytest.approx(2.0)
    assert m.scheduled_rate == pytest.approx(1.0)
    assert not math.isinf(m.achieved_rate or 0)


def test_empty() -> None:
    m = compute_metrics([])
    assert m.n_requests == 0 and m.ttft_ms.p50 is None


def test_sse_split_and_multiple() -> None:
    p = SSEParser()
    assert p.feed(b'data: {"a"') == []
    assert p.feed(b": 1}\n") == []
    ev = p.feed(b'\ndata: {"b": 2}\n\ndata: [DONE]\n\n')
    assert [e.data for e in ev] == [b"{\"a\": 1}", b"{\"b\": 2}", b"[DONE]"]
    assert ev[-1].done and not ev[0].done
    p2 = SSEParser()
    ev2 = p2.feed(b": comment\r\nevent: x\r\ndata: a\r\ndata: b\r\n\r\n")
    assert [(e.event, e.data) for e in ev2] == [("x", b"a\nb")]
    assert p2.pending == b""


def test_queue_wait_apart_from_scheduling_lag_and_error_rate() -> None:
    # scheduled at i, waited 0.5 s for a slot, then sent 2 ms after the slot freed
    recs = [RequestRecord(str(i), float(i), i + 0.502, done_s=i + 1.0, queued_s=0.5) for i in range(4)]
    recs.append(RequestRecord("f", 5.0, 5.0, done_s=5.1, error="timeout"))
    m = compute_metrics(recs)
    assert m.sched_lag_ms is not None and m.sched_lag_ms.p99 == pytest.approx(2.0, abs=1e-6)
    assert m.queue_wait_ms is not None and m.queue_wait_ms.p50 == pytest.approx(500.0)
    assert m.error_rate == pytest.approx(0.2) and m.to_dict()["error_rate"] == pytest.approx(0.2)


def test_sse_bare_data_line_and_partial() -> None:
    p = SSEParser()
    assert [e.data for e in p.feed(b"data\n\nevent: e\ndata:x\n\ndata: tail")] == [b"", b"x"]
    assert p.pending == b"data: tail" and p.has_partial_event


def test_event_json_parsing_fast_path_and_errors() -> None:
    from orchestrator.loadgen.decode import parse_json as _parse_json

    assert _parse_json('{"a": 1}') == {"a": 1} and _parse_json('  {"a": 2}  ') == {"a": 2}
    for bad in ("{not json", '{"a": 1} trailing', ""):
        with pytest.raises(ValueError):
            _parse_json(bad)
