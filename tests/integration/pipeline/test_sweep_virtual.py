"""`orch sweep` in virtual time (the default for engine: sim): deterministic, searches capacity, and
agrees with the same sweep served over HTTP (`--served`) on the same workload seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import orch
from tests.support.paths import ROOT
from tests.support.sim_spec import SPEC, SimSpec


def _sweep(tmp_path: Path, name: str, spec: str, *extra: str) -> dict:  # type: ignore[type-arg]
    out = orch("sweep", spec, "--store", str(tmp_path / f"{name}.db"), "--json", *extra)
    # Served in wall time, a busy machine can leave a point unjudged: exit 8 says the decision is not
    # sound. Virtual time has no such excuse.
    ok = (0, 8) if "--served" in extra else (0,)
    assert out.returncode in ok, out.stderr[-3000:]
    data: dict = json.loads(out.stdout)  # type: ignore[type-arg]
    return data


def _points(data: dict) -> dict[tuple[str, str], dict]:  # type: ignore[type-arg]
    return {(x["layout"], p["label"]): p for x in data["layouts"] for p in x["points"]}


def test_two_virtual_sweeps_give_identical_results(tmp_path: Path, sim_spec: SimSpec) -> None:
    spec = sim_spec(layouts=["tp2", "tp1x2"])
    a, b = _sweep(tmp_path, "a", spec), _sweep(tmp_path, "b", spec)
    assert a["run_id"] != b["run_id"]
    assert a["selection"] == b["selection"] and a["selection"]["winner"] in ("tp2", "tp1x2")
    pa, pb = _points(a), _points(b)
    assert pa.keys() == pb.keys() and pa
    for key in pa:
        assert pa[key]["metrics"] == pb[key]["metrics"], key
        assert pa[key]["metrics"]["measured_in"] == "virtual time"
        # The simulator's gauges, sampled as a scrape would, are stored with every point.
        assert pa[key]["metrics"]["engine"]["samples"] >= 1


def test_capacity_search_is_the_default_without_rates(tmp_path: Path, sim_spec: SimSpec) -> None:
    workload = {k: v for k, v in SPEC["workload"].items() if k != "rates_per_s"}  # type: ignore[union-attr]
    workload.update(num_requests=120, output_tokens=64,
                    search={"tolerance_frac": 0.1, "max_points": 10, "min_rate_per_s": 0.5})
    spec = sim_spec(workload=workload, slo={"itl_p99_ms": 25}, layouts=["tp1x2", "tp2"])
    data = _sweep(tmp_path, "c", spec)
    caps = data["capacity"]
    assert set(caps) == {"tp1x2", "tp2"}
    for name, cap in caps.items():
        lo, hi = cap["bracket_per_s"]
        assert lo is not None and hi is not None and (hi - lo) <= 0.1 * lo * 1.001, cap
        passed = {p["rate"]: p["passed"] for p in cap["points"]}
        assert passed[lo] is True and passed[hi] is False
        assert cap["seed_source"].startswith("planner")
        stored = {p["rate"] for (lay, _), p in _points(data).items() if lay == name}
        assert stored == set(passed), name  # every point of the curve is stored
    best = {v["layout"]: v for v in data["selection"]["verdicts"]}
    winner = data["selection"]["winner"]
    assert best[winner]["best_rate"] == caps[winner]["capacity_per_s"]


def test_an_slo_no_load_meets_is_capacity_zero_with_the_limiting_metric(
    tmp_path: Path, sim_spec: SimSpec
) -> None:
    workload = {k: v for k, v in SPEC["workload"].items() if k != "rates_per_s"}  # type: ignore[union-attr]
    spec = sim_spec(workload=workload, slo={"ttft_p99_ms": 0.5}, layouts=["tp2"])
    out = orch("sweep", spec, "--store", str(tmp_path / "z.db"))
    assert out.returncode == 3, out.stderr[-2000:]
    assert "tp2: capacity 0 req/s: fails the SLO down to the search minimum (ttft_p99_ms" in out.stdout
    assert "Traceback" not in out.stderr


def test_served_and_virtual_sweeps_agree(tmp_path: Path, sim_spec: SimSpec) -> None:
    """Same spec and seed, both measured by loadgen.metrics: served over HTTP at time scale 1 against
    virtual time. What holds on any machine: the same requests complete with the same tokens, and the
    served path is never clearly faster than the model it serves (a busy machine only slows it: the
    HTTP client's and event loop's per-token cost, and lateness). So a served pass implies a virtual
    pass, and where every verdict agrees the winner is the same. How close the latencies are on a
    quiet machine is measured by bench/sim_served_agreement.py (ratios per round), not asserted here."""
    workload = {**SPEC["workload"], "num_requests": 40, "output_tokens": 48, "rates_per_s": [3]}  # type: ignore[dict-item]
    spec = sim_spec(workload=workload, layouts=["tp2", "tp1x2"])
    virtual = _sweep(tmp_path, "v", spec)
    served = _sweep(tmp_path, "s", spec, "--served", "--workdir", str(tmp_path / "w"))
    pv, ps = _points(virtual), _points(served)
    assert pv.keys() == ps.keys() and pv
    same_verdicts = True
    for key, v in pv.items():
        s = ps[key]
        if (s["verdict"] or "").startswith("unreliable"):
            pytest.skip(f"{key}: the machine was too busy for the served simulation to keep its clock")
        mv, ms = v["metrics"], s["metrics"]
        assert ms["n_completed"] == mv["n_completed"] and ms["n_failed"] == 0, key
        assert ms["total_output_tokens"] == mv["total_output_tokens"], key
        if "remeasured_because" in ms or "repeated" in ms or "repeated" in mv:
            # measured again with the next workload seeds (a busy machine's client fell behind its
            # schedule, or a verdict close to the SLO): other arrival times than the one-seed side,
            # so its latencies and throughput are not the same workload's
            same_verdicts = False
            continue
        assert ms["tpot_ms"]["p50"] >= 0.9 * mv["tpot_ms"]["p50"] - 1.0, key
        assert ms["output_throughput"] <= 1.1 * mv["output_throughput"], key
        if s["passed"]:
            assert v["passed"], key
        same_verdicts = same_verdicts and s["passed"] == v["passed"]
    # the same winner where the verdicts agree and neither side's decision was a tie settled within
    # noise (a tie then goes to the higher point estimate, which a busy machine moves: the output says so)
    within_noise = any("within noise" in (d["selection"].get("decided_by") or "") for d in (served, virtual))
    if same_verdicts and not within_noise:
        assert served["selection"]["winner"] == virtual["selection"]["winner"]


def test_served_sweep_prunes_a_predicted_clear_loser_and_measure_all_forces_it(
    tmp_path: Path, sim_spec: SimSpec
) -> None:
    # One GPU (tp1) gives twice the goodput per GPU of tp2 below capacity: tp2 loses clearly.
    spec = sim_spec(layouts=["tp1", "tp2"])
    pruned = _sweep(tmp_path, "p", spec, "--served")
    layouts = {x["layout"]: x for x in pruned["layouts"]}
    assert layouts["tp2"]["status"] == "pruned" and layouts["tp2"]["points"] == []
    assert "more than 1.5x below tp1" in layouts["tp2"]["reason"]
    assert pruned["selection"]["winner"] == "tp1" or not pruned["selection"]["sound"]
    timing = pruned["sweep"]["timing"]
    assert timing["layouts_measured"] == 1 and timing["exhaustive_layouts"] == 2
    assert timing["exhaustive_s"] > 0
    forced = _sweep(tmp_path, "f", spec, "--served", "--measure-all")
    assert {x["layout"]: x["status"] for x in forced["layouts"]} == {"tp1": "measured", "tp2": "measured"}


def test_an_interrupted_capacity_search_resumes_from_its_stored_points(
    tmp_path: Path, sim_spec: SimSpec
) -> None:
    from orchestrator.pipeline.sweep import Sweep, one_candidate
    from orchestrator.spec.load import load_spec
    from orchestrator.store.db import Store
    from orchestrator.store.extras import SideRecords, SweepMode

    class Quiet:
        def __getattr__(self, name: str) -> object:
            return lambda *a, **k: None

    workload = {k: v for k, v in SPEC["workload"].items() if k != "rates_per_s"}  # type: ignore[union-attr]
    workload.update(num_requests=60, search={"tolerance_frac": 0.2, "max_points": 8, "min_rate_per_s": 0.5})
    spec_path = sim_spec(workload=workload, slo={"itl_p99_ms": 25}, layouts=["tp2", "tp1x2"])
    db = tmp_path / "r.db"
    store = Store(db)
    sweep = Sweep(load_spec(spec_path), store, Quiet(), spec_path=spec_path)  # type: ignore[arg-type]
    full = Sweep(load_spec(spec_path), Store(tmp_path / "full.db"), Quiet()).run()  # type: ignore[arg-type]
    store.create_run(run_id=sweep.run_id, spec_path=spec_path,
                     spec_json=sweep.ctx.spec.model_dump(mode="json"),
                     spec_hash="h", engine="sim", engine_version=None, model="qwen2.5-7b",
                     model_config_hash=None, orch_version="t", hardware={}, metadata={})
    SideRecords(store, sweep.run_id).set_sweep(SweepMode("virtual", "auto"))
    one_candidate(sweep.ctx, sweep.ctx.candidate(sweep.ctx.spec.layouts[0]))
    first = [(p.label, p.metrics) for p in store.points(sweep.run_id, "tp2")]
    store.finish_run(sweep.run_id, "interrupted", None)
    store.close()
    out = orch("sweep", "--resume", sweep.run_id, "--store", str(db), "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert set(data["capacity"]) == {"tp2", "tp1x2"} and data["sweep"]["mode"] == "virtual"
    assert [(p.label, p.metrics) for p in Store(db).points(sweep.run_id, "tp2")] == first  # not re-measured
    assert data["selection"]["winner"] == full.selection.winner  # same answer as an uninterrupted sweep


def test_a_layout_the_cost_model_refuses_is_rejected_not_a_crash(tmp_path: Path) -> None:
    # DeepSeek-V3's example spec asks for 32 redundant experts: a 32-rank EP layout has no room for
    # them. The planner raises for that layout; the sweep records it as rejected and goes on.
    out = orch("sweep", str(ROOT / "layouts" / "deepseek-v3.yaml"), "--layouts", "epx32",
                "--store", str(tmp_path / "r.db"), "--json")
    assert out.returncode == 3, out.stderr[-3000:]  # the only layout is rejected: no layout meets the SLO
    assert "Traceback" not in out.stderr
    (layout,) = json.loads(out.stdout)["layouts"]
    assert layout["status"] == "rejected" and "redundant experts" in layout["reason"]
