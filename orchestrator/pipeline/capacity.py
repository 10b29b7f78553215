"""A layout's SLO capacity: the highest request rate at which it meets the SLO, found by bracketing
and bisection (loadgen.search.next_rate, the same rule as `orch bench --search`) from a seed rate.

The measurement is injected (rate -> Probe), so the search runs the same against the virtual-time
simulator, served engines and a fake in the tests. Points already in the store are reused, so an
interrupted search resumes where it stopped. Rates are rounded to 4 significant digits so that
labels stay readable (`rate=9.844/s`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.loadgen.search import bracket, check_bounds, next_rate
from orchestrator.spec.models import SearchSpec

#: growth of the bracket from a seed: wide from the planner's rough guess, narrow from the simulator's
GROWTH_FROM_PLANNER = 2.0
GROWTH_FROM_SIMULATOR = 1.25


@dataclass(frozen=True)
class Probe:
    rate: float
    passed: bool
    verdict: str  # "" when it passed
    judged: bool = True  # False: the point could not be judged (unreliable), counted as a failure


@dataclass(frozen=True)
class Capacity:
    layout: str
    capacity_per_s: float | None  # highest passing rate; None: nothing passed down to the minimum
    bracket_per_s: tuple[float | None, float | None]  # (highest pass, lowest fail) around it
    tolerance_frac: float
    stopped_because: str
    seed_per_s: float
    seed_source: str
    limiting: str | None  # what failed at the lowest failing rate (e.g. "itl_p99_ms 109.9 > 100")
    points: tuple[Probe, ...]  # in the order measured

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["bracket_per_s"] = list(self.bracket_per_s)
        d["points"] = [asdict(p) for p in self.points]
        return d

    @property
    def verdict(self) -> str:
        """One line: the capacity with its bracket, or why it is zero."""
        hi = self.bracket_per_s[1]
        if self.capacity_per_s is None:
            return f"capacity 0: fails the SLO down to {self.points[-1].rate:g} req/s ({self.limiting})"
        if hi is None:
            return f"capacity >= {self.capacity_per_s:g} req/s ({self.stopped_because})"
        return f"capacity {self.capacity_per_s:g} req/s (fails at {hi:g}: {self.limiting})"


def round_rate(rate: float) -> float:
    return float(f"{rate:.4g}")


def limiting_metric(verdict: str) -> str:
    """'SLO not met: itl_p99_ms 109.9 > 100, ttft...' -> 'itl_p99_ms 109.9 > 100, ttft...'."""
    return re.sub(r"^SLO not met: ", "", verdict)


def search_capacity(
    layout: str,
    probe: Callable[[float], Probe],
    search: SearchSpec,
    seed_per_s: float,
    seed_source: str,
    growth: float = GROWTH_FROM_PLANNER,
) -> Capacity:
    """Bracket and bisect from the seed (clipped into the search bounds); see the module docstring."""
    lo_b, hi_b = search.min_rate_per_s, search.max_rate_per_s
    start = round_rate(min(max(search.start_rate_per_s or seed_per_s, lo_b), hi_b))
    check_bounds(start, lo_b, hi_b, search.tolerance_frac, search.max_points, growth)
    probes: list[Probe] = []
    while True:
        rate, why = next_rate(
            [(p.rate, p.passed) for p in probes],
            start_rate=start,
            min_rate=lo_b,
            max_rate=hi_b,
            rel_tol=search.tolerance_frac,
            max_runs=search.max_points,
            growth=growth,
        )
        if rate is None:
            break
        probes.append(probe(round_rate(rate)))
    lo, hi = bracket([(p.rate, p.passed) for p in probes])
    failing = [p for p in probes if not p.passed]
    first_fail = min(failing, key=lambda p: p.rate) if failing else None
    return Capacity(
        layout=layout,
        capacity_per_s=lo,
        bracket_per_s=(lo, hi),
        tolerance_frac=search.tolerance_frac,
        stopped_because=why,
        seed_per_s=start,
        seed_source=seed_source if search.start_rate_per_s is None else "spec (search.start_rate_per_s)",
        limiting=limiting_metric(first_fail.verdict) if first_fail else None,
        points=tuple(probes),
    )
