"""What a new user hits with stored runs and multi-node specs, on the simulated engine: `latest` in
every command that takes a run, `--resume` keeping the run's --layouts, a multi-node spec simulated on
this machine, and a real multi-node engine on the local target refused up front."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.support.cli import Orch
from tests.support.paths import ROOT

SPEC = {
    "model": {"name": "qwen2.5-7b", "max_model_len": 4096},
    "hardware": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 2},
    "engine": {"name": "sim", "time_scale": 1.0, "startup_s": 60},
    "workload": {"input_tokens": 256, "output_tokens": 16, "rates_per_s": [4], "num_requests": 12, "seed": 1},
    "slo": {"ttft_p99_ms": 2000, "itl_p99_ms": 200},
    "layouts": ["tp2", "tp1x2", "tp4"],
}


def _write(tmp_path: Path, **changes: object) -> str:
    spec = json.loads(json.dumps(SPEC))
    for key, value in changes.items():
        if isinstance(value, dict):
            spec[key].update(value)
        else:
            spec[key] = value
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def test_resume_keeps_layouts_and_latest_works_everywhere(tmp_path: Path, orch: Orch) -> None:
    db = str(tmp_path / "r.db")
    work = str(tmp_path / "w")
    spec = _write(tmp_path)
    first = orch("sweep", spec, "--layouts", "tp2", "--rates", "3", "--store", db, "--json",
                  "--workdir", work)
    # Exit 3 only when the machine was too busy to keep the simulated clock (the point is then marked
    # unreliable, not judged); what is checked here is the selection, not the verdict.
    assert first.returncode in (0, 3), first.stderr[-3000:]
    run_id = json.loads(first.stdout)["run_id"]
    # --resume without flags repeats the run's own selection: tp2 at 3 req/s only, nothing else deployed.
    again = orch("sweep", "--resume", "latest", "--store", db, "--json", "--workdir", work)
    assert again.returncode in (0, 3), again.stderr[-3000:]
    data = json.loads(again.stdout)
    assert data["run_id"] == run_id
    assert [x["layout"] for x in data["layouts"]] == ["tp2"]
    assert [p["rate"] for p in data["layouts"][0]["points"]] == [3.0]
    assert "tp1x2" not in again.stderr and "tp4" not in again.stderr

    report = orch("report", "latest", "--store", db, "--json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["run_id"] == run_id
    export = orch("export", "latest", "--store", db, "--format", "json")
    assert export.returncode == 0, export.stderr
    assert run_id in export.stdout
    # latest resolves to the one run: a run compared with itself is refused, naming it
    compare = orch("compare", "latest", run_id, "--store", db, "--json")
    assert compare.returncode == 2 and f"are the same run {run_id}" in compare.stderr, compare.stderr
    pin = orch("promote", "latest", "--store", db, "--pin")
    if data["selection"]["winner"]:
        assert pin.returncode == 0, pin.stderr
        assert "serving_layout" in pin.stdout
    else:  # resolved to the run all the same: its id is in the "no winner" line
        assert pin.returncode == 3 and f"run {run_id} has no winner" in pin.stderr, pin.stderr
    # An unknown reference is still one line naming the store.
    bad = orch("report", "nosuchrun", "--store", db)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "orch runs" in bad.stderr


def test_multi_node_spec_is_simulated_here(tmp_path: Path, orch: Orch) -> None:
    # Two nodes of two GPUs: tp4 spans both, tp2x2 puts a replica on each. The node names are
    # placeholders; the simulator stands in for each replica on this machine.
    spec = _write(tmp_path, hardware={"nodes": 2}, layouts=["tp4", "tp2x2"])
    db = str(tmp_path / "r.db")
    out = orch("sweep", spec, "--store", db, "--json", "--workdir", str(tmp_path / "w"))
    assert out.returncode in (0, 3), out.stderr[-3000:]
    layouts = {x["layout"]: x for x in json.loads(out.stdout)["layouts"]}
    for name in ("tp4", "tp2x2"):
        assert layouts[name]["status"] == "measured", layouts[name]["reason"]
        assert layouts[name]["points"][0]["metrics"]["n_completed"] > 0
    assert "Name or service not known" not in out.stdout + out.stderr


def test_real_multi_node_engine_on_local_target_is_refused_up_front(tmp_path: Path, orch: Orch) -> None:
    spec = _write(tmp_path, hardware={"nodes": 2}, engine={"name": "vllm"})
    db = tmp_path / "r.db"
    out = orch("sweep", spec, "--store", str(db))
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "hardware.nodes is 2" in line and "target.kind: ray" in line and spec in line
    # --engine sim on the same spec is the way to try it here.
    assert "--engine sim" in line


def test_calibrate_export_and_compare_as_a_new_user_types_them(tmp_path: Path, orch: Orch) -> None:
    db = str(tmp_path / "r.db")
    spec = _write(tmp_path)
    out = orch("sweep", spec, "--layouts", "tp2,tp1x2", "--rates", "2,6", "--store", db, "--json")
    assert out.returncode in (0, 3), out.stderr[-3000:]
    run_id = json.loads(out.stdout)["run_id"]
    # calibrate takes latest and a unique prefix like every command that takes a run (it took only ids).
    profile = tmp_path / "profile.yaml"
    for ref in ("latest", run_id[:15]):
        cal = orch("calibrate", ref, "--store", db, "--constants", "hbm_efficiency", "--max-requests", "8",
                    "--out", str(profile), "--json")
        assert cal.returncode == 0, cal.stderr
        assert json.loads(cal.stdout)["out"] == str(profile)
        assert yaml.safe_load(profile.read_text())["fitted_from"] == [run_id]
    # Bad export flags are bad input (exit 2, one line), not store failures (exit 1).
    for flags, needle in ((["--format", "yaml"], "--format 'yaml'"), (["--table", "nope"], "--table 'nope'"),
                          (["--format", "parquet"], "give --out"), (["--format", "vllm"], "give --out")):
        bad = orch("export", "latest", "--store", db, *flags)
        assert bad.returncode == 2, (flags, bad.stderr)
        (line,) = bad.stderr.strip().splitlines()
        assert needle in line
    # A warning stays one line in a log 80 columns wide (the spec hashes were split across two).
    other = _write(tmp_path, hardware={"overrides": {"hbm_efficiency": 0.7}})
    second = orch("sweep", other, "--layouts", "tp2,tp1x2", "--rates", "2,6", "--store", db, "--json")
    assert second.returncode in (0, 3), second.stderr[-3000:]
    cmp = orch("compare", run_id, "latest", "--store", db, "--allow-mismatch")
    assert cmp.returncode in (0, 1), cmp.stderr
    warnings = [ln for ln in cmp.stderr.splitlines() if ln.strip()]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("warning: comparing anyway although spec hashes differ")
    assert warnings[0].rstrip().endswith(")"), warnings


def test_the_interactivity_objective_counts_only_points_meeting_the_slo(tmp_path: Path, orch: Orch) -> None:
    # Past its SLO capacity a layout still streams at more tok/s/GPU; with an interactivity target such a
    # failing point reaches, the objective must still quote only a point meeting the SLO. The target is
    # taken from a first sweep (a failing point's own speed per user), so the case holds whatever the
    # profiles predict.
    spec = yaml.safe_load((ROOT / "layouts" / "qwen72b.yaml").read_text())
    first = orch("sweep", str(ROOT / "layouts" / "qwen72b.yaml"), "--layouts", "tp4x2", "--store",
                 str(tmp_path / "first.db"), "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    rows = json.loads(first.stdout)["pareto"]["points"]
    best_passing = max((r for r in rows if r["passed"]), key=lambda r: r["tokens_per_s_per_gpu"])
    failing_faster = [r for r in rows if not r["passed"]
                      and r["tokens_per_s_per_gpu"] > best_passing["tokens_per_s_per_gpu"]]
    assert failing_faster  # a sweep measures past its capacity
    target = max(r["tokens_per_s_per_user"] for r in failing_faster)
    assert target < best_passing["tokens_per_s_per_user"]  # a failing point is not the faster stream
    spec["interactivity_tokens_per_s_per_user"] = round(target, 3) - 0.001
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    db = str(tmp_path / "o.db")
    out = orch("sweep", str(path), "--layouts", "tp4x2", "--store", db, "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    passed = {p["label"]: p["passed"] for p in data["layouts"][0]["points"]}
    at = data["objectives"]["tp4x2"]["at_interactivity"]
    assert passed[at["label"]] and at["among"] == "load points meeting the SLO"
    assert at["label"] == best_passing["label"]
    faster_failing = [
        r
        for r in data["pareto"]["points"]
        if not r["passed"]
        and r["tokens_per_s_per_user"] >= spec["interactivity_tokens_per_s_per_user"]
        and r["tokens_per_s_per_gpu"] > at["tokens_per_s_per_gpu"]
    ]
    assert faster_failing  # the case this test is about is present
    report = orch("report", "latest", "--store", db)
    assert report.returncode == 0, report.stderr
    line = next(x for x in report.stdout.splitlines() if x.startswith("  tp4x2: at capacity"))
    shown = f"{at['tokens_per_s_per_gpu']:.1f} tok/s/GPU ({at['label']})"
    assert f"tok/s/user within the SLO: {shown}" in line
