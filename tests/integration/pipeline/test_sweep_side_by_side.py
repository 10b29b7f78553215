"""Layouts side by side, end to end on the simulated engine served over HTTP (`--served`): with two
nodes of 8 GPUs, tp8 and tp4x2 are deployed and measured at the same time on disjoint GPUs, each
with its own load-generator process; the decision equals the one-at-a-time sweep's; Ctrl-C in the
middle of a wave leaves no process behind and --resume finishes it. In virtual time the flag
changes nothing."""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import yaml

from orchestrator.store.db import Store
from tests.support.cli import orch
from tests.support.side_by_side import side_by_side_spec
from tests.support.sweep_procs import gone, processes, sim_pids, start_sweep, store_rows

SPEC: dict[str, Any] = side_by_side_spec(num_requests=12)


def _write(tmp_path: Path, name: str = "spec.yaml", **changes: Any) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({**SPEC, **changes}))
    return str(path)


def _sweep(spec: str, db: Path, *flags: str) -> tuple[int, dict[str, Any], str]:
    out = orch("sweep", spec, "--store", str(db), "--json", "--measure-all", *flags)
    # A busy machine can leave a served point unjudged (exit 8); the placement holds either way.
    assert out.returncode in (0, 8), out.stderr[-3000:]
    return out.returncode, json.loads(out.stdout), out.stderr


def _gpus_launched(db: Path, run_id: str) -> dict[str, set[tuple[int, int]]]:
    """Per layout, the (node index, GPU id) pairs its engine processes were launched on: the stored
    plan's node and CUDA_VISIBLE_DEVICES of each process (a simulated replica holds no gpu_ids)."""
    out = {}
    for row in Store(db, readonly=True).layouts(run_id):
        held = set()
        assert row.launch is not None
        for replica in row.launch["replicas"]:
            for proc in replica["processes"]:
                assert proc["gpu_ids"] == []
                devices = proc["env"].get("CUDA_VISIBLE_DEVICES")
                held |= {(proc["node_index"], int(g)) for g in devices.split(",")} if devices else set()
        out[row.layout] = held
    return out


def test_tp8_and_tp4x2_share_two_nodes_and_decide_as_one_at_a_time(tmp_path: Path) -> None:
    spec = _write(tmp_path)
    db = tmp_path / "r.db"
    code, data, err = _sweep(spec, db, "--served", "--side-by-side", "--workdir", str(tmp_path / "w"))
    run_id = data["run_id"]
    assert {x["layout"]: x["status"] for x in data["layouts"]} == {"tp8": "measured", "tp4x2": "measured"}
    place = data["placement"]
    assert place["tp8"]["shared_cluster_with"] == ["tp4x2"]
    assert place["tp4x2"]["shared_cluster_with"] == ["tp8"]
    assert place["tp8"]["wave"] == place["tp4x2"]["wave"] == 1
    assert place["tp8"]["nodes"] == ["node0"] and place["tp4x2"]["nodes"] == ["node1"]
    gpus = _gpus_launched(db, run_id)
    assert gpus["tp8"] == {(0, g) for g in range(8)}
    assert gpus["tp4x2"] == {(1, g) for g in range(8)}  # two replicas: GPUs 0-3 and 4-7 of node1
    assert not gpus["tp8"] & gpus["tp4x2"]
    blocks = [r["gpu_ids"] for replica in place["tp4x2"]["replicas"] for r in replica]
    assert blocks == [[0, 1, 2, 3], [4, 5, 6, 7]]
    for layout in data["layouts"]:
        for p in layout["points"]:
            assert p["metrics"]["side_by_side_with"] == [o for o in ("tp8", "tp4x2") if o != layout["layout"]]
            # 12 requests per measurement (a point close to the SLO on a busy machine is repeated, pooled)
            runs = (p["metrics"].get("repeated") or {}).get("measurements", 1)
            assert p["metrics"]["n_failed"] == 0 and p["metrics"]["n_completed"] == 12 * runs
    assert data["sweep"]["side_by_side"] == "on"
    report = orch("report", run_id, "--store", str(db))
    assert "side by side" in report.stdout and "tp8 on node0 GPUs 0-7" in report.stdout
    assert "tp4x2 on node1 GPUs 0-3, node1 GPUs 4-7" in report.stdout

    code_1, alone, _ = _sweep(spec, tmp_path / "alone.db", "--served", "--one-at-a-time")
    assert alone["placement"] == {} and alone["sweep"]["side_by_side"] == "off"
    assert _gpus_launched(tmp_path / "alone.db", alone["run_id"]) == {"tp8": set(), "tp4x2": set()}
    if code == code_1 == 0:  # both decisions sound: the same winner, the one the spec is built for
        assert data["selection"]["winner"] == alone["selection"]["winner"] == "tp8"
    else:
        assert "could not be judged" in err or code == 0


def test_in_virtual_time_the_flag_changes_nothing(tmp_path: Path) -> None:
    spec = _write(tmp_path)
    _, one, _ = _sweep(spec, tmp_path / "a.db")
    _, both, _ = _sweep(spec, tmp_path / "b.db", "--side-by-side")
    assert both["placement"] == {} and one["selection"]["winner"] == both["selection"]["winner"] == "tp8"
    assert [x["points"] for x in one["layouts"]] == [x["points"] for x in both["layouts"]]


def _loadgen_children(parent: int) -> list[int]:
    """The parent's spawned load-generator processes (multiprocessing's spawn_main)."""
    return [pid for pid, cmd, stat in processes() if int(stat[1]) == parent and "spawn_main" in cmd]


def test_ctrl_c_mid_wave_stops_everything_and_resume_finishes(tmp_path: Path) -> None:
    spec = _write(tmp_path, workload={**SPEC["workload"], "num_requests": 400})
    db = tmp_path / "r.db"
    proc = start_sweep(spec, db, "--side-by-side", "--measure-all", "--json")
    engines: list[int] = []  # the servers and their supervisors
    loadgens: list[int] = []
    ports: list[int] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and (len(loadgens) < 2 or len(ports) < 3) and proc.poll() is None:
        time.sleep(0.5)
        rows = store_rows(db, "SELECT launch_json FROM layouts WHERE status='pending'")
        ports = [r["processes"][0]["ports"][0] for (launch,) in rows if isinstance(launch, str)
                 for r in json.loads(launch)["replicas"]]
        engines = [pid for port in ports for pid in sim_pids(f"--port {port} ")]
        loadgens = _loadgen_children(proc.pid)
    assert len(ports) == 3 and len(loadgens) == 2, "the wave never started measuring both layouts"
    assert all(sim_pids(f"--port {port} ") for port in ports)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err[-2000:]
    assert gone(engines + loadgens, within_s=30)
    with sqlite3.connect(db) as conn:
        run_id, status = conn.execute("SELECT run_id, status FROM runs").fetchone()
    assert status == "interrupted"
    resume = ("--resume", run_id, "--store", str(db), "--json", "--num-requests", "12", "--measure-all")
    out = orch("sweep", *resume)
    assert out.returncode in (0, 8), out.stderr[-3000:]
    data = json.loads(out.stdout)
    assert {x["layout"]: x["status"] for x in data["layouts"]} == {"tp8": "measured", "tp4x2": "measured"}
    assert data["placement"]["tp8"]["shared_cluster_with"] == ["tp4x2"]  # resumed side by side, as started


class _Quiet:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def test_a_layout_that_fails_in_a_wave_does_not_stop_the_other(tmp_path: Path, monkeypatch: Any) -> None:
    from orchestrator.deploy.local import LocalProcessTarget
    from orchestrator.errors import EngineDied
    from orchestrator.pipeline.sweep import Sweep, SweepOptions
    from orchestrator.spec.load import load_spec

    real_wait = LocalProcessTarget.wait_ready
    started: list[int] = []

    def wait_ready(self: LocalProcessTarget, dep: Any, timeout_s: float) -> None:
        if dep.name == "tp4x2":  # as if one of its engines died while loading
            started.extend(h.popen.pid for h in dep.handles)
            raise EngineDied("tp4x2-r1-p0 exited with code 1 before it was ready")
        real_wait(self, dep, timeout_s)

    monkeypatch.setattr(LocalProcessTarget, "wait_ready", wait_ready)
    spec_path = _write(tmp_path)
    store = Store(tmp_path / "r.db")
    options = SweepOptions(served=True, side_by_side="on", measure_all=True, workdir=str(tmp_path / "w"))
    result = Sweep(load_spec(spec_path), store, _Quiet(), options=options).run()
    status = {o.layout: (o.status, o.reason) for o in result.outcomes}
    assert status["tp8"][0] == "measured" and store.points(result.run_id, "tp8")
    assert status["tp4x2"] == ("failed", "tp4x2-r1-p0 exited with code 1 before it was ready")
    assert started and gone(started, within_s=30)  # its supervisors (and so its servers) were stopped
    assert store.extras(result.run_id, "placement/")["placement/tp8"]["shared_cluster_with"] == ["tp4x2"]
