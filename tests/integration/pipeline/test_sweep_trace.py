"""A sweep of a trace replays it at its own timestamps: one load point per candidate, labelled `trace`,
no rate searched (every rate would replay the same arrivals, so a search would report a capacity the
trace never tested); `time_scale` speeds it up, and a rate is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import SpecError
from orchestrator.layout import parse_layout
from orchestrator.pipeline.sweep import Sweep, SweepOptions
from orchestrator.spec.load import load_spec, with_workload
from orchestrator.store.db import Store
from tests.support.observers import QuietObserver

LAYOUTS = Path(__file__).resolve().parents[3] / "layouts"



def _mooncake(path: Path, n: int = 60) -> Path:
    """Requests 0.25 s apart; each shares its first two 512-token blocks with every other one."""
    with path.open("w") as f:
        for i in range(n):
            blocks = [0, 1, 100 + i]
            f.write(json.dumps({"timestamp": 250 * i, "input_length": 512 * 2 + 300, "output_length": 40,
                                "hash_ids": blocks}) + "\n")
    return path


def _spec(trace: Path, **workload: object):  # type: ignore[no-untyped-def]
    spec = load_spec(LAYOUTS / "chat-multiturn.yaml")
    slo = spec.slo.model_copy(update={"ttft_later_turns_p90_ms": None})
    w = spec.workload.model_validate({"kind": "trace", "dataset_path": str(trace), "seed": 0, **workload})
    return spec.model_copy(update={"workload": w, "slo": slo, "routing": "round_robin"})


def _sweep(tmp_path: Path, spec, name: str):  # type: ignore[no-untyped-def]
    store = Store(str(tmp_path / f"{name}.db"))
    opts = SweepOptions(layouts=(parse_layout("tp8"), parse_layout("tp4x2")), workdir=str(tmp_path))
    result = Sweep(spec, store, QuietObserver(), options=opts).run()
    points = {o.layout: store.points(result.run_id, o.layout) for o in result.outcomes}
    store.close()
    return result, points


def test_a_trace_sweep_replays_the_trace_once_per_candidate(tmp_path: Path) -> None:
    trace = _mooncake(tmp_path / "mooncake.jsonl")
    result, points = _sweep(tmp_path, _spec(trace), "own")
    assert set(points) == {"tp8", "tp4x2"}
    for rows in points.values():
        assert [(p.label, p.rate) for p in rows] == [("trace", None)]  # one point, no rate searched
        sim = rows[0].metrics["sim"]
        assert rows[0].metrics["n_requests"] == 60 and rows[0].metrics["n_failed"] == 0
        assert 14.0 < sim["virtual_s"] < 30.0  # the last arrival at 14.75 s: the trace's own pace
        assert sim["prefix_cache"]["hit_rate"] > 0.5  # its repeated hash ids hit the prefix cache
    assert result.selection.winner in points
    fast_points = _sweep(tmp_path, _spec(trace, time_scale=2.0), "fast")[1]
    for name, rows in fast_points.items():
        assert rows[0].metrics["sim"]["virtual_s"] < points[name][0].metrics["sim"]["virtual_s"] - 5.0


def test_a_rate_for_a_trace_is_refused(tmp_path: Path) -> None:
    spec = _spec(_mooncake(tmp_path / "mooncake.jsonl"))
    with pytest.raises(SpecError, match="a trace sets its own arrival times; drop rates_per_s"):
        with_workload(spec, rates=[2.0], num_requests=None)
