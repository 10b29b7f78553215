from orchestrator.pipeline.harness import HarnessCounters, unreliable_because


def test_late_loops_make_a_point_unreliable_in_simulated_time() -> None:
    before = HarnessCounters(1.0, 100, 10.0)
    on_time = HarnessCounters(1.01, 1100, 20.0) - before  # 10 ms wall late over 10 simulated s
    assert unreliable_because(on_time, 0.25) is None  # 40 ms simulated: 0.4%
    late = HarnessCounters(1.2, 1100, 20.0) - before  # 200 ms wall late = 800 ms simulated: 8%
    why = unreliable_because(late, 0.25)
    assert why is not None and "8%" in why and "time_scale" in why
    assert unreliable_because(HarnessCounters(), 1.0) is None
