"""`orch compare` judges regressions with the stored intervals and refuses incomparable runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.report.compare import comparability, compare_runs
from orchestrator.store.db import Store


def _run(
    s: Store,
    rid: str,
    goodput: float,
    iv: list[float] | None,
    *,
    spec_hash: str = "h",
    engine: str = "sim",
    hardware: dict[str, Any] | None = None,
    mode: str = "served",
    capacity: dict[str, Any] | None = None,
    selection: dict[str, Any] | None = None,
) -> None:
    s.create_run(
        run_id=rid,
        spec_path=None,
        spec_json={},
        spec_hash=spec_hash,
        engine=engine,
        engine_version=None,
        model="m",
        model_config_hash=None,
        orch_version="o",
        hardware=hardware or {"gpus": ["H100"]},
        metadata={},
    )
    s.set_extra(rid, "sweep", {"mode": mode})
    metrics: dict[str, Any] = {"goodput": goodput}
    if iv is not None:
        metrics["intervals"] = {"goodput": iv}
    if capacity is None:
        s.add_point(rid, "tp8", "rate=4/s", 4.0, True, "", metrics, [])
    else:
        s.set_extra(rid, "capacity/tp8", capacity)
        s.add_point(
            rid,
            "tp8",
            f"rate={capacity['capacity_per_s']:g}/s",
            capacity["capacity_per_s"],
            True,
            "",
            metrics,
            [],
        )
    s.finish_run(rid, "done", selection or {"winner": "tp8"})


def test_a_drop_inside_the_noise_is_not_a_regression(tmp_path: Path) -> None:
    s = Store(tmp_path / "c.db")
    _run(s, "run-a-000001", 2.0, [1.7, 2.3])
    _run(s, "run-b-000002", 1.8, [1.5, 2.1])  # -10%, beyond a 5% threshold, but the intervals overlap
    _run(s, "run-c-000003", 1.2, [1.1, 1.3])  # -40%, intervals apart
    noisy = {c.metric: c for c in compare_runs(s, "run-a-000001", "run-b-000002", 0.05)}
    assert not noisy["goodput req/s"].regression and "within noise" in noisy["goodput req/s"].note
    real = {c.metric: c for c in compare_runs(s, "run-a-000001", "run-c-000003", 0.05)}
    assert real["goodput req/s"].regression and "intervals apart" in real["goodput req/s"].note


def test_searched_capacities_are_compared_by_capacity_and_score(tmp_path: Path) -> None:
    s = Store(tmp_path / "s.db")

    def sel(score: float, iv: list[float], cap_iv: list[float]) -> dict[str, Any]:
        return {
            "winner": "tp8",
            "verdicts": [
                {"layout": "tp8", "score": score, "score_interval": iv, "capacity_interval": cap_iv}
            ],
        }

    _run(
        s,
        "run-a-000001",
        8.0,
        None,
        capacity={"capacity_per_s": 9.0},
        selection=sel(0.7, [0.66, 0.78], [8.8, 9.4]),
    )
    _run(
        s,
        "run-b-000002",
        6.0,
        None,
        capacity={"capacity_per_s": 7.0},
        selection=sel(0.5, [0.45, 0.55], [6.9, 7.2]),
    )
    changes = {c.metric: c for c in compare_runs(s, "run-a-000001", "run-b-000002", 0.05)}
    assert changes["SLO capacity req/s"].regression and changes["score at capacity"].regression
    assert not any(c.metric == "present" for c in changes.values())  # searched rates differ: not "missing"


def test_comparability_lists_spec_engine_and_hardware_differences(tmp_path: Path) -> None:
    s = Store(tmp_path / "m.db")
    _run(s, "run-a-000001", 2.0, None)
    _run(s, "run-b-000002", 2.0, None, spec_hash="other", engine="vllm", hardware={"gpus": ["H200"]})
    why = comparability(s, "run-a-000001", "run-b-000002")
    assert len(why) == 3 and why[0].startswith("spec hashes differ") and "hardware differs" in why[2]
    _run(s, "run-c-000003", 2.0, None, mode="virtual", hardware={"cpu_model": "x"})
    _run(s, "run-d-000004", 2.0, None, mode="virtual", hardware={"cpu_model": "y"})
    assert comparability(s, "run-c-000003", "run-d-000004") == []  # virtual time: the machine does not matter


def test_the_cli_refuses_incomparable_runs_unless_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.cli import main

    db = tmp_path / "cli.db"
    s = Store(db)
    _run(s, "run-a-000001", 2.0, None)
    _run(s, "run-b-000002", 2.0, None, spec_hash="other")
    s.close()
    args = ["orch", "compare", "run-a-000001", "run-b-000002", "--store", str(db)]
    monkeypatch.setattr(sys, "argv", args)
    with pytest.raises(SystemExit) as refused:
        main()
    assert refused.value.code == 2
    assert "not comparable: spec hashes differ" in " ".join(capsys.readouterr().err.split())
    monkeypatch.setattr(sys, "argv", [*args, "--allow-mismatch"])
    try:
        main()
    except SystemExit as done:
        assert done.code in (0, None)
    out = capsys.readouterr()
    assert "warning: comparing anyway although spec hashes differ" in " ".join(out.err.split())
    assert "no regression" in out.out


def _compare_cli(
    db: Path, a: str, b: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    from orchestrator.cli import main

    monkeypatch.setattr(sys, "argv", ["orch", "compare", a, b, "--store", str(db)])
    code: int | str | None = 0
    try:
        main()
    except SystemExit as done:
        code = done.code
    return int(code or 0), capsys.readouterr().out


def test_identical_runs_print_one_line_and_no_empty_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "same.db"
    s = Store(db)
    _run(s, "run-a-000001", 2.0, [1.9, 2.1])
    _run(s, "run-b-000002", 2.0, [1.9, 2.1])
    s.close()
    code, out = _compare_cli(db, "run-a-000001", "run-b-000002", monkeypatch, capsys)
    assert code == 0
    assert out.splitlines() == [
        "orch compare run-a-000001 -> run-b-000002: no change beyond the 5% threshold: no regression"
    ]


def test_a_narrow_compare_table_keeps_its_title_on_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # narrower than the title, wider than the table
    db = tmp_path / "drop.db"
    s = Store(db)
    _run(s, "20261204-220142-99b970", 2.0, [1.9, 2.1])
    _run(s, "20261204-220148-60d10f", 1.0, [0.9, 1.1])
    s.close()
    code, out = _compare_cli(db, "20261204-220142-99b970", "20261204-220148-60d10f", monkeypatch, capsys)
    assert code == 1  # a regression beyond noise
    lines = out.splitlines()
    assert lines[0] == "orch compare 20261204-220142-99b970 -> 20261204-220148-60d10f (threshold 5%)"
    assert any("goodput req/s" in line for line in lines) and lines[-1] == "1 regression(s)"
