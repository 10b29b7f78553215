"""SLO verdicts per layout and the winner, with a reason for every loser (DESIGN.md "Selection").

A layout's score is taken at its highest passing load point (its SLO capacity when the sweep
searched for it): goodput per GPU (default objective), output tokens/s per GPU, or the lowest TTFT
p99 for `min_latency`. Every score carries an interval: the bootstrap interval over requests at
that point (loadgen/intervals.py), and, for a searched capacity, widened by how far the capacity
itself is uncertain (from the highest rate that passes with its whole interval inside the SLO to the
lowest that fails with its whole interval outside). Layouts whose intervals overlap the best
layout's are a tie, broken by fewer GPUs, then lower TTFT p99. Points stored without intervals (runs
from before) fall back to a fixed `TIE_TOLERANCE` band. A point that could not be judged
("unreliable") makes the decision not sound: `Selection.unjudged` names each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

# A load point's verdict (passed / failed / unjudged); this module's own Verdict is a layout's.
from orchestrator.verdict import Verdict as PointVerdict

TIE_TOLERANCE = 0.05  # relative; only for stored points without intervals
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
    intervals: dict[str, Any] | None = None  # loadgen.intervals.bootstrap_intervals
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

    @property
    def sound(self) -> bool:
        return not self.unjudged

    def to_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective,
            "winner": self.winner,
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
    """(highest rate that passes with every SLO interval inside its bound, lowest rate above the
    capacity that fails with an interval wholly outside; else the highest failing rate, None if none)."""
    cap = best.load or 0.0
    sure = [p.load for p in points if p.passed and p.slo_margin == "holds" and (p.load or 0.0) <= cap]
    low = max((r for r in sure if r is not None), default=0.0)
    above = [p for p in points if not p.passed and p.judged and (p.load or 0.0) > cap]
    broken = [p.load for p in above if p.slo_margin == "breaks" and p.load is not None]
    if broken:
        return low, min(broken)
    rates = [p.load for p in above if p.load is not None]
    return low, (max(rates) if rates else None)


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
    # a throughput at capacity scales with the rate: the capacity's uncertainty carries into the score
    lo *= cap_lo / p.load
    hi *= (cap_hi / p.load) if cap_hi is not None else 1.0
    return (lo, hi), (cap_lo, cap_hi)


def select(
    outcomes: Sequence[LayoutOutcome],
    objective: str = "goodput_per_gpu",
    tie_tolerance: float = TIE_TOLERANCE,
) -> Selection:
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
    with_iv = all(intervals[o.layout][0] is not None for o, _, _ in scored)
    top_o, _, top = max(scored, key=lambda t: t[2])
    top_iv = intervals[top_o.layout][0]

    def close(o: LayoutOutcome, s: float) -> bool:
        iv = intervals[o.layout][0]
        if with_iv and iv is not None and top_iv is not None:
            return iv[1] >= top_iv[0]  # intervals overlap the best layout's
        return abs(top - s) <= tie_tolerance * max(abs(top), 1e-12)

    tied = [(o, p, s) for o, p, s in scored if close(o, s)]
    tied.sort(key=lambda t: (t[0].gpus, t[1].ttft_p99_ms if t[1].ttft_p99_ms is not None else float("inf")))
    winner = tied[0]
    rule = "intervals overlap" if with_iv else f"within {tie_tolerance:.0%} (no intervals stored)"
    verdicts: list[Verdict] = []
    for o, p, s in sorted(scored, key=lambda t: -t[2]):
        iv, cap_iv = intervals[o.layout]
        shown = f"{s:.4g}" + (f" [{iv[0]:.4g}, {iv[1]:.4g}]" if iv else "")
        if o is winner[0]:
            reason = f"best {objective} {shown} at {p.label}"
            if len(tied) > 1:
                others = ", ".join(t[0].layout for t in tied[1:])
                reason += f"; tie ({rule}) with {others}, broken by fewer GPUs then TTFT p99"
        elif close(o, s):
            reason = f"tied with {winner[0].layout} ({objective} {shown}, {rule}) but lost the tie-break"
        else:
            reason = f"{objective} {shown} at {p.label} < winner's {winner[2]:.4g}"
            if iv and intervals[winner[0].layout][0]:
                reason += " (intervals apart)"
        verdicts.append(
            Verdict(
                o.layout, o.gpus, True, p.label, p.rate, s, p.ttft_p99_ms, p.itl_p99_ms, reason, iv, cap_iv
            )
        )
    return Selection(
        objective, winner[0].layout, tuple(t[0].layout for t in tied[1:]), tuple(verdicts + losers), unjudged
    )
