"""SLO verdicts per layout and the winner, with a reason for every loser (DESIGN.md "Selection").

A layout's score is taken at its highest passing load point: goodput per GPU (default objective),
output tokens/s per GPU, or the lowest TTFT p99 for `min_latency`. Layouts whose scores are within
`tie_tolerance` of the best are a tie, broken by fewer GPUs, then lower TTFT p99.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

TIE_TOLERANCE = 0.05  # relative; below it two layouts are within measurement noise
Status = Literal["rejected", "failed", "measured", "pending"]


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


@dataclass(frozen=True)
class LayoutOutcome:
    layout: str
    gpus: int
    status: Status
    reason: str | None
    points: tuple[PointOutcome, ...]


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


@dataclass(frozen=True)
class Selection:
    objective: str
    winner: str | None
    tie_with: tuple[str, ...]
    verdicts: tuple[Verdict, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective,
            "winner": self.winner,
            "tie_with": list(self.tie_with),
            "verdicts": [asdict(v) for v in self.verdicts],
        }


def _score(p: PointOutcome, objective: str) -> float:
    if objective == "throughput_per_gpu":
        return p.output_tokens_per_s_per_gpu
    if objective == "min_latency":
        return -(p.ttft_p99_ms or float("inf"))
    return p.goodput_per_gpu


def _best_point(points: Sequence[PointOutcome]) -> PointOutcome | None:
    """The passing point at the highest rate (the last passing point for concurrency sweeps)."""
    passing = [p for p in points if p.passed]
    if not passing:
        return None
    return max(passing, key=lambda p: (p.rate if p.rate is not None else 0.0, p.goodput_per_gpu))


def select(
    outcomes: Sequence[LayoutOutcome],
    objective: str = "goodput_per_gpu",
    tie_tolerance: float = TIE_TOLERANCE,
) -> Selection:
    scored: list[tuple[LayoutOutcome, PointOutcome, float]] = []
    losers: list[Verdict] = []
    for o in outcomes:
        if o.status != "measured":
            what = "rejected by the planner" if o.status == "rejected" else o.status
            losers.append(
                Verdict(
                    o.layout,
                    o.gpus,
                    False,
                    None,
                    None,
                    None,
                    None,
                    None,
                    f"{what}: {o.reason or 'no reason recorded'}",
                )
            )
            continue
        best = _best_point(o.points)
        if best is None:
            worst = next((p for p in o.points if not p.passed), None)
            why = (
                f"no load point met the SLO (first failure: {worst.label}: {worst.verdict})"
                if worst
                else "no load point was measured"
            )
            losers.append(Verdict(o.layout, o.gpus, False, None, None, None, None, None, why))
            continue
        scored.append((o, best, _score(best, objective)))
    if not scored:
        return Selection(objective, None, (), tuple(losers))
    top = max(s for _, _, s in scored)

    def close(s: float) -> bool:
        return abs(top - s) <= tie_tolerance * max(abs(top), 1e-12)

    tied = [(o, p, s) for o, p, s in scored if close(s)]
    tied.sort(key=lambda t: (t[0].gpus, t[1].ttft_p99_ms if t[1].ttft_p99_ms is not None else float("inf")))
    winner = tied[0]
    verdicts: list[Verdict] = []
    for o, p, s in sorted(scored, key=lambda t: -t[2]):
        if o is winner[0]:
            reason = f"best {objective} {s:.4g} at {p.label}"
            if len(tied) > 1:
                others = ", ".join(t[0].layout for t in tied[1:])
                reason += (
                    f"; tie within {tie_tolerance:.0%} with {others}, broken by fewer GPUs then TTFT p99"
                )
        elif close(s):
            reason = f"tied with {winner[0].layout} ({objective} {s:.4g}) but lost the tie-break"
        else:
            reason = f"{objective} {s:.4g} at {p.label} < winner's {winner[2]:.4g}"
        verdicts.append(
            Verdict(o.layout, o.gpus, True, p.label, p.rate, s, p.ttft_p99_ms, p.itl_p99_ms, reason)
        )
    return Selection(
        objective, winner[0].layout, tuple(t[0].layout for t in tied[1:]), tuple(verdicts + losers)
    )
