import numpy as np
import pytest

from orchestrator.loadgen.balance import Balancer
from orchestrator.loadgen.client import arrival_offsets


def test_duration_limit_and_count_limit() -> None:
    c = arrival_offsets(None, 10.0, "constant", duration_s=1.0)
    assert c == pytest.approx([i / 10 for i in range(10)])
    assert len(arrival_offsets(4, 10.0, "constant", duration_s=1.0)) == 4
    p = arrival_offsets(None, 200.0, "poisson", seed=4, duration_s=5.0)
    assert max(p) < 5.0 and 850 < len(p) < 1150
    assert p == arrival_offsets(None, 200.0, "poisson", seed=4, duration_s=5.0)
    with pytest.raises(ValueError):
        arrival_offsets(None, 10.0)
    with pytest.raises(ValueError):
        arrival_offsets(5, 10.0, "weibull")  # type: ignore[arg-type]


def test_gamma_burstiness_changes_dispersion() -> None:
    def cv(b: float) -> float:
        gaps = np.diff(arrival_offsets(20000, 50.0, "gamma", burstiness=b, seed=1))
        return float(gaps.std() / gaps.mean())

    # coefficient of variation of gamma gaps is 1/sqrt(shape)
    assert cv(1.0) == pytest.approx(1.0, rel=0.05)
    assert cv(0.25) == pytest.approx(2.0, rel=0.08)
    assert cv(4.0) == pytest.approx(0.5, rel=0.05)
    g = arrival_offsets(20000, 50.0, "gamma", burstiness=0.25, seed=1)
    assert g[-1] / len(g) == pytest.approx(1 / 50, rel=0.1)


def test_round_robin_and_least_outstanding() -> None:
    rr = Balancer(3)
    assert [rr.acquire() for _ in range(6)] == [0, 1, 2, 0, 1, 2]
    lo = Balancer(3, "least_outstanding")
    a, b, c = lo.acquire(), lo.acquire(), lo.acquire()
    assert (a, b, c) == (0, 1, 2)
    lo.release(1)
    assert lo.acquire() == 1  # the only endpoint with a free slot
    lo.release(0)
    lo.release(2)
    assert sorted([lo.acquire(), lo.acquire()]) == [0, 2]
    assert lo.sent == [2, 2, 2]
    with pytest.raises(ValueError):
        Balancer(0)
    with pytest.raises(ValueError):
        Balancer(2, "random")  # type: ignore[arg-type]
