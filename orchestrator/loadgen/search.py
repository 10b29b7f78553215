"""Rate search: the highest request rate whose load point meets the SLO.

Bracket, then bisect. From `start_rate`, double while the point passes (or halve while it fails)
until one passing and one failing rate bracket the answer; then bisect between them until the
bracket is narrower than `rel_tol` of the passing rate, or `max_runs` load points have been run.
The run function is injected (rate -> Metrics), so the search is tested against a fake latency model
and driven by the real runner in `orch bench --search`. It assumes that passing is monotone in the
rate; measurement noise near the boundary can make the answer a little low, never a failing rate.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from orchestrator.loadgen.metrics import Metrics, parse_slo, slo_violations

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
) -> SearchResult:
    """Highest rate in [min_rate, max_rate] that passes `verdict` (or `check`); see the module docstring."""
    if not slo and check is None:
        raise ValueError("a rate search needs an SLO or a check")
    parse_slo(slo)
    if not 0 < min_rate <= start_rate <= max_rate or rel_tol <= 0 or max_runs < 2:
        raise ValueError("need 0 < min_rate <= start_rate <= max_rate, rel_tol > 0 and max_runs >= 2")
    points: list[SearchPoint] = []

    async def probe(rate: float) -> bool:
        m = await run(rate)
        why = check(rate, m) if check is not None else verdict(m, slo, max_error_rate)
        p = SearchPoint(rate, m, not why, why)
        points.append(p)
        if on_point is not None:
            on_point(p)
        return p.passed

    def done(reason: str) -> SearchResult:
        passing = [p.rate for p in points if p.passed]
        return SearchResult(max(passing) if passing else None, tuple(points), reason)

    lo: float | None = None
    hi: float | None = None
    rate = start_rate
    while lo is None or hi is None:
        if len(points) >= max_runs:
            return done(f"max_runs ({max_runs}) reached while bracketing")
        if await probe(rate):
            lo = rate
            if rate >= max_rate:
                return done(f"passes at max_rate ({max_rate:g}/s)")
            rate = min(rate * 2, max_rate)
        else:
            hi = rate
            if rate <= min_rate:
                return done(f"fails down to min_rate ({min_rate:g}/s)")
            rate = max(rate / 2, min_rate)
    while (hi - lo) > rel_tol * lo:
        if len(points) >= max_runs:
            return done(f"max_runs ({max_runs}) reached; bracket [{lo:g}, {hi:g}]/s")
        mid = (lo + hi) / 2
        if await probe(mid):
            lo = mid
        else:
            hi = mid
    return done(f"bracket [{lo:g}, {hi:g}]/s within {rel_tol:.0%}")
