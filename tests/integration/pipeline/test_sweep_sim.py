"""`orch sweep` end to end on the simulated engine: real servers, real HTTP (`--served`), real SQLite."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import Orch
from tests.support.sim_spec import SimSpec


def test_sweep_picks_a_winner_stores_it_and_reports_again(
    tmp_path: Path, orch: Orch, sim_spec: SimSpec
) -> None:
    db = str(tmp_path / "r.db")
    out = orch(
        "sweep", sim_spec(), "--served", "--store", db, "--json", "--workdir", str(tmp_path / "w")
    )
    # Served in wall time, a busy machine can leave a point unjudged (the simulated servers lose their
    # clock): the decision then says it is not sound (exit 8). Everything below holds either way.
    assert out.returncode in (0, 8), out.stderr[-3000:]
    data = json.loads(out.stdout)
    if out.returncode == 8:
        assert data["selection"]["sound"] is False and "could not be judged" in out.stderr
    layouts = {x["layout"]: x for x in data["layouts"]}
    assert layouts["tp4"]["status"] == "rejected" and "cluster has 2" in layouts["tp4"]["reason"]
    for name in ("tp2", "tp1x2"):
        point = layouts[name]["points"][-1]
        judged = not (point["verdict"] or "").startswith("unreliable")
        assert layouts[name]["status"] == "measured" and (point["passed"] is True or not judged)
        assert point["metrics"]["n_failed"] == 0 and point["metrics"]["total_output_tokens"] > 0
        engine = point["metrics"]["engine"]  # the sim server's /metrics, scraped during the point
        assert engine["samples"] >= 1 and engine["kv_usage_peak"] is not None
    winner = data["selection"]["winner"]
    assert winner in ("tp2", "tp1x2") or out.returncode == 8
    assert all(v["reason"] for v in data["selection"]["verdicts"])
    runs = json.loads(orch("runs", "--store", db, "--json").stdout)
    assert runs[0]["winner"] == winner and runs[0]["metadata"] == {"eval_run_id": "ci-1"}
    predicted = layouts["tp2"]["points"][-1]["metrics"]["predicted"]
    assert predicted["source"].startswith("orch simulate") and predicted["tpot_p50_ms"] > 0
    page = tmp_path / "r.html"
    report = orch("report", data["run_id"], "--store", db, "--html", str(page))
    assert report.returncode in (0, 8) and (winner is None or f"winner: {winner}" in report.stdout)
    text = page.read_text()
    assert 'id="fig-pareto"' in text and 'id="fig-engine"' in text and "Measured beside predicted" in text
    assert "engine KV peak" in report.stdout
    same = orch("compare", data["run_id"], data["run_id"], "--store", db)  # nothing to compare: refused
    assert same.returncode == 2 and "are the same run" in same.stderr, same.stderr
    export = orch("export", data["run_id"], "--store", db, "--format", "csv", "--requests")
    assert export.returncode == 0 and len(export.stdout.splitlines()) > 16  # header + every request


def test_no_layout_meets_an_impossible_slo_exit_3(tmp_path: Path, orch: Orch, sim_spec: SimSpec) -> None:
    spec = sim_spec(slo={"ttft_p99_ms": 0.001}, layouts=["tp2"])
    out = orch("sweep", spec, "--store", str(tmp_path / "r.db"))
    assert out.returncode == 3, out.stderr[-2000:]
    assert "no layout meets the SLO" in out.stderr + out.stdout
    assert "Traceback" not in out.stderr


def test_resume_finishes_an_interrupted_run(tmp_path: Path, orch: Orch, sim_spec: SimSpec) -> None:
    from orchestrator.pipeline.sweep import Sweep, one_candidate
    from orchestrator.spec.load import load_spec
    from orchestrator.store.db import Store
    from tests.support.observers import QuietObserver


    db = tmp_path / "r.db"
    spec_path = sim_spec(layouts=["tp2", "tp1x2"])
    store = Store(db)
    sweep = Sweep(load_spec(spec_path), store, QuietObserver(), spec_path=spec_path)
    # Run only the first layout, as if Ctrl-C came before the second.
    store.create_run(
        run_id=sweep.run_id,
        spec_path=spec_path,
        spec_json=sweep.ctx.spec.model_dump(mode="json"),
        spec_hash="h",
        engine="sim",
        engine_version=None,
        model="qwen2.5-7b",
        model_config_hash=None,
        orch_version="t",
        hardware={},
        metadata={},
    )
    one_candidate(sweep.ctx, sweep.ctx.candidate(sweep.ctx.spec.layouts[0]))
    store.finish_run(sweep.run_id, "interrupted", None)
    first = store.points(sweep.run_id, "tp2")
    store.close()
    out = orch("sweep", "--resume", sweep.run_id, "--store", str(db), "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert {x["layout"]: x["status"] for x in data["layouts"]} == {"tp2": "measured", "tp1x2": "measured"}
    again = Store(db).points(sweep.run_id, "tp2")
    assert [p.metrics for p in again] == [p.metrics for p in first]  # not re-measured
