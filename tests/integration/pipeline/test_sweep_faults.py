"""Faults during a sweep: an engine killed mid-benchmark, Ctrl-C mid-sweep then --resume, a second
Ctrl-C during teardown, and a kill -9 of orch itself.

Afterwards no engine process of the sweep is alive (checked by PID, from /proc), the store is
consistent and the sweep can be finished."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import Orch
from tests.support.sim_spec import SPEC, SimSpec
from tests.support.sweep_procs import alive, first_layout_pids, gone, processes, sim_pids, start_sweep


def test_engine_killed_mid_benchmark_is_a_recorded_failure(
    tmp_path: Path, orch: Orch, sim_spec: SimSpec
) -> None:
    engine = {**SPEC["engine"], "extra_args": ["--exit-after-requests", "6"]}  # type: ignore[dict-item]
    spec = sim_spec(engine=engine, layouts=["tp2"])
    db = str(tmp_path / "r.db")
    workdir = tmp_path / "w"
    out = orch("sweep", spec, "--served", "--store", db, "--json", "--workdir", str(workdir))
    assert out.returncode == 4, out.stderr[-2000:]  # the only layout failed: infrastructure, not the SLO
    data = json.loads(out.stdout)
    layout = data["layouts"][0]
    assert layout["status"] == "failed" and "exited with code 1 during the measurement" in layout["reason"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status FROM runs").fetchone()[0] == "done"
        launch = json.loads(conn.execute("SELECT launch_json FROM layouts").fetchone()[0])
    port = launch["replicas"][0]["processes"][0]["ports"][0]
    assert sim_pids(f"--port {port}") == []


def test_engine_killed_by_sigkill_is_reported_as_such(tmp_path: Path, sim_spec: SimSpec) -> None:
    """The out-of-memory killer's signal: the supervisor must mirror it, not crash re-raising it (its
    traceback was the stored reason and the engine read as "exited with code 1")."""
    workload = {**SPEC["workload"], "num_requests": 400}  # type: ignore[dict-item]
    spec = sim_spec(layouts=["tp2"], workload=workload)
    db = tmp_path / "r.db"
    proc = start_sweep(spec, db, "--json")
    launched = first_layout_pids(proc, db, settle_s=2)
    engines = [pid for pid, cmd, _ in processes() if pid in launched and "supervise.py" not in cmd]
    assert len(engines) == 1, launched
    os.kill(engines[0], signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 4, err[-3000:]  # no layout could be measured: infrastructure
    reason = json.loads(out)["layouts"][0]["reason"]
    assert "was killed by signal 9 (SIGKILL, the out-of-memory killer's signal)" in reason, reason
    assert "Traceback" not in reason and "exited with code" not in reason
    assert gone(launched, within_s=60)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_mid_sweep_leaves_no_process_and_resume_finishes(
    tmp_path: Path, sig: signal.Signals, orch: Orch, sim_spec: SimSpec
) -> None:
    spec = sim_spec(
        layouts=["tp2", "tp1x2"],
        workload={**SPEC["workload"], "num_requests": 400, "rates_per_s": [4]},
    )  # type: ignore[dict-item]
    db = tmp_path / "r.db"
    proc = start_sweep(spec, db, "--json")
    launched = first_layout_pids(proc, db, settle_s=3)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "orch sweep --resume" in err
    time.sleep(0.5)
    assert not any(alive(pid) for pid in launched)
    with sqlite3.connect(db) as conn:
        run_id, status = conn.execute("SELECT run_id, status FROM runs").fetchone()
    assert status == "interrupted"
    out = orch("sweep", "--resume", run_id, "--store", str(db), "--json", "--num-requests", "12")
    assert out.returncode in (0, 8), out.stderr[-3000:]  # 8: a busy machine left a point unjudged
    data = json.loads(out.stdout)
    assert {x["layout"]: x["status"] for x in data["layouts"]} == {"tp2": "measured", "tp1x2": "measured"}


def test_kill_9_of_orch_takes_its_engines_and_resume_finishes(
    tmp_path: Path, orch: Orch, sim_spec: SimSpec
) -> None:
    spec = sim_spec(
        layouts=["tp1x2"], workload={**SPEC["workload"], "num_requests": 400, "rates_per_s": [4]}
    )  # type: ignore[dict-item]
    db = tmp_path / "r.db"
    proc = start_sweep(spec, db)
    launched = first_layout_pids(proc, db, settle_s=3)
    assert len(launched) == 4  # two replicas: each server and its supervisor
    proc.kill()  # SIGKILL: orch runs no teardown of its own
    proc.communicate(timeout=60)
    assert gone(launched, within_s=60), "engines outlived a kill -9 of orch"
    with sqlite3.connect(db) as conn:
        run_id, status = conn.execute("SELECT run_id, status FROM runs").fetchone()
    assert status == "running"  # nothing could mark it; the layout is still pending
    out = orch("sweep", "--resume", run_id, "--store", str(db), "--json", "--num-requests", "12")
    assert out.returncode in (0, 8), out.stderr[-3000:]  # 8: a busy machine left a point unjudged
    assert json.loads(out.stdout)["layouts"][0]["status"] == "measured"


SIGTERM_BLOCKED = "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"


def test_second_ctrl_c_during_teardown_still_stops_every_engine(tmp_path: Path, sim_spec: SimSpec) -> None:
    # Engines that do not stop on SIGTERM keep teardown in its grace period (10 s) long enough for a
    # second Ctrl-C to land in it; it must not abandon them (they die by SIGKILL before orch exits).
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SIGTERM_BLOCKED)
    env = {"PYTHONPATH": os.pathsep.join([str(site), *sys.path])}
    engine = {**SPEC["engine"], "env": env}  # type: ignore[dict-item]
    spec = sim_spec(
        engine=engine,
        layouts=["tp1x2"],
        workload={**SPEC["workload"], "num_requests": 400, "rates_per_s": [4]},
    )  # type: ignore[dict-item]
    db = tmp_path / "r.db"
    proc = start_sweep(spec, db)
    launched = first_layout_pids(proc, db, settle_s=3)
    proc.send_signal(signal.SIGINT)
    time.sleep(2)  # teardown has sent SIGTERM and waits out the grace period
    assert all(alive(p) for p in launched) and proc.poll() is None
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "orch sweep --resume" in err
    # Without held signals orch would exit now and leave them to the supervisor's own grace period.
    assert gone(launched, within_s=3), "a second Ctrl-C abandoned engines in teardown"
