"""`orch` against a results store that fails: every read command on a missing or garbage store, and a
real `orch sweep` (simulated engine) whose store is locked, made unwritable, deleted or truncated
while it measures. Afterwards: one line on stderr, no engine process left, and no measured point
lost (in the store, or in the journal that `orch sweep --resume` replays)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import threading
from pathlib import Path

import pytest

from tests.support.cli import Orch
from tests.support.sim_spec import SPEC, SimSpec
from tests.support.sweep_procs import first_layout_pids, gone, start_sweep

READERS = [
    ("runs",),
    ("report", "20260101-000000-abcdef"),
    ("export", "20260101-000000-abcdef"),
    ("compare", "20260101-000000-abcdef", "20260101-000000-abcdef"),
    ("promote", "20260101-000000-abcdef", "--pin"),
]


@pytest.mark.parametrize("kind", ["missing", "garbage"])
def test_every_read_command_says_one_line_about_a_bad_store(tmp_path: Path, kind: str, orch: Orch) -> None:
    db = tmp_path / "r.db"
    if kind == "garbage":
        db.write_bytes(b"this is not a results store\n" * 200)
    for args in READERS:
        out = orch(*args, "--store", str(db))
        lines = [line for line in out.stderr.splitlines() if line.strip()]
        assert out.returncode == 1, (args, out.stderr[-2000:])
        assert len(lines) == 1 and "Traceback" not in out.stderr, (args, out.stderr[-2000:])
        assert str(db) in lines[0]
        assert (
            "no results store there" if kind == "missing" else "not a readable orch results store"
        ) in lines[0]
        assert db.exists() == (kind == "garbage")  # a read never creates a store


def _unwritable(db: Path) -> list[list[str]]:
    """Make the store unwritable under the running sweep; return the commands that undo it. Root
    ignores file modes: as root the file is made immutable, otherwise its directory read-only."""
    if os.geteuid() == 0:
        done = subprocess.run(["chattr", "+i", str(db)], capture_output=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"as root, making a file unwritable needs chattr +i: {done.stderr!r}")
        return [["chattr", "-i", str(db)]]
    db.parent.chmod(0o555)
    return [["chmod", "755", str(db.parent)]]


@pytest.mark.parametrize("fault", ["locked", "unwritable", "deleted", "truncated"])
def test_a_store_failing_mid_sweep_loses_no_point(
    tmp_path: Path, fault: str, orch: Orch, sim_spec: SimSpec
) -> None:
    spec = sim_spec(
        layouts=["tp2", "tp1x2"],
        workload={**SPEC["workload"], "num_requests": 40, "rates_per_s": [8]},
    )  # type: ignore[dict-item]
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    db = store_dir / "r.db"
    # --served: real servers over HTTP, so a store fails while engines run
    proc = start_sweep(spec, db)
    engines = first_layout_pids(proc, db, settle_s=1.5)  # healthy and measuring (a point takes ~5 s)
    undo: list[list[str]] = []
    if fault == "locked":  # another writer holds the store for a while: the sweep waits, then writes
        other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN EXCLUSIVE")
        threading.Timer(8, other.execute, ("COMMIT",)).start()
    elif fault == "unwritable":
        undo = _unwritable(db)
    elif fault == "deleted":
        db.unlink()
    else:
        os.truncate(db, 0)
    try:
        _, err = proc.communicate(timeout=240)
    finally:
        for cmd in undo:
            subprocess.run(cmd, check=True)
    assert "Traceback" not in err, err[-3000:]
    assert gone(engines, within_s=30), "engines outlived the failed store"
    if fault == "locked":
        assert proc.returncode in (0, 8), err[-3000:]  # 8: a busy machine left a point unjudged
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT count(*) FROM points").fetchone()[0] == 2
        assert not list(store_dir.glob("*.journal.jsonl"))  # done: the store holds everything
        return
    assert proc.returncode == 1, err[-3000:]
    line = [x for x in err.splitlines() if x.strip()][-1]
    (journal,) = store_dir.glob("r.db.*.journal.jsonl")
    run_id = journal.name.split(".")[2]
    assert str(journal) in line and f"orch sweep --resume {run_id} --store {db}" in line, line
    why = {"unwritable": "read-only", "deleted": "was deleted", "truncated": "emptied or truncated"}[fault]
    assert why in line, line
    entries = [json.loads(x) for x in journal.read_text().splitlines()]
    measured = [e["args"] for e in entries if e["op"] == "add_point"]
    if fault == "truncated" and not measured:
        # An emptied store also fails the sweep's reads (the load points already done, read back
        # before measuring): then it stopped before measuring anything, and said so.
        assert "cannot read the results store" in line, line
    else:
        assert [(m["layout"], len(m["records"])) for m in measured] == [("tp2", 40)]
    out = orch("sweep", "--resume", run_id, "--store", str(db), "--json")
    assert out.returncode in (0, 8), out.stderr[-3000:]  # 8: a busy machine left a point unjudged
    data = json.loads(out.stdout)
    assert {x["layout"]: x["status"] for x in data["layouts"]} == {"tp2": "measured", "tp1x2": "measured"}
    with sqlite3.connect(db) as conn:
        stored = conn.execute("SELECT created_at FROM points WHERE layout='tp2'").fetchone()[0]
        n_records = conn.execute("SELECT count(*) FROM records WHERE layout='tp2'").fetchone()[0]
    assert n_records == 40
    if measured:
        assert stored == measured[0]["created_at"]  # the journal's point, not measured again
    assert not journal.exists()
