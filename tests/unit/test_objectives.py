"""Objectives beside goodput (orchestrator/objectives.py): interactivity, cost, the Pareto frontier."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from orchestrator.objectives import (
    MeasuredPoint,
    cost_per_million_tokens,
    layout_objectives,
    pareto,
    tokens_per_s_per_user,
)
from orchestrator.spec.models import SweepSpec


def pt(layout: str, label: str, tpot_ms: float, per_gpu: float, err: float = 0.0) -> MeasuredPoint:
    m = {"tpot_ms": {"p50": tpot_ms}, "per_gpu": {"output_throughput": per_gpu}, "error_rate": err}
    return MeasuredPoint(layout, label, None, True, 8, m)


def test_interactivity_and_cost_by_hand() -> None:
    assert tokens_per_s_per_user({"tpot_ms": {"p50": 20.0}}) == 50.0
    # 2.5 per GPU-hour at 250 tok/s/GPU: 900k tokens per GPU-hour -> 2.78 per million
    assert cost_per_million_tokens(2.5, 250.0) == pytest.approx(2.5 / 0.9)
    assert cost_per_million_tokens(2.5, 0.0) is None


def test_pareto_frontier_keeps_only_undominated_points() -> None:
    pts = [
        pt("tp8", "a", 10.0, 100.0),  # 100 tok/s/user, 100 tok/s/GPU
        pt("tp8", "b", 20.0, 300.0),  # 50, 300
        pt("tp4x2", "c", 20.0, 250.0),  # 50, 250: dominated by b
        pt("tp4x2", "d", 50.0, 400.0),  # 20, 400
        pt("tp4x2", "e", 12.5, 90.0),  # 80, 90: dominated by a
        pt("tp4x2", "f", 5.0, 999.0, err=0.5),  # errors above the bound: not a usable point
    ]
    front = pareto(pts, max_error_rate=0.01)
    order = [(f["layout"], f["label"]) for f in front["frontier"]]
    assert order == [("tp4x2", "d"), ("tp8", "b"), ("tp8", "a")]
    assert {r["label"]: r["on_frontier"] for r in front["points"]} == {
        "a": True, "b": True, "c": False, "d": True, "e": False}
    assert front["x"] == "tokens_per_s_per_user" and front["y"] == "tokens_per_s_per_gpu"


def test_throughput_at_an_interactivity_target() -> None:
    pts = [pt("tp8", "a", 10.0, 100.0), pt("tp8", "b", 20.0, 300.0), pt("tp8", "c", 50.0, 400.0)]
    obj = layout_objectives(pts, "b", interactivity_target=40.0, cost_per_gpu_hour=2.5, currency="USD")
    assert obj["at_interactivity"]["label"] == "b" and obj["at_interactivity"]["tokens_per_s_per_gpu"] == 300
    assert obj["at_capacity"]["cost_per_million_output_tokens"] == pytest.approx(2.5 / (300 * 3600) * 1e6)
    none = layout_objectives(pts, "b", interactivity_target=500.0, cost_per_gpu_hour=None, currency=None)
    assert none["at_interactivity"]["verdict"] == "no load point gives 500 tokens/s per user"


def test_a_cost_without_a_currency_is_refused() -> None:
    base = {"model": {"name": "qwen2.5-7b"}, "hardware": {"gpu": "h100-sxm"},
            "workload": {"num_requests": 4}, "layouts": ["tp1"]}
    with pytest.raises(ValidationError, match="cost_per_gpu_hour needs a currency"):
        SweepSpec.model_validate({**base, "cost_per_gpu_hour": 2.5})
    assert SweepSpec.model_validate({**base, "cost_per_gpu_hour": 2.5, "currency": "EUR"}).currency == "EUR"


def test_the_interactivity_target_counts_only_points_meeting_the_slo() -> None:
    # c streams at 50 tok/s/user and 400 tok/s/GPU but fails the SLO: not a way to serve.
    ok = pt("tp8", "a", 10.0, 100.0)
    fails = MeasuredPoint("tp8", "c", None, False, 8, pt("tp8", "c", 20.0, 400.0).metrics)
    obj = layout_objectives([ok, fails], "a", interactivity_target=40.0, cost_per_gpu_hour=None,
                            currency=None)
    at = obj["at_interactivity"]
    assert at["label"] == "a" and at["tokens_per_s_per_gpu"] == 100.0
    assert at["among"] == "load points meeting the SLO"
    only_failing = layout_objectives([fails], None, interactivity_target=40.0, cost_per_gpu_hour=None,
                                     currency=None)["at_interactivity"]
    assert "label" not in only_failing and "tokens_per_s_per_gpu" not in only_failing
    assert only_failing["verdict"] == (
        "none meeting the SLO gives 40 tokens/s per user (c does at 400.0 tokens/s/GPU but fails the SLO)")
