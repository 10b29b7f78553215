from pathlib import Path

import pytest

from orchestrator.errors import OrchError
from orchestrator.loadgen.records import RequestRecord
from orchestrator.store.db import SCHEMA_VERSION, Store
from orchestrator.store.export import export_run
from tests.support.store_runs import add_run


def _store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "r.db")
    add_run(s, hardware={"cpu_model": "cpu"})
    return s


def test_points_and_records_round_trip_and_export(tmp_path: Path) -> None:
    s = _store(tmp_path)
    rid = "20260101-000000-abcdef"
    s.set_layout(rid, "tp8", 8, "pending", plan={"fits": True}, launch={"argv": ["x"]})
    rec = RequestRecord("q1", 0.0, 0.0, 1.0, (0.1, 0.2), (1, 1), 2, 5)
    s.add_point(
        rid, "tp8", "rate=2/s", 2.0, True, "", {"goodput": 1.5, "per_gpu": {"output_throughput": 3}}, [rec]
    )
    s.set_layout(rid, "tp8", 8, "measured")
    layout = s.layouts(rid)[0]
    assert layout.status == "measured" and layout.launch == {"argv": ["x"]}  # kept across updates
    assert s.points(rid)[0].metrics["goodput"] == 1.5
    assert [r for _, _, r in s.records(rid)] == [rec]
    assert s.run("20260101-000000").run_id == rid  # unique prefix
    csv_text = export_run(s, rid, "csv", None)
    assert "metadata.eval_run_id" in csv_text.splitlines()[0] and "e1" in csv_text
    per_request = export_run(s, rid, "json", None, per_request=True)
    assert '"ttft_ms": 100.0' in per_request
    with pytest.raises(OrchError, match="not in"):
        s.run("nope")


def test_schema_version_mismatch_is_a_clear_error(tmp_path: Path) -> None:
    s = _store(tmp_path)
    s.conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    s.conn.commit()
    s.close()
    with pytest.raises(OrchError, match="schema version"):
        Store(tmp_path / "r.db")


def test_compare_flags_regressions_beyond_the_threshold(tmp_path: Path) -> None:
    from orchestrator.report.compare import compare_runs

    s = Store(tmp_path / "c.db")
    for rid, goodput, ttft, passed in (
        ("run-a-000001", 2.0, 100.0, True),
        ("run-b-000002", 1.5, 104.0, False),
    ):
        add_run(s, rid)
        s.add_point(
            rid,
            "tp8",
            "rate=4/s",
            4.0,
            passed,
            "" if passed else "SLO not met",
            {"goodput": goodput, "ttft_ms": {"p99": ttft}},
            [],
        )
        s.finish_run(rid, "done", {"winner": "tp8" if passed else None})
    changes = {c.metric: c for c in compare_runs(s, "run-a-000001", "run-b-000002", 0.05)}
    assert changes["goodput req/s"].regression and changes["goodput req/s"].relative == -0.25
    assert "TTFT p99 ms" not in changes  # +4% is inside the 5% threshold
    assert changes["SLO"].regression and changes["winner"].regression
    assert not any(c.regression for c in compare_runs(s, "run-a-000001", "run-a-000001", 0.05))
