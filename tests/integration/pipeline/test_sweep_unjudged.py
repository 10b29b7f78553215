"""A load point that could not be judged ("unreliable": the served simulation lost its clock) is
measured again; if it stays unjudged the sweep says which points, and `orch sweep` exits 8."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.layout import Layout
from orchestrator.loadgen.bench import PointResult
from orchestrator.pipeline.sweep import Sweep
from orchestrator.spec.load import load_spec
from orchestrator.store.db import Store
from tests.support.sim_spec import write_spec

UNRELIABLE = "unreliable: the simulated servers lost 30% of their clock (test)"


class Quiet:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def _sweep(tmp_path: Path, bad_tries: dict[float, int]) -> tuple[Sweep, list[float]]:
    """A virtual sweep whose first `bad_tries[rate]` measurements of a rate come back unreliable."""
    spec_path = write_spec(tmp_path, layouts=["tp2"])
    sweep = Sweep(load_spec(spec_path), Store(tmp_path / "r.db"), Quiet(), spec_path=spec_path)  # type: ignore[arg-type]
    real = sweep._virtual_point
    calls: list[float] = []

    def patched(layout: Layout) -> Any:
        run = real(layout)

        def point(rate: float, k: int) -> tuple[PointResult, dict[str, Any]]:
            calls.append(rate)
            result, extra = run(rate, k)
            if bad_tries.get(rate, 0) > 0:
                bad_tries[rate] -= 1
                result = replace(result, verdict=UNRELIABLE)
            return result, extra

        return point

    sweep._virtual_point = patched  # type: ignore[method-assign]
    return sweep, calls


def test_an_unreliable_point_is_measured_again_and_judged(tmp_path: Path) -> None:
    sweep, calls = _sweep(tmp_path, {4.0: 1})
    result = sweep.run()
    assert calls == [4.0, 4.0]
    assert result.selection.sound and result.selection.winner == "tp2"
    (point,) = sweep.store.points(sweep.run_id, "tp2")
    assert point.passed and point.metrics["remeasured_because"] == UNRELIABLE


def test_a_point_that_stays_unjudged_makes_the_decision_not_sound(tmp_path: Path) -> None:
    sweep, calls = _sweep(tmp_path, {4.0: 2})
    result = sweep.run()
    assert calls == [4.0, 4.0]
    assert not result.selection.sound and result.selection.unjudged == ("tp2 rate=4/s",)
    assert result.selection.to_dict()["sound"] is False


def test_the_cli_says_which_points_and_exits_8(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    from orchestrator.cli import main

    real = Sweep._virtual_point

    def always_unreliable(self: Sweep, layout: Layout) -> Any:
        run = real(self, layout)
        return lambda rate, k: (replace(run(rate, k)[0], verdict=UNRELIABLE), {})

    monkeypatch.setattr(Sweep, "_virtual_point", always_unreliable)
    monkeypatch.setattr(sys, "argv", ["orch", "sweep", write_spec(tmp_path, layouts=["tp2"]),
                                      "--store", str(tmp_path / "cli.db")])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 8
    out = capsys.readouterr()
    assert "decision not sound: 1 load point(s) could not be judged even when measured again (tp2 rate=4/s)" \
        in " ".join((out.out + out.err).split())
