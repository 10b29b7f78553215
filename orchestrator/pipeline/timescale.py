"""A simulated server run with time scale s releases tokens s times as fast; the sweep sends s times
the rate and maps the records back to simulated seconds before measuring them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from orchestrator.loadgen.records import RequestRecord


def unscale(records: Sequence[RequestRecord], scale: float) -> list[RequestRecord]:
    """Wall seconds -> simulated seconds: t -> t0 + (t - t0) / scale, t0 = the first scheduled send."""
    if scale == 1.0 or not records:
        return list(records)
    t0 = min(r.scheduled_s for r in records)

    def f(t: float) -> float:
        return t0 + (t - t0) / scale

    return [
        replace(
            r,
            scheduled_s=f(r.scheduled_s),
            sent_s=f(r.sent_s),
            done_s=None if r.done_s is None else f(r.done_s),
            chunk_times_s=tuple(f(t) for t in r.chunk_times_s),
            queued_s=r.queued_s / scale,
        )
        for r in records
    ]
