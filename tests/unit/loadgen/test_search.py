import asyncio
from typing import Any

import pytest

from orchestrator.loadgen.metrics import Metrics, compute_metrics
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.search import SearchResult, search_rate, verdict

CAPACITY = 100.0  # req/s
BASE_TTFT_S = 0.010


def fake_metrics(rate: float, n: int = 50, fail_every: int = 0) -> Metrics:
    """A deterministic M/M/1-like server: TTFT = base / (1 - rate / capacity), unbounded at capacity."""
    util = rate / CAPACITY
    ttft = BASE_TTFT_S / (1 - util) if util < 1 else 60.0
    recs = []
    for i in range(n):
        t = i / rate
        err = "http_500" if fail_every and i % fail_every == 0 else None
        chunks = (t + ttft, t + ttft + 0.01)
        recs.append(RequestRecord(str(i), t, t, done_s=t + ttft + 0.01, chunk_times_s=chunks,
                                  chunk_tokens=(1, 1), output_tokens=2, error=err))
    return compute_metrics(recs)


def run_search(slo: dict[str, float], **kw: Any) -> tuple[SearchResult, list[float]]:
    rates: list[float] = []

    async def run(rate: float) -> Metrics:
        rates.append(rate)
        return fake_metrics(rate)

    return asyncio.run(search_rate(run, slo, **kw)), rates


def test_search_finds_the_analytic_boundary() -> None:
    # TTFT <= 50 ms  <=>  1 - r/C >= 0.2  <=>  r <= 80 req/s
    res, rates = run_search({"ttft_p99_ms": 50.0}, start_rate=3.0, rel_tol=0.02)
    assert res.best_rate is not None
    assert 80 * 0.98 <= res.best_rate <= 80.0
    assert rates[:6] == [3, 6, 12, 24, 48, 96]  # bracket by doubling, then bisect
    best = res.best
    assert best is not None and best.passed and best.rate == res.best_rate
    assert all(p.passed == (p.rate <= 80.0) for p in res.points)
    assert "within 2%" in res.stopped_because


def test_search_halves_when_start_fails_and_reports_none() -> None:
    res, rates = run_search({"ttft_p99_ms": 50.0}, start_rate=400.0, rel_tol=0.05)
    assert rates[:4] == [400, 200, 100, 50]
    assert res.best_rate is not None and 76 <= res.best_rate <= 80
    none, _ = run_search({"ttft_p99_ms": 5.0}, start_rate=8.0, min_rate=1.0)
    assert none.best_rate is None and "min_rate" in none.stopped_because


def test_search_caps_at_max_rate_and_max_runs() -> None:
    res, rates = run_search({"ttft_p99_ms": 50.0}, start_rate=10.0, max_rate=30.0)
    assert rates == [10, 20, 30] and res.best_rate == 30
    res2, rates2 = run_search({"ttft_p99_ms": 50.0}, start_rate=1.0, max_runs=4)
    assert len(rates2) == 4 and res2.best_rate == 8
    with pytest.raises(ValueError):
        run_search({})


def test_verdict_reasons() -> None:
    ok = fake_metrics(10.0)
    assert verdict(ok, {"ttft_p99_ms": 50}) == ""
    slow = verdict(fake_metrics(95.0), {"ttft_p99_ms": 50})
    assert slow.startswith("SLO not met: ttft_p99_ms 200.0 > 50")
    assert verdict(fake_metrics(10.0, fail_every=10), {"ttft_p99_ms": 50}).startswith("error rate 10.0%")
    assert verdict(fake_metrics(10.0, fail_every=10), {"ttft_p99_ms": 50}, max_error_rate=0.2) == ""


def test_custom_check_replaces_the_slo() -> None:
    # e.g. the load-generator ceiling: a point passes while the achieved rate keeps up
    async def run(rate: float) -> Metrics:
        return fake_metrics(min(rate, 37.0))

    def keeps_up(rate: float, m: Metrics) -> str:
        return "" if (m.achieved_rate or 0) >= 0.99 * rate else "behind"

    res = asyncio.run(search_rate(run, {}, start_rate=5.0, rel_tol=0.01, max_runs=30, check=keeps_up))
    assert res.best_rate is not None and 37 * 0.99 <= res.best_rate <= 37.0 / 0.99
