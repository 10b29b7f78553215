"""A layout's SLO capacity: the highest request rate (open loop) or concurrency (closed loop,
`workload.loop: closed`) at which it meets the SLO, found by bracketing and bisection from a seed
(loadgen.search.next_rate, the same rule as `orch bench --search`; next_concurrency for whole
numbers of requests in flight).

The measurement is injected (load -> Probe), so the search runs the same against the virtual-time
simulator, served engines and a fake in the tests. Points already in the store are reused, so an
interrupted search resumes where it stopped. Rates are rounded to 4 significant digits so that
labels stay readable (`rate=9.844/s`); concurrencies are whole (`concurrency=32`).

A point that could not be judged even when measured again (Probe.judged False: the served
simulation lost its clock) is unknown, not a failure: it never moves the bracket. When the rule
asks for it again, the search steps around it (a quarter of the bracket either side) or, with
nothing to step to, stops and says so; the sweep's decision is then not sound (exit code 8).

The capacity's interval starts at the highest sure pass (selection.capacity_interval). When the
search ends with only close passes at or below the capacity (their SLO intervals straddle a bound),
that lower end would be 0, which says "might fail at any load" of a layout that passed: so, within
max_points, the search steps down from the lowest pass by the growth factor until one passes surely
(or one fails, or the minimum is reached). Only when none could be had is the lower end 0, printed
as "no sure pass measured".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.loadgen.bench import LoadPoint
from orchestrator.loadgen.search import bracket, check_bounds, next_concurrency, next_rate
from orchestrator.spec.workload import SearchSpec, WorkloadSpec

#: growth of the bracket from a seed: wide from the planner's rough guess, narrow from the simulator's
GROWTH_FROM_PLANNER = 2.0
GROWTH_FROM_SIMULATOR = 1.25

Axis = Literal["rate", "concurrency"]
#: stored key suffix and printed unit per axis ("capacity_per_s", "capacity_concurrency")
SUFFIX: dict[str, str] = {"rate": "per_s", "concurrency": "concurrency"}
UNIT: dict[str, str] = {"rate": "req/s", "concurrency": "concurrent requests"}


@dataclass(frozen=True)
class Probe:
    load: float  # requests/s, or requests in flight (whole) for a closed loop
    passed: bool
    verdict: str  # "" when it passed
    judged: bool = True  # False: could not be judged even when measured again: unknown, not a failure
    sure: bool = True  # False: a pass only just (an SLO interval straddles its bound, slo_margin "close")


@dataclass(frozen=True)
class Capacity:
    layout: str
    capacity: float | None  # highest passing load; None: nothing passed down to the minimum
    bracket: tuple[float | None, float | None]  # (highest pass, lowest fail) around it, judged points only
    tolerance_frac: float
    stopped_because: str
    seed: float
    seed_source: str
    limiting: str | None  # what failed at the lowest failing load (e.g. "itl_p99_ms 109.9 > 100")
    points: tuple[Probe, ...]  # in the order measured
    by: Axis = "rate"

    @property
    def unjudged(self) -> tuple[float, ...]:
        return tuple(p.load for p in self.points if not p.judged)

    def to_dict(self) -> dict[str, Any]:
        sfx = SUFFIX[self.by]
        return {
            "layout": self.layout,
            "by": self.by,
            f"capacity_{sfx}": self.capacity,
            f"bracket_{sfx}": list(self.bracket),
            "tolerance_frac": self.tolerance_frac,
            "stopped_because": self.stopped_because,
            f"seed_{sfx}": self.seed,
            "seed_source": self.seed_source,
            "limiting": self.limiting,
            "points": [
                {self.by: p.load, "passed": p.passed, "verdict": p.verdict, "judged": p.judged,
                 "sure": p.sure}
                for p in self.points
            ],
            "unjudged": list(self.unjudged),
        }

    @property
    def verdict(self) -> str:
        """One line: the capacity with its bracket, or why it is zero."""
        hi, unit = self.bracket[1], UNIT[self.by]
        if self.capacity is None:
            if not any(p.judged for p in self.points):
                return f"capacity unknown: no point could be judged ({self.stopped_because})"
            lowest = min(p.load for p in self.points if p.judged)
            return f"capacity 0: fails the SLO down to {lowest:g} {unit} ({self.limiting})"
        if hi is None:
            return f"capacity >= {self.capacity:g} {unit} ({self.stopped_because})"
        return f"capacity {self.capacity:g} {unit} (fails at {hi:g}: {self.limiting})"


def stored_capacity(d: dict[str, Any]) -> tuple[Axis, float | None, list[float | None], float]:
    """(axis, capacity, bracket, seed) of a stored capacity search (to_dict), either axis."""
    by: Axis = "concurrency" if d.get("by") == "concurrency" else "rate"
    sfx = SUFFIX[by]
    return by, d[f"capacity_{sfx}"], d[f"bracket_{sfx}"], d[f"seed_{sfx}"]


def load_label(by: Axis, load: float) -> str:
    """The load point's label as stored: `rate=9.844/s` or `concurrency=32`."""
    return (LoadPoint(concurrency=int(load)) if by == "concurrency" else LoadPoint(rate=load)).label


def load_axis(workload: WorkloadSpec) -> Axis:
    return "concurrency" if workload.loop == "closed" else "rate"


def replays_trace(workload: WorkloadSpec) -> bool:
    """An open-loop trace: one load point at the trace's own timestamps (`time_scale` applied), no
    rate to search (the spec refuses rates for it)."""
    return workload.kind == "trace" and workload.loop != "closed"


def load_grid(workload: WorkloadSpec, rates: Sequence[float] | None = None) -> list[float] | None:
    """The fixed grid of loads to measure (`--rates` over the spec's), or None: search the capacity.
    A replayed trace is one point (its load value unused: `load_point`)."""
    if workload.loop == "closed":
        return [float(c) for c in workload.concurrency] if workload.concurrency else None
    if replays_trace(workload):
        return [0.0]
    return list(rates or workload.rates_per_s or []) or None


def load_point(workload: WorkloadSpec, load: float) -> LoadPoint:
    if workload.loop == "closed":
        return LoadPoint(concurrency=int(load))
    return LoadPoint(trace=True) if replays_trace(workload) else LoadPoint(rate=load)


def round_rate(rate: float) -> float:
    return float(f"{rate:.4g}")


def limiting_metric(verdict: str) -> str:
    """'SLO not met: itl_p99_ms 109.9 > 100, ttft...' -> 'itl_p99_ms 109.9 > 100, ttft...'."""
    return re.sub(r"^SLO not met: ", "", verdict)


def _step_around(by: Axis, judged: Sequence[tuple[float, bool]], unknown: set[float]) -> float | None:
    """Another load inside the bracket than the unjudged one the rule asked for, or None."""
    lo, hi = bracket(judged)
    if lo is None or hi is None:
        return None  # still bracketing: nothing known on the other side to step towards
    for frac in (0.25, 0.75):
        x = lo + frac * (hi - lo)
        cand = float(round(x)) if by == "concurrency" else round_rate(x)
        if lo < cand < hi and cand not in unknown:
            return cand
    return None


def _step_down(by: Axis, load: float, floor: float, growth: float) -> float | None:
    if by == "concurrency":
        x = float(max(min(load - 1, int(load / growth)), floor))
    else:
        x = round_rate(max(load / growth, floor))
    return x if x < load else None


def _sure_pass(by: Axis, probe: Callable[[float], Probe], probes: list[Probe], max_points: int,
               floor: float, growth: float) -> str:
    """Measure lower loads (appended to `probes`) until one passes surely; module docstring. Returns
    the labels measured, comma separated ("" when none was needed or possible)."""
    measured: list[str] = []
    while len(probes) < max_points:
        lo = bracket([(p.load, p.passed) for p in probes if p.judged])[0]
        passes = [p for p in probes if p.judged and p.passed and lo is not None and p.load <= lo]
        if not passes or any(p.sure for p in passes) or (measured and not probes[-1].passed):
            break
        load = _step_down(by, min(p.load for p in passes), floor, growth)
        if load is None or any(p.load == load for p in probes):
            break
        probes.append(probe(load))
        measured.append(load_label(by, load))
    return ", ".join(measured)


def search_capacity(
    layout: str,
    probe: Callable[[float], Probe],
    search: SearchSpec,
    seed: float,
    seed_source: str,
    growth: float = GROWTH_FROM_PLANNER,
    by: Axis = "rate",
) -> Capacity:
    """Bracket and bisect from the seed (clipped into the search bounds); see the module docstring."""
    if by == "concurrency":
        lo_b, hi_b = float(search.min_concurrency), float(search.max_concurrency)
        given: float | None = search.start_concurrency
        start = float(round(min(max(given or seed, lo_b), hi_b)))
    else:
        lo_b, hi_b, given = search.min_rate_per_s, search.max_rate_per_s, search.start_rate_per_s
        start = round_rate(min(max(given or seed, lo_b), hi_b))
    check_bounds(start, lo_b, hi_b, search.tolerance_frac, search.max_points, growth)
    probes: list[Probe] = []
    while True:
        judged = [(p.load, p.passed) for p in probes if p.judged]
        unknown = {p.load for p in probes if not p.judged}
        budget = search.max_points - len(unknown)  # an unjudged point was measured: it counts
        load: float | None
        if by == "concurrency":
            c, why = next_concurrency(judged, start=int(start), min_c=int(lo_b), max_c=int(hi_b),
                                      rel_tol=search.tolerance_frac, max_runs=budget, growth=growth)
            load = None if c is None else float(c)
        else:
            r, why = next_rate(judged, start_rate=start, min_rate=lo_b, max_rate=hi_b,
                               rel_tol=search.tolerance_frac, max_runs=budget, growth=growth)
            load = None if r is None else round_rate(r)
        if load is not None and load in unknown:
            asked = load
            load = _step_around(by, judged, unknown)
            if load is None:
                why = (f"{load_label(by, asked)} could not be judged even when measured again, and there "
                       "is nothing left to step around it to")
        if load is None or len(probes) >= search.max_points:
            why = why or f"max_points ({search.max_points}) reached"
            break
        probes.append(probe(load))
    extra = _sure_pass(by, probe, probes, search.max_points, lo_b, growth)
    if extra:
        why += f"; then {extra} measured below, the passes above being close to the SLO"
    lo, hi = bracket([(p.load, p.passed) for p in probes if p.judged])
    failing = [p for p in probes if p.judged and not p.passed]
    first_fail = min(failing, key=lambda p: p.load) if failing else None
    given_source = f"spec (search.{'start_concurrency' if by == 'concurrency' else 'start_rate_per_s'})"
    return Capacity(
        layout=layout,
        capacity=lo,
        bracket=(lo, hi),
        tolerance_frac=search.tolerance_frac,
        stopped_because=why,
        seed=start,
        seed_source=seed_source if given is None else given_source,
        limiting=limiting_metric(first_fail.verdict) if first_fail else None,
        points=tuple(probes),
        by=by,
    )
