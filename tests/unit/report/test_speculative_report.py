"""With and without speculation across load: pairs found by name, read at each other's loads, crossover."""

from __future__ import annotations

import pytest

from orchestrator.report.speculative import Curve, comparison_lines, comparisons, curve, split_name
from orchestrator.store.reads import PointRow


def _point(load: float, tpot: float, tok: float) -> PointRow:
    return PointRow("x", f"concurrency={int(load)}", None, True, "pass",
                    {"tpot_ms": {"p50": tpot}, "per_gpu": {"output_throughput": tok}})


def test_names_split_at_their_speculative_label() -> None:
    assert split_name("tp8 max_num_seqs=64 ngram k=4") == ("tp8 max_num_seqs=64 *", "ngram k=4")
    assert split_name("tp8 no-spec max_num_seqs=64") == ("tp8 * max_num_seqs=64", "no-spec")
    assert split_name("tp8 max_num_seqs=64") is None


def test_the_crossover_is_where_speculation_stops_lowering_tpot() -> None:
    off = curve("tp8 no-spec", [_point(1, 16.0, 15), _point(64, 36.0, 420), _point(256, 105.0, 590)])
    on = curve("tp8 ngram k=4", [_point(1, 7.0, 35), _point(64, 30.0, 490), _point(256, 124.0, 500)])
    assert off.points[0] == (1.0, 16.0, 15.0)
    (c,) = comparisons([off, on])
    assert (c.without, c.with_) == ("tp8 no-spec", "tp8 ngram k=4")
    assert [r.load for r in c.rows] == [1.0, 64.0, 256.0]
    assert c.rows[0].gain == pytest.approx(16 / 7) and c.crossover == 256.0
    assert comparison_lines(c, "concurrency")[-1] == "  speculation stops paying at concurrency=256"


def test_loads_outside_either_curve_are_not_extrapolated() -> None:
    off = Curve("a no-spec", ((1.0, 10.0, 1.0), (4.0, 16.0, 4.0)))
    on = Curve("a ngram k=2", ((2.0, 5.0, 2.0), (8.0, 20.0, 8.0)))
    (c,) = comparisons([off, on])
    assert [r.load for r in c.rows] == [2.0, 4.0]
    assert c.rows[0].tpot_off_ms == pytest.approx(12.0)  # a third of the way from 10 to 16
    assert c.crossover is None
