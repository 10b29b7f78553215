"""The per-layout capacity search (pipeline/capacity.py) against a fake layout with a known capacity."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from orchestrator.pipeline.capacity import Probe, search_capacity
from orchestrator.spec.workload import SearchSpec


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
    assert cap.capacity is not None and cap.capacity <= capacity
    lo, hi = cap.bracket
    assert lo == cap.capacity and hi is not None and hi > capacity
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
    assert cap.capacity is None and min(calls) == 0.5
    assert cap.verdict.startswith("capacity 0: fails the SLO down to 0.5 req/s (itl_p99_ms")
    assert "min_rate" in cap.stopped_because


def test_passing_at_the_upper_bound_says_so() -> None:
    search = SearchSpec(min_rate_per_s=0.5, max_rate_per_s=20)
    cap = search_capacity("tp8", fake(1e9, []), search, 8.0, "test")  # type: ignore[arg-type]
    assert cap.capacity == 20 and cap.bracket == (20, None)
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


# -- closed loop: whole numbers of requests in flight ---------------------------------------------

@pytest.mark.parametrize("capacity", [1, 2, 7, 21, 64, 300])
@pytest.mark.parametrize("seed", [1.0, 5.3, 43.0, 900.0])
def test_the_concurrency_search_steps_in_whole_requests_and_brackets_the_capacity(
    capacity: int, seed: float
) -> None:
    calls: list[float] = []
    search = SearchSpec(tolerance_frac=0.05, max_points=30, min_concurrency=1, max_concurrency=1024)
    cap = search_capacity("tp8", fake(capacity, calls), search, seed, "test",  # type: ignore[arg-type]
                          by="concurrency")
    assert all(c == int(c) and 1 <= c <= 1024 for c in calls) and len(set(calls)) == len(calls)
    lo, hi = cap.bracket
    assert cap.capacity == lo and lo is not None and hi is not None and lo <= capacity < hi
    assert hi - lo <= max(1, 0.05 * lo)  # neighbours, or within the tolerance
    if capacity < 20:  # below 20 the tolerance is under one request: the exact answer
        assert cap.capacity == capacity
    assert cap.to_dict()["capacity_concurrency"] == cap.capacity and cap.to_dict()["by"] == "concurrency"
    assert cap.verdict.startswith(f"capacity {lo:g} concurrent requests (fails at {hi:g}")


def test_the_concurrency_search_says_capacity_zero_and_passing_at_the_top() -> None:
    search = SearchSpec(min_concurrency=2, max_concurrency=64)
    calls: list[float] = []
    zero = search_capacity("a", fake(0, calls), search, 16, "t", by="concurrency")  # type: ignore[arg-type]
    assert zero.capacity is None and min(calls) == 2 and "min_concurrency (2)" in zero.stopped_because
    assert zero.verdict.startswith("capacity 0: fails the SLO down to 2 concurrent requests (itl_p99_ms")
    top = search_capacity("a", fake(10**6, []), search, 16, "t", by="concurrency")  # type: ignore[arg-type]
    assert top.capacity == 64 and top.bracket == (64, None) and "max_concurrency (64)" in top.stopped_because


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"min_concurrency": 0}, "greater than or equal to 1"),
        ({"min_concurrency": 64, "max_concurrency": 8}, "must be below max_concurrency"),
        ({"min_concurrency": 8, "start_concurrency": 2}, "must lie within"),
        ({"max_concurrency": 2.5}, "valid integer"),
    ],
)
def test_bad_concurrency_bounds_are_spec_errors(fields: dict[str, float], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SearchSpec(**fields)  # type: ignore[arg-type]


# -- a point that could not be judged is unknown, not a failure -----------------------------------

def flaky(capacity: float, unjudged_at: set[float], calls: list[float]) -> object:
    def probe(load: float) -> Probe:
        calls.append(load)
        if load in unjudged_at:
            return Probe(load, False, "unreliable: the simulated servers lost their clock", judged=False)
        ok = load <= capacity
        return Probe(load, ok, "" if ok else "SLO not met: itl_p99_ms 120.0 > 100")

    return probe


def test_an_unjudged_point_does_not_move_the_bracket_and_is_stepped_around() -> None:
    search = SearchSpec(tolerance_frac=0.05, max_points=20, min_rate_per_s=0.1, max_rate_per_s=1000)
    # the bracketing from 8 finds pass 8, fail 16; the first bisection (12) is unjudged
    calls: list[float] = []
    cap = search_capacity("tp8", flaky(9.3, {12.0}, calls), search, 8.0, "test")  # type: ignore[arg-type]
    assert calls[:3] == [8.0, 16.0, 12.0]
    assert calls.count(12.0) == 1 and calls[3] == 10.0  # a quarter into the bracket [8, 16] instead
    assert cap.capacity is not None and cap.capacity <= 9.3 and cap.bracket[1] is not None
    assert cap.bracket[1] > 9.3 and cap.unjudged == (12.0,)
    # counted as a failure, 12 would have been the lowest failure; as unknown it is not the bracket
    assert cap.bracket[1] != 12.0 and cap.to_dict()["unjudged"] == [12.0]


def test_with_nothing_to_step_to_the_search_stops_and_says_why() -> None:
    search = SearchSpec(tolerance_frac=0.05, max_points=20, min_rate_per_s=0.1, max_rate_per_s=1000)
    calls: list[float] = []
    # the first point cannot be judged: no side of the bracket is known, nothing to step towards
    cap = search_capacity("tp8", flaky(9.3, {8.0}, calls), search, 8.0, "test")  # type: ignore[arg-type]
    assert calls == [8.0] and cap.capacity is None and cap.bracket == (None, None)
    assert "rate=8/s could not be judged even when measured again" in cap.stopped_because
    assert cap.verdict.startswith("capacity unknown: no point could be judged")


def test_unjudged_points_count_towards_max_points() -> None:
    search = SearchSpec(tolerance_frac=0.001, max_points=6, min_rate_per_s=0.1, max_rate_per_s=1000)
    calls: list[float] = []
    search_capacity("tp8", flaky(9.3, {12.0, 10.0}, calls), search, 8.0, "test")  # type: ignore[arg-type]
    assert len(calls) == 6


# -- the capacity interval starts at a sure pass ---------------------------------------------------

def noisy(capacity: float, sure_below: float, calls: list[float]) -> object:
    """Passes up to `capacity`, but only surely (every SLO interval inside its bound) below `sure_below`."""
    def probe(load: float) -> Probe:
        calls.append(load)
        ok = load <= capacity
        return Probe(load, ok, "" if ok else "SLO not met: itl_p99_ms 100.2 > 100", sure=load < sure_below)

    return probe


def test_when_every_pass_is_close_the_search_measures_one_lower_sure_pass() -> None:
    search = SearchSpec(tolerance_frac=0.05, max_points=12, min_rate_per_s=0.1, max_rate_per_s=200)
    calls: list[float] = []
    # tp4x2 in the main job: passes close to the SLO from 3 up, capacity 4.1
    cap = search_capacity("tp4x2", noisy(4.1, 3.0, calls), search, 13.56, "test")  # type: ignore[arg-type]
    lo = cap.capacity
    assert lo is not None and lo <= 4.1 and cap.bracket[1] is not None and cap.bracket[1] > 4.1
    bisected = [c for c in calls if c != calls[-1]]
    assert not any(c < 3.0 and c <= lo for c in bisected)  # the bisection alone gave no sure pass
    sure = [p for p in cap.points if p.passed and p.sure]
    assert len(sure) == 1 and sure[0].load == calls[-1]  # exactly one more point, and it is sure
    lowest_close = min(p.load for p in cap.points if p.passed and not p.sure)
    assert sure[0].load == pytest.approx(lowest_close / 2, rel=1e-3)  # one step down by the growth
    assert "measured below" in cap.stopped_because and len(calls) <= 12
    assert cap.to_dict()["points"][-1]["sure"] is True


def test_a_sure_pass_at_or_below_the_capacity_needs_no_extra_point() -> None:
    search = SearchSpec(tolerance_frac=0.05, max_points=12, min_rate_per_s=0.1, max_rate_per_s=200)
    plain: list[float] = []
    noisy_calls: list[float] = []
    search_capacity("a", fake(4.1, plain), search, 13.56, "t")  # type: ignore[arg-type]
    cap = search_capacity("a", noisy(4.1, 3.5, noisy_calls), search, 13.56, "t")  # type: ignore[arg-type]
    assert noisy_calls == plain and "measured below" not in cap.stopped_because


def test_the_sure_pass_step_keeps_within_max_points_and_the_minimum() -> None:
    calls: list[float] = []
    tight = SearchSpec(tolerance_frac=0.001, max_points=6, min_rate_per_s=0.1, max_rate_per_s=200)
    search_capacity("a", noisy(4.1, 0.0, calls), tight, 4.0, "t")  # type: ignore[arg-type]
    assert len(calls) == 6  # the budget went to the bracket: no extra point
    calls = []
    floor = SearchSpec(tolerance_frac=0.05, max_points=30, min_rate_per_s=1.0, max_rate_per_s=200)
    cap = search_capacity("a", noisy(4.1, 0.0, calls), floor, 4.0, "t")  # type: ignore[arg-type]
    assert min(calls) == 1.0 and calls.count(1.0) == 1  # stepped down to the minimum, then stopped
    assert not any(p.sure for p in cap.points if p.passed) and cap.capacity is not None


def test_a_closed_loop_steps_down_in_whole_requests_for_a_sure_pass() -> None:
    search = SearchSpec(tolerance_frac=0.05, max_points=20, min_concurrency=1, max_concurrency=1024)
    calls: list[float] = []
    cap = search_capacity("a", noisy(21, 8, calls), search, 43.0, "t", by="concurrency")  # type: ignore[arg-type]
    assert cap.capacity == 21 and all(c == int(c) for c in calls)
    assert any(p.sure and p.passed for p in cap.points) and calls[-1] < 8


def test_the_capacity_line_says_when_no_sure_pass_was_measured() -> None:
    from types import SimpleNamespace

    from orchestrator.cli.sweep_tables import _capacity_lines

    search = SearchSpec(tolerance_frac=0.05, max_points=8, min_rate_per_s=0.1, max_rate_per_s=200)
    cap = search_capacity("tp4x2", noisy(4.1, 0.0, []), search, 13.56, "t")  # type: ignore[arg-type]
    assert cap.capacity is not None and not any(p.sure for p in cap.points if p.passed)
    store = SimpleNamespace(extras=lambda run_id, prefix: {"capacity/tp4x2": cap.to_dict()})

    def line(low: float) -> str:
        verdict = SimpleNamespace(layout="tp4x2", capacity_interval=(low, 5.085))
        result = SimpleNamespace(run_id="r", selection=SimpleNamespace(verdicts=[verdict]))
        (out,) = _capacity_lines(result, store)  # type: ignore[arg-type]
        return out

    assert f"capacity {cap.capacity:g} req/s [0 (no sure pass measured), 5.085]" in line(0.0)
    assert "[3.39, 5.085]" in line(3.39) and "no sure pass" not in line(3.39)
