"""Delivered load (issue 29): a served point whose load generator fell behind its schedule is not a
measurement at its rate. It is measured again; if it stays short it is stored under what it received,
never under the target's label, left unjudged, and `orch sweep` exits 8.

The sweep's own served point function (pipeline/points.served_point_fn: the delivery check) runs over
a Bench on its seam whose records are the simulator's with the sends stretched, as a client that
falls behind stretches them."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.candidate import Candidate
from orchestrator.loadgen.bench import LoadPoint, PointResult
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.search import verdict
from orchestrator.loadgen.spec_workload import slo_bounds
from orchestrator.pipeline import sweep as sweep_module
from orchestrator.pipeline.context import SweepContext
from orchestrator.pipeline.points import PointFn, served_point_fn, virtual_point_fn
from orchestrator.pipeline.sweep import Sweep
from orchestrator.spec.load import load_spec
from orchestrator.store.db import Store
from tests.support.sim_spec import SPEC, write_spec

WORKLOAD = {**SPEC["workload"], "num_requests": 60}


class Quiet:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


class Alive:
    """The served deployment's face the point function uses: its engines never die here."""

    def check_alive(self) -> None:
        return None


def stretched(records: tuple[RequestRecord, ...], factor: float) -> list[RequestRecord]:
    """The records as a client delivers them when it sends at 1/factor of its schedule."""
    out = []
    for r in records:
        dt = r.scheduled_s * (factor - 1)
        out.append(replace(r, sent_s=r.sent_s + dt, done_s=None if r.done_s is None else r.done_s + dt,
                           chunk_times_s=tuple(t + dt for t in r.chunk_times_s)))
    return out


def patch(monkeypatch: pytest.MonkeyPatch, short_tries: dict[float, int]) -> list[tuple[float, int]]:
    """Served point functions whose first `short_tries[rate]` tries deliver about half the rate."""
    calls: list[tuple[float, int]] = []

    def point_fn(ctx: SweepContext, candidate: Candidate) -> PointFn:
        simulate = virtual_point_fn(ctx, candidate)
        spec = ctx.spec

        class LaggingBench:
            def point(
                self, point: LoadPoint, num_requests: int | None, k: int
            ) -> tuple[PointResult, dict[str, Any]]:
                rate = point.rate or 0.0
                calls.append((rate, k))
                result = simulate(rate, k).result
                if short_tries.get(rate, 0) <= 0:
                    return result, {}
                short_tries[rate] -= 1
                records = stretched(result.records, 1.9)
                slo = slo_bounds(spec.slo)
                m = compute_metrics(records, warmup_s=spec.workload.warmup_s, gpus=candidate.gpus, slo=slo)
                return PointResult(point, m, tuple(records), verdict(m, slo, spec.slo.max_error_rate)), {}

        return served_point_fn(ctx, candidate, Alive(), LaggingBench())  # type: ignore[arg-type]

    monkeypatch.setattr(sweep_module, "virtual_point_fn", point_fn)
    return calls


def make_sweep(tmp_path: Path, run_id: str | None = None) -> Sweep:
    spec_path = write_spec(tmp_path, layouts=["tp2"], workload=WORKLOAD)
    return Sweep(load_spec(spec_path), Store(tmp_path / "r.db"), Quiet(), spec_path=spec_path,  # type: ignore[arg-type]
                 run_id=run_id)


def test_a_point_short_once_is_measured_again_and_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = patch(monkeypatch, {4.0: 1})
    sweep = make_sweep(tmp_path)
    result = sweep.run()
    assert calls == [(4.0, 0), (4.0, 1)] and result.selection.sound
    (point,) = sweep.ctx.store.points(sweep.run_id, "tp2")
    assert point.label == "rate=4/s" and point.metrics["delivery"]["short_because"] is None
    first = point.metrics["remeasured_because"]
    assert first.startswith("unreliable: load not delivered: the client sent ") and "of the" in first


def test_a_point_that_stays_short_is_stored_as_what_it_received(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = patch(monkeypatch, {4.0: 2})
    sweep = make_sweep(tmp_path)
    result = sweep.run()
    assert calls == [(4.0, 0), (4.0, 1)]
    (point,) = sweep.ctx.store.points(sweep.run_id, "tp2")
    assert "rate=4/s" not in point.label  # never under the target's label
    assert point.label.startswith("rate~") and point.label.endswith("(4/s asked, not delivered)")
    achieved = point.metrics["delivery"]["achieved_per_s"]
    assert point.label.startswith(f"rate~{achieved:.4g}/s") and achieved < 0.9 * 4.0 * 0.95
    assert point.passed is False and (point.verdict or "").startswith("unreliable: load not delivered")
    assert not result.selection.sound and result.selection.unjudged == (f"tp2 {point.label}",)
    # Resumed, the search finds the short point by its asked rate and does not measure it again.
    monkeypatch.setattr(sweep_module, "virtual_point_fn", lambda *a: pytest.fail("measured again"))
    again = make_sweep(tmp_path, run_id=sweep.run_id).run()
    assert again.selection.unjudged == result.selection.unjudged


def test_the_cli_exits_8_naming_the_short_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from orchestrator.cli import main

    patch(monkeypatch, {4.0: 2})
    spec = write_spec(tmp_path, layouts=["tp2"], workload=WORKLOAD)
    monkeypatch.setattr(sys, "argv", ["orch", "sweep", spec, "--store", str(tmp_path / "cli.db")])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 8
    out = " ".join("".join(capsys.readouterr()).split())
    assert "1 load point(s) could not be judged even when measured again (tp2 rate~" in out
    assert "4/s asked, not delivered)" in out
