"""The per-layout capacity search (pipeline/capacity.py) against a fake layout with a known capacity."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from orchestrator.pipeline.capacity import Probe, search_capacity
from orchestrator.spec.models import SearchSpec


def fake(capacity: float, calls: list[float]) -> object:
    def probe(rate: float) -> Probe:
        calls.append(rate)
        ok = rate <= capacity
        return Probe(rate, ok, "" if ok else f"SLO not met: itl_p99_ms {100 + rate:.1f} > 100")

    return probe


@pytest.mark.parametrize("capacity", [0.7, 9.3, 41.0, 180.0])
@pytest.mark.parametrize("seed", [0.5, 10.0, 500.0])
def test_finds_the_capacity_within_the_tolerance_from_any_seed(capacity: float, seed: float) -> None:
    calls: list[float] = []
    search = SearchSpec(tolerance_frac=0.05, max_points=20, min_rate_per_s=0.1, max_rate_per_s=1000)
    cap = search_capacity("tp8", fake(capacity, calls), search, seed, "test")  # type: ignore[arg-type]
    assert cap.capacity_per_s is not None and cap.capacity_per_s <= capacity
    lo, hi = cap.bracket_per_s
    assert lo == cap.capacity_per_s and hi is not None and hi > capacity
    assert (hi - lo) <= 0.05 * lo * 1.001  # rounding to 4 digits
    assert "itl_p99_ms" in (cap.limiting or "")
    assert len(calls) == len(cap.points) <= 20 and calls[0] == pytest.approx(seed, rel=1e-3)


def test_a_seed_near_the_answer_needs_fewer_points() -> None:
    search = SearchSpec(tolerance_frac=0.05, max_points=30, min_rate_per_s=0.1, max_rate_per_s=1000)
    far: list[float] = []
    near: list[float] = []
    search_capacity("a", fake(9.3, far), search, 200.0, "planner", 2.0)  # type: ignore[arg-type]
    search_capacity("a", fake(9.3, near), search, 9.0, "simulator", 1.25)  # type: ignore[arg-type]
    assert len(near) < len(far)


def test_an_slo_nobody_meets_is_capacity_zero_with_the_limiting_metric() -> None:
    calls: list[float] = []
    search = SearchSpec(min_rate_per_s=0.5, max_rate_per_s=100)
    cap = search_capacity("tp8", fake(0.0, calls), search, 8.0, "test")  # type: ignore[arg-type]
    assert cap.capacity_per_s is None and min(calls) == 0.5
    assert cap.verdict.startswith("capacity 0: fails the SLO down to 0.5 req/s (itl_p99_ms")
    assert "min_rate" in cap.stopped_because


def test_passing_at_the_upper_bound_says_so() -> None:
    search = SearchSpec(min_rate_per_s=0.5, max_rate_per_s=20)
    cap = search_capacity("tp8", fake(1e9, []), search, 8.0, "test")  # type: ignore[arg-type]
    assert cap.capacity_per_s == 20 and cap.bracket_per_s == (20, None)
    assert cap.verdict.startswith("capacity >= 20 req/s")


def test_max_points_bounds_the_search() -> None:
    calls: list[float] = []
    search = SearchSpec(tolerance_frac=0.001, max_points=5)
    search_capacity("tp8", fake(9.3, calls), search, 1.0, "test")  # type: ignore[arg-type]
    assert len(calls) == 5


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tolerance_frac": 0}, "greater than 0"),
        ({"tolerance_frac": -0.1}, "greater than 0"),
        ({"min_rate_per_s": 10, "max_rate_per_s": 5}, "must be below max_rate_per_s"),
        ({"min_rate_per_s": 2, "start_rate_per_s": 1}, "must lie within"),
    ],
)
def test_bad_search_bounds_are_spec_errors(fields: dict[str, float], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SearchSpec(**fields)  # type: ignore[arg-type]
