"""A load point that could not be judged ("unreliable": the served simulation lost its clock) is
measured again; if it stays unjudged the sweep says which points, and `orch sweep` exits 8."""

from __future__ import annotations

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
from tests.support.sim_spec import write_spec

UNRELIABLE = "unreliable: the simulated servers lost 30% of their clock (test)"


class Quiet:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def _sweep(
    tmp_path: Path, bad_tries: dict[float, int], monkeypatch: pytest.MonkeyPatch
) -> tuple[Sweep, list[float]]:
    """A virtual sweep whose first `bad_tries[rate]` measurements of a rate come back unreliable."""
    spec_path = write_spec(tmp_path, layouts=["tp2"])
    sweep = Sweep(load_spec(spec_path), Store(tmp_path / "r.db"), Quiet(), spec_path=spec_path)  # type: ignore[arg-type]
    calls: list[float] = []

    def patched(ctx: SweepContext, candidate: Candidate) -> PointFn:
        run = virtual_point_fn(ctx, candidate)

        def point(rate: float, k: int) -> Measured:
            calls.append(rate)
            m = run(rate, k)
            if bad_tries.get(rate, 0) > 0:
                bad_tries[rate] -= 1
                return replace(m, result=replace(m.result, verdict=UNRELIABLE))
            return m

        return point

    monkeypatch.setattr(sweep_module, "virtual_point_fn", patched)
    return sweep, calls


def test_an_unreliable_point_is_measured_again_and_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep, calls = _sweep(tmp_path, {4.0: 1}, monkeypatch)
    result = sweep.run()
    assert calls == [4.0, 4.0]
    assert result.selection.sound and result.selection.winner == "tp2"
    (point,) = sweep.ctx.store.points(sweep.run_id, "tp2")
    assert point.passed and point.metrics["remeasured_because"] == UNRELIABLE


def test_a_point_that_stays_unjudged_makes_the_decision_not_sound(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    sweep, calls = _sweep(tmp_path, {4.0: 2}, monkeypatch)
    result = sweep.run()
    assert calls == [4.0, 4.0]
    assert not result.selection.sound and result.selection.unjudged == ("tp2 rate=4/s",)
    assert result.selection.to_dict()["sound"] is False


def test_the_cli_says_which_points_and_exits_8(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    from orchestrator.cli import main

    def always_unreliable(ctx: SweepContext, candidate: Candidate) -> PointFn:
        run = virtual_point_fn(ctx, candidate)
        return lambda rate, k: Measured(replace(run(rate, k).result, verdict=UNRELIABLE), {})

    monkeypatch.setattr(sweep_module, "virtual_point_fn", always_unreliable)
    monkeypatch.setattr(sys, "argv", ["orch", "sweep", write_spec(tmp_path, layouts=["tp2"]),
                                      "--store", str(tmp_path / "cli.db")])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 8
    out = capsys.readouterr()
    assert "decision not sound: 1 load point(s) could not be judged even when measured again (tp2 rate=4/s)" \
        in " ".join((out.out + out.err).split())
