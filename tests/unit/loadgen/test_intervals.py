"""Intervals by batch means over time batches of the measurement window (loadgen/intervals.py)."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.loadgen.intervals import (
    MIN_REQUESTS_TO_SEPARATE,
    enough_to_separate,
    order_statistic_interval,
    point_intervals,
    slo_margin,
    wilson,
)
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.loadgen.records import RequestRecord

SLO = {"ttft_p99_ms": 80.0, "itl_p99_ms": 30.0, "tpot_p50_ms": 25.0}


def records(n: int, seed: int = 0, *, ttft_scale: float = 0.04, rate: float = 10.0) -> list[RequestRecord]:
    """Poisson arrivals at `rate`, lognormal TTFTs, gamma gaps."""
    rng = np.random.default_rng(seed)
    out, t = [], 0.0
    for i in range(n):
        t += float(rng.exponential(1 / rate))
        ttft = float(rng.lognormal(np.log(ttft_scale), 0.4))
        gaps = rng.gamma(4.0, 0.005, size=int(rng.integers(8, 24)))
        chunks = tuple(t + ttft + np.concatenate([[0.0], np.cumsum(gaps)]))
        out.append(RequestRecord(str(i), t, t, done_s=chunks[-1], chunk_times_s=chunks,
                                 chunk_tokens=(1,) * len(chunks), output_tokens=len(chunks),
                                 prompt_tokens=10))
    return out


def test_intervals_contain_the_point_estimates_and_are_reproducible() -> None:
    recs = records(400)
    m = compute_metrics(recs, gpus=2, slo=SLO)
    iv = point_intervals(recs, gpus=2, slo=SLO, seed=3)
    assert iv == point_intervals(recs, gpus=2, slo=SLO, seed=3)
    for key, point in (("ttft_p99_ms", m.ttft_ms.p99), ("itl_p99_ms", m.itl_chunk_ms.p99),
                       ("tpot_p50_ms", m.tpot_ms.p50), ("goodput", m.goodput),
                       ("output_throughput", m.output_throughput)):
        lo, hi = iv[key]
        assert point is not None and lo < point < hi, key
    assert iv["goodput_per_gpu"] == [x / 2 for x in iv["goodput"]]
    assert iv["requests"] == m.n_in_window and iv["batches"] == 5 and iv["enough"]


def test_every_request_passing_is_not_a_zero_width_goodput() -> None:
    """Issue 29: `0.616 [0.62, 0.62]` when every request met the SLO."""
    recs = records(300, ttft_scale=0.01)
    m = compute_metrics(recs, slo={"ttft_p99_ms": 1000})
    lo, hi = point_intervals(recs, slo={"ttft_p99_ms": 1000})["goodput"]
    assert m.goodput == pytest.approx(m.achieved_rate)  # every request passed
    assert lo < m.goodput < hi and (hi - lo) > 0.05 * m.goodput


def test_constant_arrivals_still_carry_the_pass_fraction_uncertainty() -> None:
    """Arrivals on a fixed grid: every batch sees the same count, yet 40 of 40 passing does not prove
    that every request always will (the Wilson interval of the pass fraction)."""
    recs = [RequestRecord(str(i), i / 8, i / 8, done_s=i / 8 + 0.05, chunk_times_s=(i / 8 + 0.02,),
                          chunk_tokens=(1,), output_tokens=1) for i in range(40)]
    iv = point_intervals(recs, slo={"ttft_p99_ms": 100})
    lo, hi = iv["goodput"]
    assert hi == pytest.approx(8.0) and lo == pytest.approx(8.0 * wilson(40, 40)[0]) and lo < 8.0 * 0.95


def test_more_requests_give_a_narrower_interval() -> None:
    def width(n: int, key: str) -> float:
        lo, hi = point_intervals(records(n, seed=1), slo=SLO)[key]
        return float(hi - lo)

    for key in ("ttft_p99_ms", "goodput", "output_throughput"):
        assert width(3000, key) < width(200, key), key


def test_too_few_requests_give_no_interval_and_are_not_enough_to_separate() -> None:
    few = point_intervals(records(9), slo=SLO)
    assert few["batches"] == 0 and "goodput" not in few and not enough_to_separate(few)
    some = point_intervals(records(17), slo=SLO)
    assert some["batches"] == 3 and "goodput" in some and not enough_to_separate(some)
    assert enough_to_separate(point_intervals(records(MIN_REQUESTS_TO_SEPARATE + 5), slo=SLO))
    assert not enough_to_separate(None)


def test_order_statistic_interval_widens_with_fewer_values() -> None:
    rng = np.random.default_rng(0)
    big, small = rng.exponential(size=10_000), rng.exponential(size=50)
    lo, hi = order_statistic_interval(big, 0.5)
    assert lo < np.percentile(big, 50) < hi and hi - lo < 0.1
    assert order_statistic_interval(small, 0.99) == (pytest.approx(np.sort(small)[-3]), small.max())
    # ties (a simulator's repeated step times): the ends move to the next distinct values
    tied = np.array([1.0] * 5 + [2.0] * 200 + [3.0] * 5)
    assert order_statistic_interval(tied, 0.5) == (1.0, 3.0)


def test_wilson() -> None:
    lo, hi = wilson(17, 17)
    assert hi == 1.0 and 0.8 < lo < 0.85
    assert wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(50, 100)
    assert lo < 0.5 < hi and hi - 0.5 == pytest.approx(0.5 - lo)


def test_slo_margin() -> None:
    iv = {"ttft_p99_ms": [60.0, 70.0], "itl_p99_ms": [28.0, 32.0]}
    assert slo_margin(iv, {"ttft_p99_ms": 80}) == "holds"
    assert slo_margin(iv, {"ttft_p99_ms": 80, "itl_p99_ms": 30}) == "close"
    assert slo_margin(iv, {"ttft_p99_ms": 50, "itl_p99_ms": 30}) == "breaks"


def test_no_records_gives_no_interval() -> None:
    assert "goodput" not in point_intervals([], slo=SLO)
