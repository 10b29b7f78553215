"""The report's figures and page from a synthetic stored sweep (the browser test looks at the drawing),
the DataFrames of orchestrator.store.frames, and every `orch export` format."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from orchestrator.pipeline.sweep import outcomes_from_store
from orchestrator.report import figures
from orchestrator.report.data import ReportData, load_report, quantiles
from orchestrator.report.html import render_html
from orchestrator.selection import select
from orchestrator.store.db import Store
from orchestrator.store.export import export_run
from tests.support.report_fixtures import POINTS, build_store


def _data(tmp_path: Path) -> tuple[Store, str, ReportData]:
    run_id = build_store(tmp_path / "r.db")
    store = Store(tmp_path / "r.db")
    outcomes = outcomes_from_store(store, run_id)
    return store, run_id, load_report(store, run_id, select(outcomes, "goodput_per_gpu"), outcomes)


def _names(fig: object) -> set[str]:
    return {t.name for t in fig.data}  # type: ignore[attr-defined]


def test_figures_hold_every_layout_and_mark_verdicts_apart(tmp_path: Path) -> None:
    _, _, data = _data(tmp_path)
    assert {p.judged for p in data.points} == {"pass", "fail", "unjudged"}
    assert data.simulated and data.slo_ms == {"ttft_p99_ms": 2000.0, "itl_p99_ms": 100.0}
    pareto = figures.pareto(data)
    assert {"tp8", "tp4x2", "passes the SLO", "fails the SLO", "not judged"} <= _names(pareto)
    tp8 = next(t for t in pareto.data if t.name == "tp8")
    assert len(set(tp8.marker.symbol)) == 2  # the passing and the failing point differ in shape
    assert any(n.startswith("winner: ") for n in _names(pareto))
    assert [s.type for s in pareto.layout.shapes] == ["line"]  # the ITL bound, nothing shaded
    lat = figures.latency(data)
    assert {"tp8 TTFT p99", "tp8 ITL p50", "tp4x2 TPOT p99"} <= _names(lat)
    assert {s.y0 for s in lat.layout.shapes} == {2000.0, 100.0}  # the SLO lines
    pred = figures.predicted(data)
    assert {"measured", "predicted"} == _names(pred)
    assert "+10%" in next(t for t in pred.data if t.name == "predicted").text  # TTFT predicted 1.1x
    assert {"tp8 rate=2/s TTFT", "tp4x2 rate=8/s ITL"} <= _names(figures.cdfs(data))
    engine = figures.engine(data)
    assert engine is not None and "tp4x2 rate=8/s kv_usage" in _names(engine)


def test_page_is_self_contained_with_banner_reasons_and_metadata(tmp_path: Path) -> None:
    _, _, data = _data(tmp_path)
    page = render_html(data)
    assert "<script src" not in page and len(page) > 1_000_000  # plotly.js inline: opens offline
    for div in ("fig-pareto", "fig-latency", "fig-predicted", "fig-cdf", "fig-engine"):
        assert f'id="{div}"' in page
    assert 'id="simulated"' in page and "example-0001" in page
    assert "weights do not fit" in page  # the rejected layout's reason
    assert all(html.escape(v.reason) in page for v in data.selection.verdicts)


def test_quantiles_keep_the_tails() -> None:
    values = [float(i) for i in range(1000)]
    q = quantiles(values, 50)
    assert len(q) == 50 and q[0] == 0.0 and q[-1] == 999.0 and list(q) == sorted(q)
    assert quantiles([3.0, 1.0]) == (1.0, 3.0)


def test_frames_give_runs_points_requests_and_engine_rows(tmp_path: Path) -> None:
    pytest.importorskip("pandas", reason="pandas is the [data] extra")
    from orchestrator.store.frames import engine_frame, points_frame, requests_frame, runs_frame

    db = tmp_path / "r.db"
    run_id = build_store(db)
    runs = runs_frame(db)
    assert list(runs["run_id"]) == [run_id] and runs["metadata.eval_run_id"][0] == "example-0001"
    pts = points_frame(db, "latest")
    assert len(pts) == len(POINTS) and {"ttft_ms.p99", "engine.kv_usage_peak", "verdict"} <= set(pts.columns)
    assert set(pts["layout"]) == {"tp8", "tp4x2"}
    reqs = requests_frame(db, run_id[:10])
    assert len(reqs) == 40 * len(POINTS) and reqs["ttft_ms"].gt(0).all()
    eng = engine_frame(db)
    assert {"t_s", "endpoint", "running", "kv_usage"} <= set(eng.columns)
    assert set(eng[eng.layout == "tp4x2"]["endpoint"]) == {0, 1}


def test_export_formats(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    run_id = build_store(db)
    store = Store(db)
    lines = export_run(store, run_id, "jsonl", None).splitlines()
    assert len(lines) == len(POINTS) and json.loads(lines[0])["layout"] == "tp8"
    engine_csv = export_run(store, run_id, "csv", None, table="engine")
    assert "kv_usage" in engine_csv.splitlines()[0]
    out = export_run(store, run_id, "vllm", str(tmp_path / "vllm"))
    files = sorted(Path(out).glob("*.json"))
    assert len(files) == len(POINTS)
    first = json.loads(files[0].read_text())
    stored = {(p.layout, p.label): p.metrics for p in store.points(run_id)}
    m = stored[(first["layout"], first["label"])]
    assert first["completed"] == m["n_completed"]
    assert first["p99_ttft_ms"] == pytest.approx(m["ttft_ms"]["p99"])
    pytest.importorskip("pyarrow", reason="pyarrow is the [data] extra")
    import pandas as pd

    parquet = export_run(store, run_id, "parquet", str(tmp_path / "p.parquet"), table="requests")
    assert len(pd.read_parquet(parquet)) == 40 * len(POINTS)


def test_the_table_shows_prefix_cache_hits_and_turn_ttft_only_for_session_points(tmp_path: Path) -> None:
    from dataclasses import replace

    _, _, data = _data(tmp_path)
    assert "prefix-cache hit" not in render_html(data)  # a random workload's table stays as it was
    turns = {"ttft_first_turn_ms": {"count": 10, "p50": 812.5},
             "ttft_later_turns_ms": {"count": 30, "p50": 97.25}}
    points = list(data.points)
    # virtual time: the simulator's exact counters win over the sampled engine gauge
    points[0] = replace(points[0], metrics={**points[0].metrics, **turns,
                                            "sim": {"prefix_cache": {"hit_rate": 0.843}},
                                            "engine": {"prefix_hit_rate": 0.5}})
    # served: the engines' measured rate beside the simulator's prediction
    points[1] = replace(points[1], metrics={**points[1].metrics, "engine": {"prefix_hit_rate": 0.652},
                                            "predicted": {"prefix_hit_rate": 0.701}})
    page = render_html(replace(data, points=tuple(points)))
    table = page[page.index('<table id="points">'):]
    assert "prefix-cache hit (predicted)" in table and "TTFT p50 ms first / later turns" in table
    assert "<td>84.3%</td><td>812.5 / 97.2</td>" in table
    assert "<td>65.2% (70.1%)</td><td>- / -</td>" in table
    assert "<td colspan=14>weights do not fit" in table  # a rejected layout's reason spans the wider table
