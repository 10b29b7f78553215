"""With and without speculative decoding, across load: per pair of candidates that differ only in their
speculative setting (`tp8 no-spec` and `tp8 ngram k=4`), TPOT p50 and output tokens/s per GPU at each
measured load, and the load from which speculation stops paying (its TPOT no lower than without).

The two candidates are measured at their own loads (a capacity search picks them), so each side is
read at the other's loads by linear interpolation within its own measured range; loads outside either
range are left out rather than extrapolated.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from orchestrator.engines.settings import NO_SPECULATION
from orchestrator.store.reads import PointRow

# How a candidate's name shows a speculative setting (engines/settings.py speculative_label).
_LABEL = re.compile(r"(?:^| )(no-spec|[a-z_0-9]+ k=\d+)(?= |$)")


@dataclass(frozen=True)
class Curve:
    candidate: str
    points: tuple[tuple[float, float, float], ...]  # (load, TPOT p50 ms, output tok/s/GPU), by load

    def at(self, load: float) -> tuple[float, float] | None:
        """(TPOT, tok/s/GPU) at `load`, interpolated within the measured loads; None outside."""
        pts = self.points
        if not pts or load < pts[0][0] or load > pts[-1][0]:
            return None
        for (x0, t0, g0), (x1, t1, g1) in pairwise(pts):
            if x0 <= load <= x1:
                w = (load - x0) / (x1 - x0) if x1 > x0 else 0.0
                return t0 + w * (t1 - t0), g0 + w * (g1 - g0)
        return pts[-1][1], pts[-1][2]


@dataclass(frozen=True)
class Row:
    load: float
    tpot_off_ms: float
    tpot_on_ms: float
    tok_off: float
    tok_on: float

    @property
    def gain(self) -> float:
        return self.tpot_off_ms / self.tpot_on_ms if self.tpot_on_ms else float("inf")


@dataclass(frozen=True)
class Comparison:
    without: str
    with_: str
    rows: tuple[Row, ...]

    @property
    def crossover(self) -> float | None:
        """The lowest compared load at which speculation's TPOT is no better; None: it pays at all."""
        return next((r.load for r in self.rows if r.gain <= 1.0), None)


def split_name(name: str) -> tuple[str, str] | None:
    """(the name with its speculative label as `*`, the label), or None without one."""
    found = _LABEL.search(name)
    if found is None:
        return None
    label = found.group(1)
    return name[: found.start(1)] + "*" + name[found.end(1):], label


def curve(candidate: str, points: Sequence[PointRow]) -> Curve:
    """The candidate's measured points that completed requests, by load (rate or concurrency)."""
    out = []
    for p in points:
        m = p.metrics
        load = p.rate if p.rate is not None else (m.get("concurrency") or _concurrency(p.label))
        tpot = (m.get("tpot_ms") or {}).get("p50")
        tok = (m.get("per_gpu") or {}).get("output_throughput")
        if load is not None and isinstance(tpot, int | float) and isinstance(tok, int | float):
            out.append((float(load), float(tpot), float(tok)))
    return Curve(candidate, tuple(sorted(out)))


def _concurrency(label: str) -> float | None:
    head, _, n = label.partition("=")
    return float(n) if head == "concurrency" and n.isdigit() else None


def comparisons(curves: Sequence[Curve]) -> list[Comparison]:
    """Every (without, with) pair of candidates that differ only in speculation."""
    groups: dict[str, dict[str, Curve]] = {}
    for c in curves:
        split = split_name(c.candidate)
        if split is not None:
            groups.setdefault(split[0], {})[split[1]] = c
    out = []
    for members in groups.values():
        off = members.get(NO_SPECULATION)
        if off is None:
            continue
        for label, on in members.items():
            if label == NO_SPECULATION:
                continue
            loads = sorted({x for x, _, _ in off.points} | {x for x, _, _ in on.points})
            rows = []
            for load in loads:
                a, b = off.at(load), on.at(load)
                if a is not None and b is not None:
                    rows.append(Row(load, a[0], b[0], a[1], b[1]))
            out.append(Comparison(off.candidate, on.candidate, tuple(rows)))
    return out


def comparison_lines(c: Comparison, axis: str = "rate") -> list[str]:
    """The comparison as text: one line per load, then where speculation stops paying."""
    lines = [f"{c.with_} against {c.without} (TPOT p50 ms, output tok/s/GPU; interpolated between "
             "measured loads):"]
    for r in c.rows:
        lines.append(f"  {axis}={r.load:g}: TPOT {r.tpot_off_ms:.2f} -> {r.tpot_on_ms:.2f} ({r.gain:.2f}x), "
                     f"tok/s/GPU {r.tok_off:,.0f} -> {r.tok_on:,.0f}")
    if not c.rows:
        lines.append("  no load where both were measured")
    elif c.crossover is None:
        lines.append(f"  speculation pays at every compared load (up to {c.rows[-1].load:g})")
    else:
        lines.append(f"  speculation stops paying at {axis}={c.crossover:g}")
    return lines
