"""A sweep's candidates: its layouts times the combinations of the engine settings the spec lists
(plan/settings_grid.py), each resolved once by the engine and named by what varies
(`tp8 max_num_seqs=64 ngram k=4`); and which of them are worth serving.

Served engines cost minutes per candidate (deploy, warm-up, load points), so a settings search does not
serve every combination: the simulator predicts each one first (virtual time, seconds), and per layout
only the `LEADING_SETTINGS` best predicted settings are served, beside the pruning of clear losers
across layouts (pipeline/prune.py). Two, because the simulator orders settings of one layout far
better than it predicts their absolute numbers (the same cost model on both sides), yet a second
candidate guards against the cases where two settings are predicted within its error (tens of
percent) of each other. `--measure-all` serves every one. In virtual time the prediction is the
measurement: every combination is measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from orchestrator.candidate import AnyCandidate, Candidate
from orchestrator.catalog.types import GPUSpec, ModelConfig
from orchestrator.engines import Engine
from orchestrator.layout import Layout
from orchestrator.plan.settings_grid import settings_requests
from orchestrator.selection import LayoutOutcome, select
from orchestrator.spec.models import SweepSpec

LEADING_SETTINGS = 2


def sweep_candidates(spec: SweepSpec, layouts: Sequence[Layout], engine: Engine, gpu: GPUSpec,
                     cfg: ModelConfig) -> list[Candidate]:
    """Layouts x settings combinations, layout by layout; plain layout names when nothing is listed."""
    combos = [(engine.resolve_settings(request, gpu, cfg), label)
              for request, label in settings_requests(spec, cfg)]
    return [Candidate(layout, settings, f"{layout} {label}" if label else str(layout))
            for layout in layouts for settings, label in combos]


def leading_settings(candidates: Sequence[Candidate], predicted: Sequence[LayoutOutcome], objective: str,
                     keep: int = LEADING_SETTINGS) -> dict[str, str]:
    """candidate -> why it is not served: per layout, all but the `keep` best predicted settings."""
    by_name = {c.name: c for c in candidates}
    groups: dict[Layout, list[LayoutOutcome]] = {}
    for o in predicted:
        if o.layout in by_name:
            groups.setdefault(by_name[o.layout].layout, []).append(o)
    out: dict[str, str] = {}
    for layout, outcomes in groups.items():
        if len(outcomes) <= keep:
            continue
        scores = {v.layout: v.score for v in select(outcomes, objective).verdicts}
        ranked = sorted(outcomes, reverse=True,
                        key=lambda o: -math.inf if (x := scores[o.layout]) is None else x)
        leaders = [o.layout for o in ranked[:keep]]
        for o in ranked[keep:]:
            score = scores[o.layout]
            told = (f"predicted {objective} {score:.4g}" if score is not None
                    else "predicted to meet the SLO at no load")
            out[o.layout] = (f"{told}, behind the {keep} leading settings of {layout} ({', '.join(leaders)}; "
                             "simulator, virtual time); --measure-all serves it")
    return out


#: CPU seconds one load point takes in virtual time: 58 points of 8 candidates took 18.7 CPU s in a
#: 200-request capacity search (docs/speculative.md, "settings"); an estimate, printed as one.
VIRTUAL_POINT_S = 0.35
SERVED_STARTUP_S = 60.0  # an engine's start (engine.startup_s is the most it may take, not the usual)
CLOSED_POINT_S = 30.0  # a closed-loop point without a duration: its length depends on the engine


def expected_seconds(spec: SweepSpec, candidates: int, *, served: bool, points: int) -> float:
    """A rough time for the sweep, printed before it starts: per candidate `points` load points (the
    grid, or half the search's max_points), of the workload's duration each and a start-up when
    served, of VIRTUAL_POINT_S each in virtual time."""
    if not served:
        return candidates * points * VIRTUAL_POINT_S
    w = spec.workload
    rate = (w.rates_per_s or [1.0])[0] if w.loop == "open" else None
    per_point = w.duration_s or ((w.num_requests or 0) / rate if rate else CLOSED_POINT_S) or CLOSED_POINT_S
    return candidates * (points * (per_point + w.warmup_s) + SERVED_STARTUP_S)


def announcement(spec: SweepSpec, candidates: Sequence[AnyCandidate], *, served: bool,
                 grid: Sequence[float] | None) -> str:
    """What a sweep says before it starts: how many candidates, from what, and about how long."""
    layouts = len({c.layout for c in candidates})
    per_layout = len(candidates) // max(layouts, 1)
    points = len(grid) if grid else max(2, spec.workload.search.max_points // 2)
    seconds = expected_seconds(spec, len(candidates), served=served, points=points)
    noun = "layout" if layouts == 1 else "layouts"
    shape = f"{layouts} {noun} x {per_layout} settings" if per_layout > 1 else f"{layouts} {noun}"
    how = "served" if served else "virtual time"
    took = f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"
    return (f"{len(candidates)} candidates ({shape}), about {points} load points each, {how}: expected "
            f"about {took} (a rough estimate)")
