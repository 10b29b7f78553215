"""An SLO's keys and which requests meet it.

A key names a metric, a statistic and a bound in ms: `ttft_p99_ms`, `itl_token_p95_ms`,
`ttft_later_turns_p99_ms` (SLO_METRICS x SLO_STATS). A request meets the SLO when it completed and
each bound holds for its own value: its TTFT, TPOT, E2E, TTFT of its turn class, or the statistic of
its own ITL gaps; a value it does not have (no TPOT for a one-token answer, a request of the other
turn class) does not fail a bound. Goodput (loadgen/metrics.py) counts these requests and the
intervals (loadgen/intervals.py) resample them; whether a run's distributions meet the bounds is
metrics.py's `slo_violations`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from orchestrator.loadgen.columns import RequestColumns, columns_from_records, gaps_within, turn_class
from orchestrator.loadgen.records import RequestRecord

SLO_METRICS = ("ttft", "tpot", "e2e", "itl", "itl_token", "ttft_first_turn", "ttft_later_turns")
SLO_STATS = ("p50", "p90", "p95", "p99", "mean", "max")


def parse_slo(slo: Mapping[str, float]) -> list[tuple[str, str, float]]:
    """{"ttft_p99_ms": 2000, "itl_token_p95_ms": 50} -> [("ttft", "p99", 2000.0), ...]."""
    out: list[tuple[str, str, float]] = []
    for key, bound in slo.items():
        if not key.endswith("_ms"):
            raise ValueError(f"SLO key {key!r} must end in _ms (e.g. ttft_p99_ms)")
        metric, _, stat = key[: -len("_ms")].rpartition("_")
        if metric not in SLO_METRICS or stat not in SLO_STATS:
            raise ValueError(
                f"SLO key {key!r}: metric must be one of {SLO_METRICS}, statistic one of {SLO_STATS}"
            )
        out.append((metric, stat, float(bound)))
    return out


def slo_mask(cols: RequestColumns, slo: Mapping[str, float]) -> Any:
    """Per request: completed, and each bound holds for its own value (its TTFT, TPOT, E2E, TTFT of its
    turn class, or the statistic of its own ITL gaps). Missing values (no TPOT for a one-token answer,
    no ITL gaps, a request of the other turn class) do not fail a bound."""
    good = cols.ok
    for metric, stat, bound in parse_slo(slo):
        if metric in ("ttft", "tpot", "e2e", "ttft_first_turn", "ttft_later_turns"):
            value = scalar_s(cols, metric) * 1e3
            good = good & ~(value > bound)  # NaN (missing) compares False: passes
        else:
            gaps = cols.itl_chunk if metric == "itl" else cols.itl_token
            good = good & gaps_within(gaps, len(cols), stat, bound)
    return good


def scalar_s(cols: RequestColumns, metric: str) -> Any:
    """A scalar SLO metric per request in seconds (ttft, tpot, e2e, or TTFT of one turn class: NaN for
    a request of the other class or outside sessions)."""
    if metric in ("ttft_first_turn", "ttft_later_turns"):
        wanted = "first" if metric == "ttft_first_turn" else "later"
        mine = np.fromiter((t == wanted for t in cols.turns or ()), np.bool_, len(cols) if cols.turns else 0)
        return np.where(mine, cols.ttft_s(), np.nan) if cols.turns else np.full(len(cols), np.nan)
    return {"ttft": cols.ttft_s, "tpot": cols.tpot_s, "e2e": cols.e2e_s}[metric]()


def request_scalar_s(rec: RequestRecord, metric: str) -> float | None:
    """A scalar SLO metric of one request in seconds (ttft, tpot, e2e, or TTFT of one turn class: none
    for a request of the other class or outside sessions)."""
    if metric in ("ttft_first_turn", "ttft_later_turns"):
        wanted = "first" if metric == "ttft_first_turn" else "later"
        return rec.ttft_s if turn_class(rec) == wanted else None
    return {"ttft": rec.ttft_s, "tpot": rec.tpot_s, "e2e": rec.e2e_s}[metric]


def meets_slo(rec: RequestRecord, slo: Mapping[str, float]) -> bool:
    """A completed request meets the SLO when each bound holds for its own value (slo_mask)."""
    return bool(slo_mask(columns_from_records([rec]), slo)[0])
