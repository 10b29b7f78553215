"""A load point's measured prefix-cache hit rate: the growth of vLLM's counters over the point."""

from __future__ import annotations

from orchestrator.loadgen.engine_metrics import EngineSample, series_to_dict, summarize_series


def test_the_hit_rate_is_the_points_own_not_since_the_engine_started() -> None:
    # the warm-up left 100 queries with 0 hits; during the point two endpoints grow by 1000/600 and 500/100
    samples = [
        EngineSample(0.0, 0, prefix_hits=0.0, prefix_queries=100.0),
        EngineSample(1.0, 0, prefix_hits=600.0, prefix_queries=1100.0),
        EngineSample(0.0, 1, prefix_hits=10.0, prefix_queries=50.0),
        EngineSample(1.0, 1, prefix_hits=110.0, prefix_queries=550.0),
    ]
    s = summarize_series(series_to_dict(samples, 1.0))
    assert s["prefix_queries"] == 1500.0
    assert abs(s["prefix_hit_rate"] - 700 / 1500) < 1e-12
    without = summarize_series(series_to_dict([EngineSample(0.0, 0, running=1.0)], 1.0))
    assert without["prefix_hit_rate"] is None


def test_without_vllms_counters_the_engines_own_gauge_is_averaged() -> None:
    # SGLang exposes a cache hit rate gauge, no counters
    samples = [EngineSample(0.0, 0, prefix_hit_rate=0.4), EngineSample(1.0, 0, prefix_hit_rate=0.6)]
    assert abs(summarize_series(series_to_dict(samples, 1.0))["prefix_hit_rate"] - 0.5) < 1e-12
