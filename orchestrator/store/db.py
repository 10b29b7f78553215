"""SQLite results store. Every write commits, so an interrupted sweep keeps what it measured; a sweep's
writes also go to a journal beside the store first (store/journal.py), so that a store that fails
under the sweep loses nothing either. Read-only commands open it read-only and never create it.

Tables: meta (schema version), runs (spec, hashes, versions, hardware seen, eval metadata, selection),
layouts (plan, launch argv, status and reason), points (one load point's metrics and verdict),
records (every RequestRecord as JSON), consistency (one `orch consistency` comparison of two layouts),
engine_metrics (the engines' /metrics scraped during one load point; added later: CREATE IF NOT EXISTS
gives older stores the table without a schema bump), run_extras (per run, named JSON documents the
sweep derives: "sweep" (mode, timing), "capacity/<layout>" (the capacity search), "objectives",
"pareto" (the frontier over every point); see docs/decision.md; also added without a schema bump).
The reads and the rows they return: store/reads.py; the writes: store/writes.py.
DataFrames: orchestrator.store.frames.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

from orchestrator.errors import StoreError
from orchestrator.store.faults import (
    BUSY_TIMEOUT_S,
    diagnose,
    is_fault,
    open_failed,
    retrying,
    write_failed,
)
from orchestrator.store.journal import Journal, journal_path, journaled_runs
from orchestrator.store.reads import LayoutRow, PointRow, Reads
from orchestrator.store.run_ids import resolve_ref
from orchestrator.store.writes import Writes

# LayoutRow and PointRow (store/reads.py) stay importable from here, beside the Store whose reads return them.
__all__ = ["DEFAULT_STORE", "SCHEMA_VERSION", "LayoutRow", "PointRow", "Store"]

SCHEMA_VERSION = 1
DEFAULT_STORE = "orch-results.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, created_at REAL NOT NULL, finished_at REAL, status TEXT NOT NULL,
    spec_path TEXT, spec_json TEXT NOT NULL, spec_hash TEXT NOT NULL, engine TEXT NOT NULL,
    engine_version TEXT, model TEXT NOT NULL, model_config_hash TEXT, orch_version TEXT NOT NULL,
    hardware_json TEXT NOT NULL, metadata_json TEXT NOT NULL, selection_json TEXT
);
CREATE TABLE IF NOT EXISTS layouts (
    run_id TEXT NOT NULL REFERENCES runs(run_id), layout TEXT NOT NULL, gpus INTEGER NOT NULL,
    status TEXT NOT NULL, reason TEXT, plan_json TEXT, launch_json TEXT, started_at REAL, finished_at REAL,
    PRIMARY KEY (run_id, layout)
);
CREATE TABLE IF NOT EXISTS points (
    run_id TEXT NOT NULL, layout TEXT NOT NULL, label TEXT NOT NULL, rate REAL, passed INTEGER,
    verdict TEXT, metrics_json TEXT NOT NULL, created_at REAL NOT NULL,
    PRIMARY KEY (run_id, layout, label)
);
CREATE TABLE IF NOT EXISTS records (
    run_id TEXT NOT NULL, layout TEXT NOT NULL, label TEXT NOT NULL, request_id TEXT NOT NULL,
    record_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS records_by_point ON records (run_id, layout, label);
CREATE TABLE IF NOT EXISTS run_extras (
    run_id TEXT NOT NULL, key TEXT NOT NULL, value_json TEXT NOT NULL, PRIMARY KEY (run_id, key)
);
CREATE TABLE IF NOT EXISTS consistency (
    run_id TEXT NOT NULL, layout_a TEXT NOT NULL, layout_b TEXT NOT NULL, created_at REAL NOT NULL,
    passed INTEGER, max_divergence REAL, result_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS engine_metrics (
    run_id TEXT NOT NULL, layout TEXT NOT NULL, label TEXT NOT NULL, series_json TEXT NOT NULL,
    PRIMARY KEY (run_id, layout, label)
);
"""


def _roll_back_hot_journal(path: Path, busy_timeout_s: float) -> None:
    """A sweep killed in the middle of a commit (kill -9, the machine lost) leaves SQLite's rollback
    journal beside the store; a read-only connection cannot roll it back and fails with "attempt to
    write a readonly database", so `orch runs` could not show the run that died. A read through a
    read-write connection rolls it back first (SQLite's own recovery: it only touches a journal no
    live connection holds); where the store is not writable, the read-only open says so as before."""
    hot = path.with_name(path.name + "-journal")
    try:
        if not (path.is_file() and hot.is_file() and hot.stat().st_size > 0):
            return
    except OSError:
        return
    with contextlib.suppress(sqlite3.DatabaseError, OSError):
        conn = sqlite3.connect(path, timeout=busy_timeout_s)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            conn.close()


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


class Store(Reads, Writes):
    """Open with `readonly=True` in commands that only read: a missing path is then an error, never a
    new empty store. A sweep calls `journal_run(run_id)` first, so each of its writes reaches the
    journal beside the store before the store, and `recover(run)` replays it when resuming."""

    def __init__(
        self,
        path: str | Path = DEFAULT_STORE,
        *,
        readonly: bool = False,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.busy_timeout_s = busy_timeout_s
        self._journal: Journal | None = None
        self._replayed: set[str] = set()
        if self.path.exists() and not self.path.is_file():
            raise StoreError(f"--store {self.path}: not a regular file; give the path of a results store")
        if readonly and not self.path.exists():
            raise StoreError(
                f"--store {self.path}: no results store there (orch sweep writes one); give --store PATH"
            )
        if readonly:
            _roll_back_hot_journal(self.path, busy_timeout_s)
        try:
            if readonly:
                uri = f"file:{quote(str(self.path.resolve()))}?mode=ro"
                self.conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout_s)
            else:
                self.conn = sqlite3.connect(self.path, timeout=busy_timeout_s)
            if not readonly:
                retrying(lambda: self.conn.executescript(_SCHEMA))
            found = self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if found is None and not readonly:
                with self.conn:
                    self.conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"--store {self.path}: {open_failed(self.path, exc)}") from None
        if found is not None and found[0] != str(SCHEMA_VERSION):
            raise StoreError(
                f"--store {self.path}: schema version {found[0]}, this orch writes "
                f"{SCHEMA_VERSION}; use another --store file"
            )
        if found is None and readonly:
            raise StoreError(f"--store {self.path}: not an orch results store (it has no schema version)")

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
        self.conn.close()

    # -- the journal -----------------------------------------------------------------------------
    def journal_run(self, run_id: str) -> Path:
        """From now on every write of `run_id` goes to its journal first (a journal left by an
        earlier attempt of the run is replayed into the store first)."""
        if self.readonly:
            raise StoreError(f"--store {self.path}: opened read-only")
        self._replay(run_id)
        self._journal = Journal(self.path, run_id)
        self._journal.open()
        return self._journal.path

    def recover(self, ref: str) -> str:
        """Before resuming run `ref`: replay its journal, if one is beside the store, and say which run
        it was. The store may have lost the run altogether (deleted, truncated): the journal has it, so
        `ref` (latest, an id, a prefix, the short hash) is resolved over the store's runs and the
        journals beside it together."""
        try:
            stored = [(r.created_at, r.run_id) for r in self.runs()]
        except StoreError:
            stored = []  # a damaged store: the journals may still say which run it was
        known = {run_id for _, run_id in stored}
        orphans = [r for r in journaled_runs(self.path) if r not in known]
        journals = [(_mtime(journal_path(self.path, r)), r) for r in orphans]
        newest_first = [run_id for _, run_id in sorted(stored + journals, reverse=True)]
        run_id = resolve_ref(ref, newest_first, f"{self.path} (or a journal beside it)")
        self._replay(run_id)
        return run_id

    def _replay(self, run_id: str) -> None:
        if run_id in self._replayed:
            return
        entries = list(Journal(self.path, run_id).entries())
        if entries:
            try:
                with self.conn:
                    for op, args in entries:
                        if op == "create_run" and self._has_run(run_id):
                            continue
                        getattr(self, f"_apply_{op}")(**args)
            except sqlite3.DatabaseError as exc:
                raise StoreError(
                    f"--store {self.path}: cannot replay the journal {journal_path(self.path, run_id)} "
                    f"into it ({diagnose(self.path, exc)}); make the store writable and retry"
                ) from None
        self._replayed.add(run_id)

    def _has_run(self, run_id: str) -> bool:
        return self.conn.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone() is not None

    def _write(self, run_id: str, op: str, args: dict[str, Any]) -> None:
        """Journal (fsync'd), then commit to the store, retrying a busy store a few times."""
        journal = self._journal if self._journal is not None and self._journal.run_id == run_id else None
        journal_failed: OSError | None = None
        if journal is not None:
            try:
                journal.append(op, args)
            except OSError as exc:
                journal_failed = exc
        try:
            retrying(lambda: self._commit(op, args))
        except sqlite3.DatabaseError as exc:
            if not is_fault(exc):
                raise
            raise StoreError(write_failed(self.path, run_id, exc, journal, journal_failed)) from None
        if journal is not None and journal_failed is not None:
            raise StoreError(
                f"cannot write the journal {journal.path} ({journal_failed.strerror or journal_failed}); "
                f"everything measured so far is in the store {self.path}; free space, then finish with: "
                f"orch sweep --resume {run_id} --store {self.path}"
            )
        if journal is not None and op == "finish_run" and args["status"] == "done":
            journal.remove()  # the store holds the whole run now
            self._journal = None

    def _commit(self, op: str, args: dict[str, Any]) -> None:
        with self.conn:
            getattr(self, f"_apply_{op}")(**args)
