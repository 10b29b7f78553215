"""A real `orch sweep --served` in the background, and the simulated-server processes it starts (by PID,
from /proc): what the fault tests (pipeline/test_sweep_faults.py, cli/test_store_faults.py) interrupt and
check."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.cli import ORCH


def sigint_default() -> None:
    """In the child: Ctrl-C's default action. A job started in the background of a non-interactive shell
    (a CI runner, nohup) inherits SIGINT ignored, and then Python never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_sweep(spec: str, db: Path, *args: str) -> subprocess.Popen[str]:
    """`orch sweep SPEC --served --store DB ARGS` with its output piped; Ctrl-C reaches it."""
    return subprocess.Popen(
        [*ORCH, "sweep", spec, "--served", "--store", str(db), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )


def store_rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    """Rows of a running sweep's store, read only; none while the store or its tables do not exist yet
    (the file appears before its tables, which a busy machine sees)."""
    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return list(conn.execute(sql).fetchall())
    except sqlite3.OperationalError:
        return []


def first_layout_pids(proc: subprocess.Popen[str], db: Path, settle_s: float) -> list[int]:
    """Block until the sweep's first layout is deployed, wait `settle_s` for its servers to become
    healthy and start measuring, and return their PIDs (servers and supervisors, every replica)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.3)
        rows = store_rows(db, "SELECT launch_json FROM layouts WHERE status='pending'")
        if rows and isinstance(rows[0][0], str):
            ports = [r["processes"][0]["ports"][0] for r in json.loads(rows[0][0])["replicas"]]
            time.sleep(settle_s)
            pids = [pid for port in ports for pid in sim_pids(f"--port {port}")]
            if pids:
                return pids
    raise AssertionError("the first layout's servers never started")


def processes() -> Iterator[tuple[int, str, list[str]]]:
    """(pid, command line, the /proc stat fields after the command name: state, ppid, ...) of every
    process still readable; one that ends while being read is left out."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        yield int(entry.name), cmd, stat


def sim_pids(marker: str) -> list[int]:
    """Live simulated-server processes whose command line mentions `marker` (the run's ports)."""
    return [
        pid for pid, cmd, stat in processes()
        if "orchestrator.sim.server" in cmd and marker in cmd and stat[0] != "Z"
    ]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def gone(pids: list[int], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not any(alive(p) for p in pids)
