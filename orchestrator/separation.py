"""Which layouts a measurement separates, and what decides among the rest (selection.py's rules).

- Two layouts are *apart* when their score intervals do not overlap; both points must hold enough
  requests for their intervals to be trusted (loadgen.intervals.MIN_REQUESTS_TO_SEPARATE): otherwise
  "not enough requests to separate", never "intervals apart". Points stored without intervals (runs
  from before) fall back to a relative band (`TIE_TOLERANCE`).
- Every layout not apart from the best-scoring one is tied with it. The tie is decided by the first
  rule that separates the candidates, and only that rule is given as the reason: fewer GPUs (only
  when the GPU counts differ), then the lower TTFT p99 when it is lower beyond noise (its interval
  apart from every other candidate's, or without intervals lower by more than the band), else the
  higher point estimate of the objective, within noise. A TTFT p99 lower only within noise decides
  nothing: it is a secondary metric that the SLO already bounds, and letting it pick would hand the
  win to a layout the user's own objective puts lower (llama70b-h200: tp8 at 1.68 goodput per GPU
  over tp2x4 at 2.46, on TTFT p99 638 against 790 ms, their intervals overlapping). A tie-break that
  decides nothing (equal GPU counts, TTFT within noise) is not printed as the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.loadgen.intervals import MIN_REQUESTS_TO_SEPARATE

TIE_TOLERANCE = 0.05  # relative; only for stored points without intervals

Interval = tuple[float, float]


@dataclass(frozen=True)
class Contender:
    """One layout's best point, as the tie rules see it."""

    name: str
    gpus: int
    score: float
    interval: Interval | None  # of the score
    requests: int | None  # the point's window requests (None: not stored)
    ttft_p99_ms: float | None
    ttft_interval: Interval | None


@dataclass(frozen=True)
class Decision:
    winner: Contender
    tied: tuple[Contender, ...]  # the others tied with the best score (not apart from it)
    tie_rule: str  # why they count as tied: "intervals overlap", "not enough requests ..."
    decided_by: str  # what picked the winner; "" when nothing was tied
    lost_because: dict[str, str]  # tied loser -> the rule that beat it


def too_few(*cs: Contender) -> bool:
    return any(c.requests is not None and c.requests < MIN_REQUESTS_TO_SEPARATE for c in cs)


def separation(a: Contender, b: Contender) -> tuple[bool, str]:
    """(are a and b apart on their scores?, the rule that said so)."""
    if too_few(a, b):
        counts = " and ".join(str(c.requests) for c in (a, b) if c.requests is not None)
        return False, (f"not enough requests to separate: {counts} in the measurement window, "
                       f"{MIN_REQUESTS_TO_SEPARATE} needed")
    if a.interval is not None and b.interval is not None:
        apart = a.interval[0] > b.interval[1] or b.interval[0] > a.interval[1]
        return apart, "intervals apart" if apart else "intervals overlap"
    apart = abs(a.score - b.score) > TIE_TOLERANCE * max(abs(a.score), abs(b.score), 1e-12)
    band = f"{TIE_TOLERANCE:.0%}"
    return apart, (f"more than {band} apart" if apart else f"within {band}") + " (no intervals stored)"


def _ttft_apart(a: Contender, b: Contender) -> bool:
    """Is a's TTFT p99 lower than b's beyond noise?"""
    if a.ttft_p99_ms is None or b.ttft_p99_ms is None or a.ttft_p99_ms >= b.ttft_p99_ms:
        return False
    if a.ttft_interval is not None and b.ttft_interval is not None:
        return not too_few(a, b) and a.ttft_interval[1] < b.ttft_interval[0]
    return (b.ttft_p99_ms - a.ttft_p99_ms) > TIE_TOLERANCE * b.ttft_p99_ms


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def decide(contenders: Sequence[Contender], *, ttft_breaks_ties: bool = True) -> Decision:
    """The winner among `contenders` (module docstring); `ttft_breaks_ties` False when the objective is
    the TTFT itself."""
    top = max(contenders, key=lambda c: c.score)
    tied, rule = [], ""
    for c in contenders:
        if c is top:
            continue
        apart, why = separation(top, c)
        if not apart:
            tied.append(c)
            rule = rule or why
    group = [top, *tied]
    if not tied:
        return Decision(top, (), "", "", {})
    lost: dict[str, str] = {}
    fewest = min(c.gpus for c in group)
    for c in group:
        if c.gpus > fewest:
            lost[c.name] = f"{{winner}} uses fewer GPUs ({fewest} against {c.gpus})"
    left = [c for c in group if c.gpus == fewest]
    if len(left) == 1:
        others = sorted({c.gpus for c in group if c.gpus > fewest})
        return Decision(left[0], tuple(c for c in group if c is not left[0]), rule,
                        f"fewer GPUs ({fewest} against {', '.join(map(str, others))})", _named(lost, left[0]))
    if ttft_breaks_ties:
        quickest = min(left, key=lambda c: c.ttft_p99_ms if c.ttft_p99_ms is not None else float("inf"))
        if all(_ttft_apart(quickest, c) for c in left if c is not quickest):
            slowest = max(_ms(c.ttft_p99_ms) for c in left if c is not quickest)
            for c in left:
                if c is not quickest:
                    lost[c.name] = (f"{{winner}} has the lower TTFT p99 ({_ms(quickest.ttft_p99_ms)} against "
                                    f"{_ms(c.ttft_p99_ms)} ms, beyond noise)")
            why = f"lower TTFT p99 ({_ms(quickest.ttft_p99_ms)} against {slowest} ms, beyond noise)"
            return Decision(quickest, tuple(c for c in group if c is not quickest), rule, why,
                            _named(lost, quickest))
    best = max(left, key=lambda c: c.score)
    same = f"{fewest} GPUs each" + ("; TTFT p99 not apart" if ttft_breaks_ties else "")
    for c in left:
        if c is not best:
            lost[c.name] = (f"nothing separates them ({same}); {{winner}}'s point estimate is higher, "
                            "within noise")
    return Decision(best, tuple(c for c in group if c is not best), rule,
                    f"the higher point estimate, within noise (nothing else separates them: {same})",
                    _named(lost, best))


def _named(lost: dict[str, str], winner: Contender) -> dict[str, str]:
    return {k: v.replace("{winner}", winner.name) for k, v in lost.items() if k != winner.name}
