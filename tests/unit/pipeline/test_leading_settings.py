"""Served settings sweeps serve the leading predicted settings of each layout, and say why not the rest."""

from __future__ import annotations

from orchestrator.layout import parse_layout
from orchestrator.pipeline.candidates import LEADING_SETTINGS, announcement, leading_settings
from orchestrator.selection import LayoutOutcome, PointOutcome
from orchestrator.spec.load import parse_spec
from tests.support.engines import candidate


def _outcome(name: str, goodput: float) -> LayoutOutcome:
    point = PointOutcome("rate=1", 1.0, True, "pass", goodput, goodput * 100, 100.0, 20.0)
    return LayoutOutcome(name, 8, "measured", None, (point,))


def test_only_the_leading_settings_of_each_layout_are_served() -> None:
    tp8 = [candidate("tp8") for _ in range(4)]
    tp4 = [candidate("tp4") for _ in range(2)]
    names = [f"tp8 s{i}" for i in range(4)] + ["tp4 s0", "tp4 s1"]
    cands = [type(c)(c.layout, c.settings, n) for c, n in zip(tp8 + tp4, names, strict=True)]
    predicted = [_outcome("tp8 s0", 1.0), _outcome("tp8 s1", 3.0), _outcome("tp8 s2", 2.0),
                 _outcome("tp8 s3", 0.5), _outcome("tp4 s0", 0.1), _outcome("tp4 s1", 0.2)]
    pruned = leading_settings(cands, predicted, "goodput_per_gpu")
    assert LEADING_SETTINGS == 2
    assert set(pruned) == {"tp8 s0", "tp8 s3"}  # tp8 keeps s1 and s2; tp4 has only two
    assert "behind the 2 leading settings of tp8 (tp8 s1, tp8 s2" in pruned["tp8 s3"]
    assert "--measure-all" in pruned["tp8 s0"]
    assert parse_layout("tp8") == cands[0].layout


def test_the_announcement_counts_candidates_and_estimates_time() -> None:
    spec = parse_spec("""model: {name: llama-3.1-70b}
hardware: {gpu: h100-sxm}
workload: {kind: random, input_tokens: 64, output_tokens: 32, rates_per_s: [1, 2], num_requests: 10}
layouts: [tp8]
""")
    cands = [candidate("tp8"), candidate("tp8"), candidate("tp4"), candidate("tp4")]
    line = announcement(spec, cands, served=False, grid=[1.0, 2.0])
    assert line.startswith("4 candidates (2 layouts x 2 settings), about 2 load points each, virtual time")
    served = announcement(spec, cands, served=True, grid=[1.0, 2.0])
    assert "served: expected about" in served and "min" in served  # 4 x (2 x 10 s + 60 s start-up)
