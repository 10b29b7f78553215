"""Delivered load (loadgen/delivery.py): a point the client did not send at its rate is not judged."""

from __future__ import annotations

import numpy as np

from orchestrator.loadgen.delivery import PREFIX, check_delivery, delivered_label
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.loadgen.records import RequestRecord


def schedule(n: int, rate: float, seed: int = 0) -> list[float]:
    return list(np.cumsum(np.random.default_rng(seed).exponential(1 / rate, n)))


def recs(sched: list[float], sent: list[float], queued: float = 0.0) -> list[RequestRecord]:
    pairs = enumerate(zip(sched, sent, strict=True))
    return [RequestRecord(str(i), s, t, done_s=t + 0.2, chunk_times_s=(t + 0.1,), chunk_tokens=(1,),
                          output_tokens=1, queued_s=queued) for i, (s, t) in pairs]


def test_an_on_time_poisson_schedule_is_delivered_whatever_its_own_noise() -> None:
    for seed in range(20):  # Poisson counts stray from the nominal 8/s; the schedule is still kept
        s = schedule(150, 8.0, seed)
        d = check_delivery(compute_metrics(recs(s, [t + 0.002 for t in s])), 8.0)
        assert d.delivered, d.short_because
        assert d.delivered_share is not None and abs(d.delivered_share - 1) < 0.01


def test_a_client_falling_behind_is_not_delivered_and_says_how_far() -> None:
    """Issue 29: stored as rate=8/s while about 4.2 req/s went out."""
    s = schedule(200, 8.0)
    late = [t * 8.0 / 4.2 for t in s]  # the sends stretch to 4.2/s
    d = check_delivery(compute_metrics(recs(s, late)), 8.0)
    assert not d.delivered and d.short_because is not None and d.short_because.startswith(PREFIX)
    assert d.delivered_share is not None and abs(d.delivered_share - 4.2 / 8.0) < 0.01
    assert "of the" in d.short_because and "send lag p99" in d.short_because
    label = delivered_label("rate=8/s", d)
    assert label.startswith(f"rate~{d.achieved_per_s:.4g}/s") and "8/s asked, not delivered" in label
    assert "rate=8/s" not in label


def test_a_lagging_client_at_the_right_mean_rate_is_caught_by_the_lag() -> None:
    s = schedule(200, 8.0)
    bursty = [t + (0.5 if i % 20 == 0 else 0.0) for i, t in enumerate(s)]  # every 20th send 0.5 s late
    d = check_delivery(compute_metrics(recs(s, bursty)), 8.0)
    assert not d.delivered and d.short_because is not None and "send lag p99 was 500 ms" in d.short_because


def test_waiting_for_a_concurrency_slot_is_not_the_client_lagging() -> None:
    s = schedule(200, 8.0)
    d = check_delivery(compute_metrics(recs(s, [t + 0.3 for t in s], queued=0.3)), 8.0)
    assert d.delivered, d.short_because


def test_closed_loops_and_traces_check_only_the_lag() -> None:
    s = schedule(50, 8.0)
    d = check_delivery(compute_metrics(recs(s, s)), None)
    assert d.delivered and d.lag_bound_ms is None
    assert delivered_label("concurrency=4", d) == "concurrency=4"
