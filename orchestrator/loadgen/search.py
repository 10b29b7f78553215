"""Rate search: the highest request rate whose load point meets the SLO.

Bracket, then bisect. From `start_rate`, multiply by `growth` (2) while the point passes (or divide
while it fails) until one passing and one failing rate bracket the answer; then bisect between them
until the bracket is narrower than `rel_tol` of the passing rate, or `max_runs` load points have been
run. `next_rate` is the whole rule as a pure function of the points so far, so `orch bench --search`
(async, `search_rate`) and `orch sweep`'s per-layout capacity search (synchronous, resumable from the
stored points) step the same way. It assumes passing is monotone in the rate; measurement noise near
the boundary can make the answer a little low, never a failing rate.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from orchestrator.loadgen.metrics import Metrics, slo_violations
from orchestrator.loadgen.slo import parse_slo

RunFn = Callable[[float], Awaitable[Metrics]]
#: (rate, metrics) -> "" when the point passes, else why not; replaces the SLO verdict when given.
CheckFn = Callable[[float, Metrics], str]


@dataclass(frozen=True)
class SearchPoint:
    rate: float
    metrics: Metrics
    passed: bool
    reason: str  # why it failed ("" when it passed)


@dataclass(frozen=True)
class SearchResult:
    best_rate: float | None  # highest passing rate; None when no rate down to min_rate passed
    points: tuple[SearchPoint, ...]  # in the order they were run
    stopped_because: str

    @property
    def best(self) -> SearchPoint | None:
        passing = [p for p in self.points if p.passed]
        return max(passing, key=lambda p: p.rate) if passing else None


def verdict(metrics: Metrics, slo: Mapping[str, float], max_error_rate: float = 0.01) -> str:
    """Empty when the load point passes: completed requests, error rate within bound, every SLO bound held."""
    if metrics.n_completed == 0:
        return "no request completed"
    if metrics.error_rate > max_error_rate:
        return f"error rate {metrics.error_rate:.1%} > {max_error_rate:.1%}"
    broken = slo_violations(metrics, slo)
    return "SLO not met: " + ", ".join(f"{k} {v:.1f} > {b:g}" for k, v, b in broken) if broken else ""


def bracket(tried: Sequence[tuple[float, bool]]) -> tuple[float | None, float | None]:
    """(highest passing rate below the lowest failing one, lowest failing rate); None where absent."""
    fails = [r for r, ok in tried if not ok]
    hi = min(fails) if fails else None
    passes = [r for r, ok in tried if ok and (hi is None or r < hi)]
    return (max(passes) if passes else None), hi


def check_bounds(start_rate: float, min_rate: float, max_rate: float, rel_tol: float, max_runs: int,
                 growth: float = 2.0) -> None:
    if not 0 < min_rate <= start_rate <= max_rate or rel_tol <= 0 or max_runs < 2 or growth <= 1:
        raise ValueError(
            "need 0 < min_rate <= start_rate <= max_rate, rel_tol > 0, max_runs >= 2 and growth > 1"
        )


def next_rate(
    tried: Sequence[tuple[float, bool]], *, start_rate: float, min_rate: float, max_rate: float,
    rel_tol: float, max_runs: int, growth: float = 2.0,
) -> tuple[float | None, str]:
    """The next rate to measure given (rate, passed) so far, or (None, why the search stops)."""
    if not tried:
        return start_rate, ""
    lo, hi = bracket(tried)
    if lo is not None and hi is not None and (hi - lo) <= rel_tol * lo:
        return None, f"bracket [{lo:g}, {hi:g}]/s within {rel_tol:.0%}"
    if len(tried) >= max_runs:
        where = "while bracketing" if lo is None or hi is None else f"; bracket [{lo:g}, {hi:g}]/s"
        return None, f"max_runs ({max_runs}) reached" + (" " + where if lo is None or hi is None else where)
    if hi is None:
        assert lo is not None
        if lo >= max_rate:
            return None, f"passes at max_rate ({max_rate:g}/s)"
        return min(lo * growth, max_rate), ""
    if lo is None:
        if hi <= min_rate:
            return None, f"fails down to min_rate ({min_rate:g}/s)"
        return max(hi / growth, min_rate), ""
    return (lo + hi) / 2, ""


def next_concurrency(
    tried: Sequence[tuple[float, bool]], *, start: int, min_c: int, max_c: int, rel_tol: float,
    max_runs: int, growth: float = 2.0,
) -> tuple[int | None, str]:
    """`next_rate` for a closed loop: whole numbers of requests in flight. The bracket stops when it is
    within `rel_tol` of the passing concurrency or the two ends are neighbours (nothing lies between);
    growth and bisection round so every step lands strictly inside the bracket."""
    if not tried:
        return start, ""
    lo_f, hi_f = bracket(tried)
    lo, hi = (None if lo_f is None else int(lo_f)), (None if hi_f is None else int(hi_f))
    if lo is not None and hi is not None and (hi - lo <= 1 or hi - lo <= rel_tol * lo):
        return None, f"bracket [{lo}, {hi}] concurrent requests within {rel_tol:.0%} (or neighbours)"
    if len(tried) >= max_runs:
        where = " while bracketing" if lo is None or hi is None else f"; bracket [{lo}, {hi}]"
        return None, f"max_runs ({max_runs}) reached{where}"
    if hi is None:
        assert lo is not None
        if lo >= max_c:
            return None, f"passes at max_concurrency ({max_c})"
        return min(max(lo + 1, round(lo * growth)), max_c), ""
    if lo is None:
        if hi <= min_c:
            return None, f"fails down to min_concurrency ({min_c})"
        return max(min(hi - 1, int(hi / growth)), min_c), ""
    return (lo + hi) // 2, ""


async def search_rate(
    run: RunFn,
    slo: Mapping[str, float],
    *,
    start_rate: float = 1.0,
    min_rate: float = 0.01,
    max_rate: float = 1e6,
    rel_tol: float = 0.05,
    max_runs: int = 16,
    max_error_rate: float = 0.01,
    on_point: Callable[[SearchPoint], None] | None = None,
    check: CheckFn | None = None,
    growth: float = 2.0,
) -> SearchResult:
    """Highest rate in [min_rate, max_rate] that passes `verdict` (or `check`); see the module docstring."""
    if not slo and check is None:
        raise ValueError("a rate search needs an SLO or a check")
    parse_slo(slo)
    check_bounds(start_rate, min_rate, max_rate, rel_tol, max_runs, growth)
    points: list[SearchPoint] = []
    while True:
        rate, why_stop = next_rate([(p.rate, p.passed) for p in points], start_rate=start_rate,
                                   min_rate=min_rate, max_rate=max_rate, rel_tol=rel_tol,
                                   max_runs=max_runs, growth=growth)
        if rate is None:
            passing = [p.rate for p in points if p.passed]
            return SearchResult(max(passing) if passing else None, tuple(points), why_stop)
        m = await run(rate)
        why = check(rate, m) if check is not None else verdict(m, slo, max_error_rate)
        p = SearchPoint(rate, m, not why, why)
        points.append(p)
        if on_point is not None:
            on_point(p)
