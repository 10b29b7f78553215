"""Pruning by prediction and the exhaustive-grid accounting (pipeline/prune.py)."""

from __future__ import annotations

from orchestrator.pipeline.prune import dominated, exhaustive_grid_points, timing
from orchestrator.selection import LayoutOutcome, PointOutcome


def _layout(name: str, gpus: int, goodput_per_gpu: float, passed: bool = True) -> LayoutOutcome:
    p = PointOutcome("rate=4/s", 4.0, passed, "" if passed else "SLO not met: itl_p99_ms 300 > 100",
                     goodput_per_gpu, 100.0, 50.0, 20.0)
    return LayoutOutcome(name, gpus, "measured", None, (p,))


def test_only_clear_losers_are_pruned_with_the_reason() -> None:
    out = dominated([_layout("tp1", 1, 4.0), _layout("tp2", 2, 2.0), _layout("tp1x2", 2, 3.0),
                     _layout("pp2", 2, 0.0, passed=False)], "goodput_per_gpu")
    assert set(out) == {"tp2", "pp2"}  # tp1x2 is 1.33x below: not a clear margin
    assert "more than 1.5x below tp1's 4" in out["tp2"] and "--measure-all" in out["tp2"]
    assert out["pp2"].startswith("predicted to meet the SLO at no load")


def test_nothing_is_pruned_when_no_layout_is_predicted_to_pass() -> None:
    assert dominated([_layout("a", 1, 0.0, False), _layout("b", 1, 0.0, False)], "goodput_per_gpu") == {}


def test_exhaustive_grid_points() -> None:
    assert exhaustive_grid_points([2, 4, 8], 0.05, searched=False) == 3
    # a geometric grid from 1 to 2 in steps of 5%: ceil(log 2 / log 1.05) + 1 = 16 points
    assert exhaustive_grid_points([1.0, 1.5, 2.0], 0.05, searched=True) == 16
    t = timing(10.0, [2.0, 2.0], [1.0] * 8, candidates=3, grid_points=16, searched=True)
    assert t.exhaustive_s == 3 * (2.0 + 16 * 1.0) and t.exhaustive_points == 48


def test_a_closed_loop_grid_counts_distinct_whole_concurrencies() -> None:
    # 1 to 16 in flight at 5%: a 5% step is below one request up to 20, so every integer once (16),
    # where a geometric grid would count ceil(log 16 / log 1.05) + 1 = 58 points
    assert exhaustive_grid_points([1.0, 3.0, 16.0], 0.05, searched=True, whole=True) == 16
    assert exhaustive_grid_points([1.0, 3.0, 16.0], 0.05, searched=True) == 58
    # 4 to 64 at 25%, by hand: 4 5 6 7 8 10 12 15 18 22 27 33 41 51 63, then 64
    assert exhaustive_grid_points([4.0, 64.0], 0.25, searched=True, whole=True) == 16
    assert exhaustive_grid_points([7.0, 7.0], 0.05, searched=True, whole=True) == 1
    assert exhaustive_grid_points([2.0, 3.0], 0.05, searched=True, whole=True) == 2
    t = timing(1.0, [1.0], [1.0], candidates=1, grid_points=16, searched=True, whole=True)
    assert "whole concurrency" in t.definition
