"""The store under faults: a lock held by another connection, a store made unwritable, deleted or
truncated under a run, and read-only opens of missing or garbage paths. After each: nothing written
is lost (it is in the store or in the journal beside it) and the error is one line saying what to do."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.errors import StoreError
from orchestrator.store import faults
from orchestrator.store.db import Store
from orchestrator.store.journal import journal_path
from tests.support.paths import pythonpath_env
from tests.support.store_runs import REC, RUN_ID, start_journaled_run

RUN = RUN_ID


def _run(store: Store) -> None:
    start_journaled_run(store, RUN)


def _point(store: Store, label: str = "rate=2/s") -> None:
    store.add_point(RUN, "tp2", label, 2.0, True, "", {"goodput": 1.5}, [REC])


def _journal_ops(db: Path) -> list[str]:
    lines = journal_path(db, RUN).read_text().splitlines()
    return [json.loads(line)["op"] for line in lines]


def _recovered(db: Path) -> Store:
    store = Store(db)
    assert store.recover(RUN) == RUN
    return store


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faults, "BUSY_PAUSE_S", 0.01)


def test_a_lock_held_for_a_while_is_waited_out(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    store = Store(db, busy_timeout_s=60)
    _run(store)
    other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(0.5, other.execute, ("COMMIT",))
    release.start()
    _point(store)  # blocks until the other connection lets go
    release.join()
    assert [p.label for p in store.points(RUN)] == ["rate=2/s"]
    assert [r for _, _, r in store.records(RUN)] == [REC]


def test_a_lock_held_too_long_stops_with_the_journal_and_resume_replays_it(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    store = Store(db, busy_timeout_s=0.05)
    _run(store)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    with pytest.raises(StoreError) as err:
        _point(store)
    msg = str(err.value)
    assert "\n" not in msg and "database is locked" in msg
    assert str(journal_path(db, RUN)) in msg and f"orch sweep --resume {RUN} --store {db}" in msg
    assert _journal_ops(db)[-1] == "add_point"
    other.execute("COMMIT")
    store.close()
    again = _recovered(db)
    assert [p.label for p in again.points(RUN)] == ["rate=2/s"]
    assert [r for _, _, r in again.records(RUN)] == [REC]


@pytest.fixture
def unwritable() -> Iterator[object]:
    """Make a store unwritable under an open connection. Root ignores file modes, so as root the file
    is made immutable (chattr +i); otherwise its directory is made read-only (SQLite then cannot
    create its rollback journal). The journal beside the store is already open and stays writable."""
    undo: list[list[str] | Path] = []

    def apply(db: Path) -> None:
        if os.geteuid() == 0:
            done = subprocess.run(["chattr", "+i", str(db)], capture_output=True, check=False)
            if done.returncode != 0:
                pytest.skip(f"as root, making a file unwritable needs chattr +i: {done.stderr!r}")
            undo.append(["chattr", "-i", str(db)])
        else:
            db.parent.chmod(0o555)
            undo.append(db.parent)

    yield apply
    for step in undo:
        if isinstance(step, Path):
            step.chmod(0o755)
        else:
            subprocess.run(step, check=True)
    undo.clear()


def test_a_store_made_unwritable_mid_run_keeps_the_point_in_the_journal(
    tmp_path: Path, unwritable: object
) -> None:
    db = tmp_path / "r.db"
    store = Store(db)
    _run(store)
    _point(store, "rate=1/s")
    unwritable(db)  # type: ignore[operator]
    with pytest.raises(StoreError, match="cannot write the results store") as err:
        _point(store, "rate=2/s")
    assert "\n" not in str(err.value) and str(journal_path(db, RUN)) in str(err.value)
    assert _journal_ops(db)[-1] == "add_point"
    store.close()
    with pytest.raises(StoreError, match=r"cannot (open|replay).* read-only"):
        _recovered(db)  # still unwritable: a clear line, and the journal stays
    assert journal_path(db, RUN).exists()


def test_unwritable_then_fixed_store_gets_every_point_back(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    store = Store(db)
    _run(store)
    _point(store, "rate=1/s")
    store.conn.execute("PRAGMA query_only = ON")  # this connection can no longer write
    with pytest.raises(StoreError, match="readonly"):
        _point(store, "rate=2/s")
    store.close()
    again = _recovered(db)
    assert [p.label for p in again.points(RUN)] == ["rate=1/s", "rate=2/s"]
    assert again.layouts(RUN)[0].launch == {"argv": ["x"]}


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_a_store_deleted_or_truncated_mid_run_is_rebuilt_from_the_journal(
    tmp_path: Path, damage: str
) -> None:
    db = tmp_path / "r.db"
    store = Store(db)
    _run(store)
    _point(store, "rate=1/s")
    if damage == "delete":
        db.unlink()
    else:
        os.truncate(db, 0)
    with pytest.raises(StoreError) as err:
        _point(store, "rate=2/s")
    assert "\n" not in str(err.value)
    assert ("was deleted" if damage == "delete" else "emptied or truncated") in str(err.value)
    store.close()
    again = _recovered(db)  # a fresh store at the same path, filled from the journal
    assert again.run(RUN).metadata == {"eval_run_id": "e1"}
    assert [p.label for p in again.points(RUN)] == ["rate=1/s", "rate=2/s"]
    again.journal_run(RUN)
    again.set_layout(RUN, "tp2", 2, "measured")
    again.finish_run(RUN, "done", {"winner": "tp2"})
    assert not journal_path(db, RUN).exists()  # the store holds the whole run now
    assert Store(db, readonly=True).run(RUN).status == "done"


def test_a_torn_last_journal_line_is_ignored(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    store = Store(db)
    _run(store)
    _point(store)
    store.close()
    db.unlink()
    with journal_path(db, RUN).open("a") as f:
        f.write('{"op": "add_point", "args": {"run_')  # a crash mid-append
    again = _recovered(db)
    assert [p.label for p in again.points(RUN)] == ["rate=2/s"]


def test_read_only_opens_never_create_a_store_and_say_what_is_wrong(tmp_path: Path) -> None:
    missing = tmp_path / "nope.db"
    with pytest.raises(StoreError, match="no results store there"):
        Store(missing, readonly=True)
    assert not missing.exists()
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not sqlite at all\n" * 100)
    with pytest.raises(StoreError, match="not a readable orch results store"):
        Store(garbage, readonly=True)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE x (a)").connection.commit()
    with pytest.raises(StoreError, match="not an orch results store"):
        Store(other, readonly=True)
    with pytest.raises(StoreError, match="not a regular file"):
        Store(tmp_path, readonly=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["garbage.db", "other.db"]


def test_a_store_damaged_after_open_is_one_line_on_read(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    store = Store(db)
    _run(store)
    for i in range(50):
        store.add_point(RUN, "tp2", f"rate={i}/s", float(i), True, "", {"x": "y" * 2000}, [REC] * 20)
    store.close()
    reader = Store(db, readonly=True)
    size = db.stat().st_size
    with db.open("r+b") as f:  # scribble over everything after the first page
        f.seek(4096)
        f.write(os.urandom(size - 4096))
    with pytest.raises(StoreError, match="cannot read the results store"):
        list(reader.records(RUN))


DISK_FULL = """
import resource, sys
from pathlib import Path
from orchestrator.errors import StoreError
from orchestrator.store.db import Store
from tests.support.store_runs import REC, RUN_ID, start_journaled_run
db = Path(sys.argv[1])
store = Store(db)
start_journaled_run(store, RUN_ID)
size = db.stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))  # the store cannot grow: as if the disk were full
try:
    store.add_point(RUN_ID, "tp2", "rate=2/s", 2.0, True, "", {"x": "y" * 20000}, [REC] * 5)
except StoreError as exc:
    print(exc)
"""


def test_a_full_disk_under_the_store_keeps_the_point_in_the_journal(tmp_path: Path) -> None:
    # RLIMIT_FSIZE stands in for a full disk (it applies to root too; Python ignores SIGXFSZ, so the
    # write fails with EFBIG, which SQLite reports as full or as an I/O error).
    db = tmp_path / "r.db"
    out = subprocess.run(
        [sys.executable, "-c", DISK_FULL, str(db)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=pythonpath_env(),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "cannot write the results store" in out.stdout and str(journal_path(db, RUN)) in out.stdout
    again = _recovered(db)
    assert [len(p.metrics["x"]) for p in again.points(RUN)] == [20000]
    assert len(list(again.records(RUN))) == 5


def test_odd_store_paths_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no directory"):
        Store(tmp_path / "missing-dir" / "r.db")
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    with pytest.raises(StoreError, match="not a regular file"):  # and no hang
        Store(fifo)


def test_a_store_from_before_the_engine_metrics_table_reads_read_only(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    store = Store(db)
    _run(store)
    _point(store)
    store.conn.execute("DROP TABLE engine_metrics")
    store.conn.commit()
    store.close()
    old = Store(db, readonly=True)
    assert old.engine_metrics(RUN) == {} and [p.label for p in old.points(RUN)] == ["rate=2/s"]
