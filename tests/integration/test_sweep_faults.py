"""Faults during a sweep: an engine killed mid-benchmark, Ctrl-C mid-sweep then --resume, a second
Ctrl-C during teardown, and a kill -9 of orch itself.

Afterwards no engine process of the sweep is alive (checked by PID, from /proc), the store is
consistent and the sweep can be finished."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_sweep_sim import SPEC, _orch, _write  # pytest puts this directory on sys.path


def sigint_default() -> None:
    """In the child: Ctrl-C's default action. A job started in the background of a non-interactive shell
    (a CI runner, nohup) inherits SIGINT ignored, and then Python never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _sim_pids(marker: str) -> list[int]:
    """Live simulated-server processes whose command line mentions `marker` (the run's ports)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if "orchestrator.sim.server" in cmd and marker in cmd and state != "Z":
            pids.append(int(entry.name))
    return pids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_engine_killed_mid_benchmark_is_a_recorded_failure(tmp_path: Path) -> None:
    engine = {**SPEC["engine"], "extra_args": ["--exit-after-requests", "6"]}  # type: ignore[dict-item]
    spec = _write(tmp_path, engine=engine, layouts=["tp2"])
    db = str(tmp_path / "r.db")
    workdir = tmp_path / "w"
    out = _orch("sweep", spec, "--served", "--store", db, "--json", "--workdir", str(workdir))
    assert out.returncode == 3, out.stderr[-2000:]  # the only layout failed: nobody meets the SLO
    data = json.loads(out.stdout)
    layout = data["layouts"][0]
    assert layout["status"] == "failed" and "exited with code 1 during the measurement" in layout["reason"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status FROM runs").fetchone()[0] == "done"
        launch = json.loads(conn.execute("SELECT launch_json FROM layouts").fetchone()[0])
    port = launch["replicas"][0]["processes"][0]["ports"][0]
    assert _sim_pids(f"--port {port}") == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_mid_sweep_leaves_no_process_and_resume_finishes(tmp_path: Path, sig: signal.Signals) -> None:
    spec = _write(
        tmp_path,
        layouts=["tp2", "tp1x2"],
        workload={**SPEC["workload"], "num_requests": 400, "rates_per_s": [4]},
    )  # type: ignore[dict-item]
    db = tmp_path / "r.db"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from orchestrator.cli import main; main()",
            "sweep",
            spec,
            "--served",
            "--store",
            str(db),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )
    launched: list[int] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not launched:
        time.sleep(0.5)
        if db.exists():
            with sqlite3.connect(db) as conn:
                row = conn.execute("SELECT launch_json FROM layouts WHERE status='pending'").fetchone()
            if row and row[0]:
                port = json.loads(row[0])["replicas"][0]["processes"][0]["ports"][0]
                time.sleep(3)  # let it become healthy and start measuring
                launched = _sim_pids(f"--port {port}")
    assert launched, "the first layout's server never started"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "orch sweep --resume" in err
    time.sleep(0.5)
    assert not any(_alive(pid) for pid in launched)
    with sqlite3.connect(db) as conn:
        run_id, status = conn.execute("SELECT run_id, status FROM runs").fetchone()
    assert status == "interrupted"
    out = _orch("sweep", "--resume", run_id, "--store", str(db), "--json", "--num-requests", "12")
    assert out.returncode in (0, 8), out.stderr[-3000:]  # 8: a busy machine left a point unjudged
    data = json.loads(out.stdout)
    assert {x["layout"]: x["status"] for x in data["layouts"]} == {"tp2": "measured", "tp1x2": "measured"}


def _sweep_until_serving(spec: str, db: Path) -> tuple[subprocess.Popen[str], list[int]]:
    """Start `orch sweep` and return once the first layout's simulated servers run (by PID)."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from orchestrator.cli import main; main()",
            "sweep",
            spec,
            "--served",
            "--store",
            str(db),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )
    launched: list[int] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not launched and proc.poll() is None:
        time.sleep(0.5)
        if db.exists():
            with sqlite3.connect(db) as conn:
                row = conn.execute("SELECT launch_json FROM layouts WHERE status='pending'").fetchone()
            if row and row[0]:
                replicas = json.loads(row[0])["replicas"]
                ports = [r["processes"][0]["ports"][0] for r in replicas]
                time.sleep(3)  # let them become healthy and start measuring
                launched = [pid for port in ports for pid in _sim_pids(f"--port {port}")]
    assert launched, "the first layout's servers never started"
    return proc, launched


def _gone(pids: list[int], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not any(_alive(p) for p in pids)


def test_kill_9_of_orch_takes_its_engines_and_resume_finishes(tmp_path: Path) -> None:
    spec = _write(
        tmp_path, layouts=["tp1x2"], workload={**SPEC["workload"], "num_requests": 400, "rates_per_s": [4]}
    )  # type: ignore[dict-item]
    db = tmp_path / "r.db"
    proc, launched = _sweep_until_serving(spec, db)
    assert len(launched) == 4  # two replicas: each server and its supervisor
    proc.kill()  # SIGKILL: orch runs no teardown of its own
    proc.communicate(timeout=60)
    assert _gone(launched, within_s=60), "engines outlived a kill -9 of orch"
    with sqlite3.connect(db) as conn:
        run_id, status = conn.execute("SELECT run_id, status FROM runs").fetchone()
    assert status == "running"  # nothing could mark it; the layout is still pending
    out = _orch("sweep", "--resume", run_id, "--store", str(db), "--json", "--num-requests", "12")
    assert out.returncode in (0, 8), out.stderr[-3000:]  # 8: a busy machine left a point unjudged
    assert json.loads(out.stdout)["layouts"][0]["status"] == "measured"


SIGTERM_BLOCKED = "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"


def test_second_ctrl_c_during_teardown_still_stops_every_engine(tmp_path: Path) -> None:
    # Engines that do not stop on SIGTERM keep teardown in its grace period (10 s) long enough for a
    # second Ctrl-C to land in it; it must not abandon them (they die by SIGKILL before orch exits).
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SIGTERM_BLOCKED)
    env = {"PYTHONPATH": os.pathsep.join([str(site), *sys.path])}
    engine = {**SPEC["engine"], "env": env}  # type: ignore[dict-item]
    spec = _write(
        tmp_path,
        engine=engine,
        layouts=["tp1x2"],
        workload={**SPEC["workload"], "num_requests": 400, "rates_per_s": [4]},
    )  # type: ignore[dict-item]
    db = tmp_path / "r.db"
    proc, launched = _sweep_until_serving(spec, db)
    proc.send_signal(signal.SIGINT)
    time.sleep(2)  # teardown has sent SIGTERM and waits out the grace period
    assert all(_alive(p) for p in launched) and proc.poll() is None
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "orch sweep --resume" in err
    # Without held signals orch would exit now and leave them to the supervisor's own grace period.
    assert _gone(launched, within_s=3), "a second Ctrl-C abandoned engines in teardown"
