"""The multi-turn chat and agentic examples simulate: later turns find their history cached, and on the
chat example prefix-aware routing beats round robin (more hits, lower later-turn TTFT)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.layout import parse_layout
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.sim.run import simulate_point
from orchestrator.spec.load import load_spec

LAYOUTS = Path(__file__).resolve().parents[3] / "layouts"


def test_chat_example_prefix_aware_beats_round_robin() -> None:
    spec = load_spec(LAYOUTS / "chat-multiturn.yaml")
    assert spec.routing_policies() == ["round_robin", "prefix_aware"]
    inputs, layout = plan_inputs(spec), parse_layout("tp2x4")
    runs = {p: simulate_point(spec.model_copy(update={"routing": p}), inputs, layout, 1.0) for p in
            spec.routing_policies()}
    m = {p: r.result.metrics for p, r in runs.items()}
    for p in m:
        assert m[p].sessions_completed and m[p].sessions_failed == 0
    aware, rr = m["prefix_aware"], m["round_robin"]
    assert aware.prefix_hit_rate is not None and rr.prefix_hit_rate is not None
    assert aware.prefix_hit_rate > rr.prefix_hit_rate
    assert aware.ttft_later_turns_ms is not None and rr.ttft_later_turns_ms is not None
    assert aware.ttft_first_turn_ms is not None
    assert aware.ttft_later_turns_ms.p50 < rr.ttft_later_turns_ms.p50  # type: ignore[operator]
    assert aware.ttft_later_turns_ms.p50 < aware.ttft_first_turn_ms.p50  # type: ignore[operator]
    cache = runs["prefix_aware"].summary.prefix_cache
    # the engines' counters (every lookup) agree with the records (completed requests in the window)
    assert cache is not None and cache.hit_rate is not None
    assert abs(cache.hit_rate - aware.prefix_hit_rate) < 0.05


def test_agentic_example_reuses_the_shared_tools() -> None:
    spec = load_spec(LAYOUTS / "agentic.yaml")
    sp = simulate_point(spec, plan_inputs(spec), parse_layout("tp1x4"), 1.0, num_requests=20)
    m = sp.result.metrics
    assert m.sessions_completed == 20 and m.n_failed == 0
    # first rounds find the shared 5.5k tokens of system prompt and tools (after the first session)
    assert m.prefix_hit_rate_first_turn is not None and m.prefix_hit_rate_first_turn > 0.5
    assert m.prefix_hit_rate is not None and m.prefix_hit_rate > 0.8


def test_a_closed_loop_of_sessions_simulates_from_the_spec() -> None:
    spec = load_spec(LAYOUTS / "chat-multiturn.yaml")
    sp = simulate_point(spec.model_copy(update={"routing": "prefix_aware"}), plan_inputs(spec),
                        parse_layout("tp4x2"), concurrency=4, num_requests=8)
    m = sp.result.metrics
    assert sp.result.point.label == "concurrency=4"
    assert m.sessions_completed == 8 and m.n_failed == 0
    assert m.prefix_hit_rate_later_turns is not None and m.prefix_hit_rate_later_turns > 0.7
