"""Measure what matters: before deploying, skip layouts the simulator predicts to lose by a clear
margin, and account for the time the sweep saved against an exhaustive grid.

A layout is pruned when its predicted score (the selection's objective, from the same load points
run through the simulated engine in virtual time) is below the predicted winner's by more than
`PRUNE_MARGIN` (a factor), or when it is predicted to meet the SLO at no load while another layout
does. The margin is wide on purpose: the simulator's errors against real engines are tens of percent
(the predicted-vs-measured column), so only clear losers are skipped. `--measure-all` measures them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.selection import LayoutOutcome, select

PRUNE_MARGIN = 1.5


def dominated(
    predicted: Sequence[LayoutOutcome], objective: str, margin: float = PRUNE_MARGIN
) -> dict[str, str]:
    """layout -> why it is pruned, for the predicted outcomes that lose by more than `margin`."""
    sel = select(predicted, objective)
    if sel.winner is None:
        return {}
    scores = {v.layout: v for v in sel.verdicts}
    best = scores[sel.winner]
    assert best.score is not None
    out: dict[str, str] = {}
    for o in predicted:
        v = scores[o.layout]
        if o.layout == sel.winner or o.status != "measured":
            continue
        if v.score is None:
            out[o.layout] = (f"predicted to meet the SLO at no load ({v.reason}) while {sel.winner} "
                             f"does; --measure-all measures it")
            continue
        if objective == "min_latency":  # scores are negative latencies
            clear = -v.score > -best.score * margin
        else:
            clear = v.score * margin < best.score
        if clear:
            out[o.layout] = (f"predicted {objective} {v.score:.4g} at {v.best_point}, more than "
                             f"{margin:g}x below {sel.winner}'s {best.score:.4g} at {best.best_point} "
                             "(simulator, virtual time); --measure-all measures it")
    return out


@dataclass(frozen=True)
class Timing:
    wall_s: float
    points_measured: int
    layouts_measured: int
    exhaustive_points: int
    exhaustive_layouts: int
    exhaustive_s: float
    definition: str


def exhaustive_grid_points(
    loads: Sequence[float], tolerance_frac: float, searched: bool, whole: bool = False
) -> int:
    """Points per layout of the grid that answers to the same tolerance without a search, over the
    loads the sweep measured: for rates a geometric grid in steps of (1 + tolerance); for closed-loop
    concurrencies (`whole`) the distinct whole numbers a grid needs, stepping by the largest whole
    step within the tolerance and at least 1 (the capacity search's own stopping rule,
    loadgen.search.next_concurrency), so small concurrencies count each integer once."""
    rs = [r for r in loads if r > 0]
    if not rs:
        return 0
    if not searched:
        return len(set(rs))
    lo, hi = min(rs), max(rs)
    if whole:
        c, top, n = max(1, round(lo)), round(hi), 1  # n counts the top point itself
        while c < top:
            n += 1
            c += max(1, math.floor(tolerance_frac * c))
        return n
    return math.ceil(math.log(hi / lo) / math.log1p(tolerance_frac)) + 1 if hi > lo else 1


def timing(
    wall_s: float, layout_overhead_s: Sequence[float], point_s: Sequence[float], candidates: int,
    grid_points: int, searched: bool, whole: bool = False,
) -> Timing:
    """The sweep's own wall time, and an estimate of the exhaustive grid's from the measured mean
    cost of a layout (deploy, warm-up, teardown) and of a load point."""
    per_layout = sum(layout_overhead_s) / len(layout_overhead_s) if layout_overhead_s else 0.0
    per_point = sum(point_s) / len(point_s) if point_s else 0.0
    exhaustive = candidates * (per_layout + grid_points * per_point)
    what = "every candidate layout (pruned ones too) at " + (
        ("every whole concurrency over the measured range, in steps within the tolerance (at least 1)"
         if whole else "a geometric grid in steps of (1 + tolerance) over the measured rates")
        if searched
        else "every grid rate"
    )
    return Timing(wall_s, len(point_s), len(layout_overhead_s), grid_points * candidates, candidates,
                  exhaustive, what + "; cost per layout and per point: the means measured in this sweep")
