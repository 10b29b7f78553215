"""`orch bench`'s and `orch simulate`'s tables: one column of metrics per load point (as many tables
as the terminal needs to show each column whole), or one row per point when there are many."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from orchestrator.cli.fit_table import FitTable

if TYPE_CHECKING:
    from rich.console import Console

    from orchestrator.loadgen.bench import PointResult
    from orchestrator.loadgen.metrics import Distribution


def _fmt(v: float | None, nd: int = 1) -> str:
    if v is None:
        return "-"
    return "inf" if math.isinf(v) else f"{v:,.{nd}f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _pair(d: Distribution | None) -> str:
    return "-" if d is None else f"{_fmt(d.p50, 2)} / {_fmt(d.p99, 2)}"


def _wide_table(points: list[PointResult], title: str, wide: bool) -> FitTable:
    """One row per load point (many points, e.g. a search), with the key columns."""
    t = FitTable(title + " (ms; p50/p99 unless marked)", wide=wide)
    for c, keep in (("point", 0), ("ok/failed", 0), ("achieved req/s", 1), ("lag p99", 3),
                    ("TTFT p50/p99", 0), ("ITL p99", 1), ("TPOT p50", 2), ("E2E p99", 3), ("out tok/s", 2),
                    ("goodput", 1), ("SLO", 0)):
        t.column(c, justify="left" if c in ("point", "SLO") else "right", keep=keep)
    for p in points:
        m = p.metrics
        t.row(
            p.point.label, f"{m.n_completed}/{m.n_failed}", _fmt(m.achieved_rate),
            _fmt(m.sched_lag_ms.p99 if m.sched_lag_ms else None, 2), _pair(m.ttft_ms),
            _fmt(m.itl_chunk_ms.p99, 2), _fmt(m.tpot_ms.p50, 2), _fmt(m.e2e_ms.p99),
            _fmt(m.output_throughput), _fmt(m.goodput, 2),
            "-" if p.passed is None else ("pass" if p.passed else "FAIL"),
        )
    return t


METRIC_ROWS: tuple[tuple[str, Any], ...] = (
    ("requests ok / failed", lambda p: f"{p.metrics.n_completed} / {p.metrics.n_failed}"),
    ("failures", lambda p: ", ".join(f"{k}={v}" for k, v in p.metrics.failures.items()) or "-"),
    ("achieved / scheduled req/s",
     lambda p: f"{_fmt(p.metrics.achieved_rate)} / {_fmt(p.metrics.scheduled_rate)}"),
    ("scheduling lag", lambda p: _pair(p.metrics.sched_lag_ms)),
    ("queue wait (max-concurrency)", lambda p: _pair(p.metrics.queue_wait_ms)),
    ("TTFT", lambda p: _pair(p.metrics.ttft_ms)),
    ("ITL per chunk", lambda p: _pair(p.metrics.itl_chunk_ms)),
    ("ITL per token", lambda p: _pair(p.metrics.itl_token_ms)),
    ("TPOT", lambda p: _pair(p.metrics.tpot_ms)),
    ("E2E", lambda p: _pair(p.metrics.e2e_ms)),
    ("request throughput req/s", lambda p: _fmt(p.metrics.request_throughput, 2)),
    ("output tokens/s", lambda p: _fmt(p.metrics.output_throughput)),
    ("total tokens/s", lambda p: _fmt(p.metrics.total_throughput)),
    ("goodput req/s", lambda p: _fmt(p.metrics.goodput, 2)),
)
SESSION_ROWS: tuple[tuple[str, Any], ...] = (  # session workloads only
    ("TTFT first turns", lambda p: _pair(p.metrics.ttft_first_turn_ms)),
    ("TTFT later turns", lambda p: _pair(p.metrics.ttft_later_turns_ms)),
    ("session time", lambda p: _pair(p.metrics.session_ms)),
    ("sessions done / failed / cut",
     lambda p: f"{p.metrics.sessions_completed} / {p.metrics.sessions_failed} / "
     f"{p.metrics.sessions_unfinished}"),
)
HIT_ROWS: tuple[tuple[str, Any], ...] = (  # simulated, where the prefix cache held something
    ("prefix-cache hit rate", lambda p: _pct(p.metrics.prefix_hit_rate)),
)
TURN_HIT_ROWS: tuple[tuple[str, Any], ...] = (
    ("  first / later turns", lambda p: f"{_pct(p.metrics.prefix_hit_rate_first_turn)} / "
     f"{_pct(p.metrics.prefix_hit_rate_later_turns)}"),
)
LAST_ROWS: tuple[tuple[str, Any], ...] = (
    ("token counts from usage", lambda p: f"{p.metrics.n_completed - p.metrics.fallback_token_counts}"
     f"/{p.metrics.n_completed}"),
    ("SLO", lambda p: "-" if p.passed is None else ("pass" if p.passed else "FAIL (below)")),
)


def _metric_table(points: list[PointResult], title: str) -> FitTable:
    t = FitTable(title, wide=True)  # every point's column: callers split points to fit
    t.column("metric", justify="left")
    for p in points:
        t.column(p.point.label + (" (interrupted)" if p.interrupted else ""))
    rows = list(METRIC_ROWS)
    if any(p.metrics.ttft_first_turn_ms is not None for p in points):
        rows += SESSION_ROWS
    if any(p.metrics.prefix_hit_rate for p in points):
        rows += HIT_ROWS
        if any(p.metrics.prefix_hit_rate_later_turns is not None for p in points):
            rows += TURN_HIT_ROWS
    for name, cell in (*rows, *LAST_ROWS):
        t.row(name, *(cell(p) for p in points))
    return t


def print_points(console: Console, points: list[PointResult], title: str, *, wide: bool = False) -> None:
    """The points as a table of metrics (one column per point; as many tables as the terminal needs
    to show each column whole), or with more than four points one row per point."""
    if len(points) > 4:
        _wide_table(points, title, wide).print(console)
    else:
        per_table = len(points)
        while per_table > 1 and not _metric_table(points[:per_table], title).fits(console.width):
            per_table -= 1
        parts = -(-len(points) // per_table)
        for i in range(0, len(points), per_table):
            part = "" if parts == 1 else f" ({i // per_table + 1} of {parts})"
            _metric_table(points[i:i + per_table], title + part).print(console)
    for p in points:  # why a point failed, as a line (a table cell would wrap it)
        if p.verdict:
            console.print(f"{p.point.label}: {p.verdict}", markup=False, highlight=False)
        if p.note:
            console.print(f"{p.point.label}: {p.note}", markup=False, highlight=False)
