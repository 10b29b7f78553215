"""Closed-loop sweeps in virtual time (workload.loop: closed): the capacity search over whole numbers
of requests in flight; and, for either loop, a point that stays unjudged in a capacity search is
unknown (stepped around, named in the summary, exit code 8), never a failure."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.candidate import Candidate
from orchestrator.pipeline import sweep as sweep_module
from orchestrator.pipeline.context import SweepContext
from orchestrator.pipeline.points import Measured, PointFn, virtual_point_fn
from orchestrator.pipeline.sweep import Sweep
from orchestrator.spec.load import load_spec
from orchestrator.store.db import Store
from orchestrator.store.extras import SideRecords
from tests.support.cli import Orch
from tests.support.sim_spec import SPEC, SimSpec

UNRELIABLE = "unreliable: the simulated servers lost 30% of their clock (test)"
CLOSED = {"input_tokens": 256, "output_tokens": 64, "num_requests": 120, "seed": 1, "loop": "closed",
          "search": {"tolerance_frac": 0.01, "max_points": 16, "max_concurrency": 256}}


def test_a_closed_loop_sweep_finds_the_highest_concurrency_and_the_next_one_fails(
    tmp_path: Path, orch: Orch, sim_spec: SimSpec
) -> None:
    spec = sim_spec(workload=CLOSED, slo={"itl_p99_ms": 25}, layouts=["tp2"])
    out = orch("sweep", spec, "--store", str(tmp_path / "c.db"), "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    cap = data["capacity"]["tp2"]
    assert cap["by"] == "concurrency" and cap["seed_source"].startswith("planner")
    lo, hi = cap["bracket_concurrency"]
    assert cap["capacity_concurrency"] == lo and isinstance(lo, int | float) and lo >= 1
    assert hi == lo + 1  # a tolerance of 1% below 100 in flight: the neighbour above
    passed = {p["concurrency"]: p["passed"] for p in cap["points"]}
    assert passed[lo] is True and passed[hi] is False
    assert all(c == int(c) for c in passed)
    points = {p["label"]: p for p in data["layouts"][0]["points"]}
    assert set(points) == {f"concurrency={int(c)}" for c in passed}  # every point is stored, by label
    assert all(p["rate"] is None for p in points.values())  # a closed loop has no request rate
    verdict = data["selection"]["verdicts"][0]
    assert data["selection"]["winner"] == "tp2" and verdict["best_point"] == f"concurrency={int(lo)}"
    # points near the bound were measured again with the next workload seeds and judged pooled: their
    # ITL p99 interval (a jackknife over time batches, not a bootstrap over requests that all see the
    # same long step) straddles the 25 ms bound, so they are found close
    repeated = [p["metrics"]["repeated"] for p in points.values() if "repeated" in p["metrics"]]
    assert repeated and all(r["measurements"] >= 2 and "around 25" in r["because"] for r in repeated)
    assert all(r["workload_seeds"][0] == 1 for r in repeated)
    # the printed summary says it in concurrent requests
    page = tmp_path / "c.html"
    text = orch("report", data["run_id"], "--store", str(tmp_path / "c.db"), "--html", str(page))
    flat = " ".join(text.stdout.split())
    assert "offered load (requests in flight, closed loop)" in page.read_text()  # the latency plot's axis
    assert "SLO capacity (highest concurrency meeting the SLO" in flat
    assert f"tp2: capacity {int(lo)} concurrent requests" in flat and f"fails at {int(hi)}" in flat


def test_a_closed_loop_grid_measures_the_given_concurrencies(
    tmp_path: Path, orch: Orch, sim_spec: SimSpec
) -> None:
    workload = {**CLOSED, "concurrency": [2, 8]}
    spec = sim_spec(workload=workload, slo={"itl_p99_ms": 25}, layouts=["tp2"])
    out = orch("sweep", spec, "--store", str(tmp_path / "g.db"), "--json")
    assert out.returncode in (0, 3), out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert [p["label"] for p in data["layouts"][0]["points"]] == ["concurrency=2", "concurrency=8"]
    assert data["capacity"] == {}


def test_a_closed_loop_is_served_too(tmp_path: Path, orch: Orch, sim_spec: SimSpec) -> None:
    workload = {"input_tokens": 256, "output_tokens": 16, "num_requests": 16, "seed": 1, "loop": "closed",
                "concurrency": [2]}
    spec = sim_spec(workload=workload, layouts=["tp2"])
    out = orch("sweep", spec, "--served", "--store", str(tmp_path / "s.db"), "--json",
                "--workdir", str(tmp_path / "w"))
    # served in wall time, a busy machine may leave the point unjudged (exit 8); the rest holds anyway
    assert out.returncode in (0, 3, 8), out.stderr[-3000:]
    (point,) = json.loads(out.stdout)["layouts"][0]["points"]
    assert point["label"] == "concurrency=2" and point["rate"] is None
    m = point["metrics"]
    # all 16 sent; the measured ones are those past the two clients' first wave (the default warm-up)
    assert m["n_requests"] == 16 and m["n_failed"] == 0 and 0 < m["n_completed"] < 16
    # the simulator's prediction beside it is of the same closed loop, not of an open-loop rate
    assert m["predicted"]["load"] == "concurrency=2" and m["predicted"]["max_concurrency"] is None
    assert m["engine"]["samples"] >= 1


def test_concurrency_on_the_command_line_makes_an_open_loop_spec_a_closed_loop_grid(
    tmp_path: Path, orch: Orch, sim_spec: SimSpec
) -> None:
    spec = sim_spec(workload={**OPEN, "max_concurrency": 4}, slo={"itl_p99_ms": 25}, layouts=["tp2"])
    out = orch("sweep", spec, "--concurrency", "2,4", "--store", str(tmp_path / "k.db"), "--json")
    assert out.returncode in (0, 3), out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert [p["label"] for p in data["layouts"][0]["points"]] == ["concurrency=2", "concurrency=4"]
    both = orch("sweep", spec, "--concurrency", "2", "--rates", "3", "--store", str(tmp_path / "k.db"))
    assert both.returncode == 2 and "not both" in both.stderr


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        ({"rates_per_s": [2]}, "rates_per_s is an open-loop grid; with loop: closed give concurrency"),
        ({"max_concurrency": 8}, "max_concurrency caps an open loop"),
        ({"search": {"min_rate_per_s": 2}}, "search.min_rate_per_s bounds an open loop's rate"),
        ({"search": {"min_concurrency": 64, "max_concurrency": 8}}, "must be below max_concurrency (8)"),
        ({"search": {"start_concurrency": 0}}, "start_concurrency: must be greater than or equal to 1"),
    ],
)
def test_bad_closed_loop_specs_are_one_line_errors(
    tmp_path: Path, workload: dict[str, Any], message: str
, orch: Orch, sim_spec: SimSpec) -> None:
    spec = sim_spec(workload={**CLOSED, **workload}, layouts=["tp2"])
    out = orch("validate", spec)
    assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr


def test_concurrency_in_an_open_loop_says_to_close_it(tmp_path: Path, orch: Orch, sim_spec: SimSpec) -> None:
    spec = sim_spec(workload={**SPEC["workload"], "concurrency": [4]})  # type: ignore[dict-item]
    out = orch("validate", spec)
    assert out.returncode == 2 and "concurrency is a closed-loop grid" in out.stderr
    assert "set loop: closed" in out.stderr


# -- an unjudged point in a capacity search ----------------------------------------------------------

OPEN = {k: v for k, v in SPEC["workload"].items() if k != "rates_per_s"}  # type: ignore[union-attr]
OPEN.update(num_requests=120, output_tokens=64,
            search={"tolerance_frac": 0.1, "max_points": 10, "min_rate_per_s": 0.5})


class Quiet:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def _unreliable_at(bad: set[float], calls: list[float]) -> Any:
    def patched(ctx: SweepContext, candidate: Candidate) -> PointFn:
        run = virtual_point_fn(ctx, candidate)

        def point(load: float, k: int) -> Measured:
            calls.append(load)
            m = run(load, k)
            return replace(m, result=replace(m.result, verdict=UNRELIABLE)) if load in bad else m

        return point

    return patched


def test_an_unjudged_point_in_the_search_is_unknown_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
, sim_spec: SimSpec) -> None:
    spec_path = sim_spec(workload=OPEN, slo={"itl_p99_ms": 25}, layouts=["tp2"])
    clean = Sweep(load_spec(spec_path), Store(tmp_path / "clean.db"), Quiet(), spec_path=spec_path)  # type: ignore[arg-type]
    clean.run()
    first = SideRecords(clean.ctx.store, clean.run_id).capacities()["tp2"]
    loads = [p["rate"] for p in first["points"]]
    # the first bisection point: after it, the clean search went on from a pass and a failure
    judged_before = [(p["rate"], p["passed"]) for p in first["points"]]
    k = next(i for i in range(len(loads)) if {ok for _, ok in judged_before[:i]} == {True, False})
    bad = loads[k]

    calls: list[float] = []
    monkeypatch.setattr(sweep_module, "virtual_point_fn", _unreliable_at({bad}, calls))
    sweep = Sweep(load_spec(spec_path), Store(tmp_path / "bad.db"), Quiet(), spec_path=spec_path)  # type: ignore[arg-type]
    result = sweep.run()
    cap = SideRecords(sweep.ctx.store, sweep.run_id).capacities()["tp2"]
    assert calls.count(bad) == 2  # measured again once, then left unknown
    assert cap["unjudged"] == [bad] and cap["bracket_per_s"][1] != bad
    assert calls[: k] == loads[: k] and calls[k + 2] != bad  # stepped around it, not stopped there
    lo, hi = cap["bracket_per_s"]
    assert lo is not None and hi is not None and hi > lo  # the search still brackets the capacity
    assert not result.selection.sound and result.selection.unjudged == (f"tp2 rate={bad:g}/s",)

    monkeypatch.setattr(sys, "argv", ["orch", "sweep", spec_path, "--store", str(tmp_path / "cli.db")])
    from orchestrator.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 8
    out = capsys.readouterr()
    flat = " ".join((out.out + out.err).split())
    assert ("decision not sound: 1 load point(s) could not be judged even when measured again "
            f"(tp2 rate={bad:g}/s)") in flat
    assert f"unjudged (unknown, not failures): rate={bad:g}/s" in flat
