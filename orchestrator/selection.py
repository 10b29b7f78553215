"""SLO verdicts per layout and the winner, with a reason for every loser (DESIGN.md "Selection").

A layout's score is taken at its highest passing load point (its SLO capacity when the sweep
searched for it): goodput per GPU (default objective), output tokens/s per GPU, or the lowest TTFT
p99 for `min_latency`. Every score carries an interval: the point's interval (loadgen/intervals.py:
batch means over time batches), and, for a searched capacity, widened by how far the capacity itself
is uncertain (from the highest rate that passes with its whole interval inside the SLO to the lowest
that fails with its whole interval outside), the two relative half-widths added in quadrature (they
are independent: one is the point's noise, the other the search's). Which layouts that separates,
and what decides among the rest, is separation.py: layouts whose intervals overlap the best one's,
or whose points hold too few requests to tell, are tied; a tie goes to the first rule that
separates them (fewer GPUs where the counts differ, then the lower TTFT p99 where it is lower beyond
noise, else the objective's point estimate, within noise), and only that rule is given. A point that
could not be judged ("unreliable") makes the decision not sound: `Selection.unjudged` names each.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from orchestrator.separation import Contender, decide, separation

# A load point's verdict (passed / failed / unjudged); this module's own Verdict is a layout's.
from orchestrator.verdict import Verdict as PointVerdict

Status = Literal["rejected", "failed", "measured", "pending", "pruned"]


@dataclass(frozen=True)
class PointOutcome:
    label: str
    rate: float | None
    passed: bool
    verdict: str
    goodput_per_gpu: float
    output_tokens_per_s_per_gpu: float
    ttft_p99_ms: float | None
    itl_p99_ms: float | None
    intervals: dict[str, Any] | None = None  # loadgen.intervals.point_intervals
    slo_margin: str | None = None  # holds | close | breaks
    concurrency: int | None = None  # a closed loop's requests in flight (rate is then None)

    @property
    def judged(self) -> bool:
        return PointVerdict.of(self.passed, self.verdict).judged

    @property
    def load(self) -> float | None:
        """What the point is at: its rate (open loop) or its concurrency (closed loop)."""
        if self.rate is not None:
            return self.rate
        return None if self.concurrency is None else float(self.concurrency)


@dataclass(frozen=True)
class LayoutOutcome:
    layout: str
    gpus: int
    status: Status
    reason: str | None
    points: tuple[PointOutcome, ...]
    searched: bool = False  # the points are a capacity search (not a fixed grid)


@dataclass(frozen=True)
class Verdict:
    layout: str
    gpus: int
    passed: bool
    best_point: str | None  # label of the highest passing load point
    best_rate: float | None
    score: float | None
    ttft_p99_ms: float | None
    itl_p99_ms: float | None
    reason: str  # why it won, tied or lost
    score_interval: tuple[float, float] | None = None
    capacity_interval: tuple[float, float | None] | None = None  # req/s, searched layouts only


@dataclass(frozen=True)
class Selection:
    objective: str
    winner: str | None
    tie_with: tuple[str, ...]
    verdicts: tuple[Verdict, ...]
    unjudged: tuple[str, ...] = ()  # "layout label" of each point that could not be judged
    # What picked the winner: "intervals apart" (from every other layout), or the tie-break that
    # decided a tie ("fewer GPUs (4 against 8)", "lower TTFT p99 (... beyond noise)", "the higher point
    # estimate, within noise (...)"); "" without one
    decided_by: str = ""

    @property
    def sound(self) -> bool:
        return not self.unjudged

    def to_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective,
            "winner": self.winner,
            "decided_by": self.decided_by,
            "tie_with": list(self.tie_with),
            "verdicts": [asdict(v) for v in self.verdicts],
            "unjudged": list(self.unjudged),
            "sound": self.sound,
        }


_INTERVAL_KEY = {"throughput_per_gpu": "output_throughput_per_gpu", "min_latency": "ttft_p99_ms"}


def _score(p: PointOutcome, objective: str) -> float:
    if objective == "throughput_per_gpu":
        return p.output_tokens_per_s_per_gpu
    if objective == "min_latency":
        return -(p.ttft_p99_ms or float("inf"))
    return p.goodput_per_gpu


def _best_point(points: Sequence[PointOutcome]) -> PointOutcome | None:
    """The passing point at the highest rate below every failing rate (the last passing point for
    concurrency sweeps); a pass above a failure is noise and does not count."""
    fails = [p.load for p in points if not p.passed and p.judged and p.load is not None]
    first_fail = min(fails) if fails else None
    passing = [p for p in points if p.passed and (first_fail is None or (p.load or 0.0) < first_fail)]
    if not passing:
        return None
    return max(passing, key=lambda p: (p.load if p.load is not None else 0.0, p.goodput_per_gpu))


def capacity_interval(points: Sequence[PointOutcome], best: PointOutcome) -> tuple[float, float | None]:
    """Where the capacity may lie, from the points' SLO intervals. Its low end: the highest load that
    passes with every SLO interval inside its bound (a sure pass), moved up toward the first pass
    above it that is only close, to where the interval's upper end, drawn straight between the two,
    reaches the bound. Its high end: the lowest load above the capacity that fails with an interval
    wholly outside (a sure fail), moved down toward the fail or pass below it to where the interval's
    lower end reaches the bound. Straight lines between measured loads assume what the search does
    (each percentile grows with the load); without stored bounds (runs from before) the sure loads
    themselves. No sure fail: the highest failing load, None without one."""
    cap = best.load or 0.0
    ordered = sorted((p for p in points if p.load is not None and p.judged), key=lambda p: p.load or 0.0)
    sure = [p for p in ordered if p.passed and p.slo_margin == "holds" and (p.load or 0.0) <= cap]
    low = 0.0
    if sure:
        base = sure[-1]
        nxt = next((p for p in ordered if p.passed and (base.load or 0.0) < (p.load or 0.0) <= cap), None)
        low = base.load or 0.0 if nxt is None else _reach(base, nxt, upper_end=True)
    above = [p for p in ordered if not p.passed and (p.load or 0.0) > cap]
    broken = [p for p in above if p.slo_margin == "breaks"]
    if broken:
        edge = broken[0]
        prev = [p for p in ordered if cap <= (p.load or 0.0) < (edge.load or 0.0)]
        high: float | None = edge.load if not prev else _reach(prev[-1], edge, upper_end=False)
    else:
        high = max((p.load for p in above if p.load is not None), default=None)
    if best.rate is None:  # a closed loop's whole requests in flight
        return float(math.floor(low)), None if high is None else float(math.ceil(high))
    return _sig(low), None if high is None else _sig(high)


def _sig(x: float) -> float:
    """Four significant digits, as the search prints its loads (an interpolated end carries no more)."""
    return float(f"{x:.4g}")


def _reach(a: PointOutcome, b: PointOutcome, *, upper_end: bool) -> float:
    """The load between a and b (a's lower) where an SLO interval's upper end (or lower end), straight
    between the two, first reaches its bound; b's load where no key says (no stored bounds)."""
    la, lb = a.load or 0.0, b.load or 0.0
    bounds = (a.intervals or {}).get("slo") or {}
    found = []
    for key, bound in bounds.items():
        ia, ib = (a.intervals or {}).get(key), (b.intervals or {}).get(key)
        if not ia or not ib:
            continue
        va, vb = (float(ia[1]), float(ib[1])) if upper_end else (float(ia[0]), float(ib[0]))
        if va <= float(bound) < vb:  # this end crosses the bound between the two loads
            found.append(la + (float(bound) - va) * (lb - la) / (vb - va))
    if not found:
        return la if upper_end else lb
    return min(max(min(found), la), lb)


def score_interval(
    o: LayoutOutcome, p: PointOutcome, objective: str, score: float
) -> tuple[tuple[float, float] | None, tuple[float, float | None] | None]:
    """The score's interval (None without stored intervals) and, for a search, the capacity's."""
    key = _INTERVAL_KEY.get(objective, "goodput_per_gpu")
    iv = (p.intervals or {}).get(key)
    if not iv:
        return None, None
    lo, hi = (-iv[1], -iv[0]) if objective == "min_latency" else (iv[0], iv[1])
    lo, hi = min(lo, score), max(hi, score)
    if not o.searched or not p.load or objective == "min_latency":
        return (lo, hi), None
    cap_lo, cap_hi = capacity_interval(o.points, p)
    # A throughput at capacity scales with the rate: the capacity's uncertainty carries into the
    # score. Relative half-widths in quadrature: the point's noise and the search's are independent.
    if score <= 0:
        return (lo, hi), (cap_lo, cap_hi)
    down = math.hypot((score - lo) / score, 1 - cap_lo / p.load)
    up = math.hypot((hi - score) / score, (cap_hi / p.load - 1) if cap_hi is not None else 0.0)
    return (max(score * (1 - down), 0.0), score * (1 + up)), (cap_lo, cap_hi)


def select(outcomes: Sequence[LayoutOutcome], objective: str = "goodput_per_gpu") -> Selection:
    scored: list[tuple[LayoutOutcome, PointOutcome, float]] = []
    losers: list[Verdict] = []
    unjudged = tuple(f"{o.layout} {p.label}" for o in outcomes for p in o.points if not p.judged)
    for o in outcomes:
        if o.status != "measured":
            what = {"rejected": "rejected by the planner", "pruned": "pruned by the model"}.get(
                o.status, o.status
            )
            losers.append(
                Verdict(
                    o.layout, o.gpus, False, None, None, None, None, None,
                    f"{what}: {o.reason or 'no reason recorded'}",
                )
            )
            continue
        best = _best_point(o.points)
        if best is None:
            worst = next((p for p in o.points if not p.passed and p.judged), None)
            why = (
                f"no load point met the SLO (first failure: {worst.label}: {worst.verdict})"
                if worst
                else ("no load point could be judged" if o.points else "no load point was measured")
            )
            if o.searched and worst is not None:
                lowest = min((p for p in o.points if p.judged), key=lambda p: p.load or 0.0)
                why = (
                    f"capacity 0: fails the SLO down to {lowest.label} "
                    f"({lowest.verdict.removeprefix('SLO not met: ')})"
                )
            losers.append(Verdict(o.layout, o.gpus, False, None, None, None, None, None, why))
            continue
        scored.append((o, best, _score(best, objective)))
    if not scored:
        return Selection(objective, None, (), tuple(losers), unjudged)
    intervals = {o.layout: score_interval(o, p, objective, s) for o, p, s in scored}
    contenders = {o.layout: _contender(o, p, s, intervals[o.layout][0]) for o, p, s in scored}
    d = decide(list(contenders.values()), ttft_breaks_ties=objective != "min_latency")
    top = max(contenders.values(), key=lambda c: c.score)
    tied_names = {c.name for c in d.tied}
    verdicts: list[Verdict] = []
    for o, p, s in sorted(scored, key=lambda t: -t[2]):
        iv, cap_iv = intervals[o.layout]
        shown = f"{s:.4g}" + (f" [{iv[0]:.4g}, {iv[1]:.4g}]" if iv else "")
        if o.layout == d.winner.name:
            head = "best " if o.layout == top.name else ""
            reason = f"{head}{objective} {shown} at {p.label}"
            if d.tied:
                others = ", ".join(c.name for c in d.tied)
                reason += f"; tied with {others} ({d.tie_rule}); decided by {d.decided_by}"
            elif len(scored) > 1:
                reason += "; apart from every other layout"
        elif o.layout in tied_names:
            rule = separation(top, contenders[o.layout] if o.layout != top.name else d.winner)[1]
            reason = (f"tied with {d.winner.name} ({objective} {shown} at {p.label}, {rule}); "
                      f"{d.lost_because[o.layout]}")
        else:
            _apart, why = separation(contenders[o.layout], top)
            whose = "winner's" if top.name == d.winner.name else f"{top.name}'s"
            reason = f"{objective} {shown} at {p.label} < {whose} {top.score:.4g} ({why})"
        verdicts.append(
            Verdict(
                o.layout, o.gpus, True, p.label, p.rate, s, p.ttft_p99_ms, p.itl_p99_ms, reason, iv, cap_iv
            )
        )
    decided = d.decided_by or "the only layout measured"
    if not d.decided_by and len(scored) > 1:
        runner_up = max((c for c in contenders.values() if c is not d.winner), key=lambda c: c.score)
        rule = separation(d.winner, runner_up)[1]
        decided = f"the best {objective}, {rule} from the next ({runner_up.name})"
    return Selection(
        objective, d.winner.name, tuple(c.name for c in d.tied), tuple(verdicts + losers), unjudged, decided
    )


def _contender(o: LayoutOutcome, p: PointOutcome, score: float, iv: tuple[float, float] | None) -> Contender:
    ivs = p.intervals or {}
    ttft = ivs.get("ttft_p99_ms")
    requests = ivs.get("requests")
    return Contender(
        o.layout, o.gpus, score, iv, int(requests) if requests is not None else None, p.ttft_p99_ms,
        (float(ttft[0]), float(ttft[1])) if ttft else None,
    )
