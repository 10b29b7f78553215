from orchestrator.pipeline.harness import HarnessCounters, unreliable_because


def test_lost_clock_or_late_tokens_make_a_point_unreliable() -> None:
    before = HarnessCounters(1.0, 100, 10.0, 0.0)
    # 1000 steps over 10 simulated s, tokens 0.5 ms wall late each: 2 ms simulated at scale 0.25.
    jitter = HarnessCounters(1.5, 1100, 20.0, 0.0) - before
    assert unreliable_because(jitter, 0.25, tightest_bound_ms=100.0) is None  # 2 ms vs 5 ms allowed
    assert unreliable_because(jitter, 0.05, tightest_bound_ms=100.0) is not None  # 10 ms late > 5 ms
    lost = HarnessCounters(1.0, 1100, 20.0, 0.2) - before  # 0.2 s wall = 0.8 s simulated of 10 s: 8%
    why = unreliable_because(lost, 0.25, tightest_bound_ms=2000.0)
    assert why is not None and "lost 8%" in why and "time_scale" in why
    assert unreliable_because(HarnessCounters(), 1.0) is None
