"""What went wrong with a results store, in one line: which SQLite errors are faults of the store (busy,
locked, read-only, full, damaged, deleted or truncated under us) rather than bugs in orch, bounded
retries for a busy store, and the messages that say where the measurements are and how to resume."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from orchestrator.store.journal import Journal

BUSY_TIMEOUT_S = 30.0  # SQLite waits this long for another connection's lock on each statement
BUSY_RETRIES = 3  # then the whole transaction is tried again this many times, with a pause
BUSY_PAUSE_S = 1.0

_FAULTS = ("SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_READONLY", "SQLITE_FULL", "SQLITE_IOERR", "SQLITE_CORRUPT",
           "SQLITE_NOTADB", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_PROTOCOL")  # fmt: skip

T = TypeVar("T")


def _name(exc: sqlite3.Error) -> str:
    return str(getattr(exc, "sqlite_errorname", "") or "")


def is_busy(exc: sqlite3.Error) -> bool:
    return _name(exc).startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(exc)


def is_fault(exc: sqlite3.Error) -> bool:
    """A fault of the store file rather than a bug. "no such table" on a store whose schema we made
    means the file was emptied under us."""
    if isinstance(exc, sqlite3.IntegrityError | sqlite3.ProgrammingError | sqlite3.InterfaceError):
        return False
    return _name(exc).startswith(_FAULTS) or "no such table" in str(exc) or type(exc) is sqlite3.DatabaseError


def retrying(fn: Callable[[], T]) -> T:
    """SQLite's busy timeout covers most waits; a transaction can still fail at once with "database is
    locked" (a deadlock between two writers that SQLite breaks by failing one): try it again."""
    for attempt in range(BUSY_RETRIES + 1):
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or attempt == BUSY_RETRIES:
                raise
            time.sleep(BUSY_PAUSE_S * (attempt + 1))
    raise AssertionError("unreachable")


def diagnose(path: Path, exc: sqlite3.Error) -> str:
    """SQLite's message, with what happened to the file when that explains it better."""
    text = str(exc)
    try:
        st = path.stat()
    except FileNotFoundError:
        return f"{text}: the file was deleted"
    except OSError as err:
        return f"{text}: {err.strerror or err}"
    if st.st_size == 0 or "no such table" in text:
        return f"{text}: the file was emptied or truncated"
    if _name(exc).startswith("SQLITE_READONLY_DBMOVED"):
        return f"{text}: the file was deleted or replaced"
    if not os.access(path, os.W_OK) or _name(exc).startswith("SQLITE_READONLY"):
        return f"{text}: the file or its directory is read-only"
    return text


def open_failed(path: Path, exc: sqlite3.Error) -> str:
    if "no such table" in str(exc):
        return "not an orch results store (an SQLite file without orch's tables); give the path of one"
    if _name(exc) in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or type(exc) is sqlite3.DatabaseError:
        return f"not a readable orch results store ({exc}); give the path of one, or restore it from a copy"
    if not path.parent.is_dir():
        return (
            f"cannot create the results store: no directory {path.parent}; create it or give another --store"
        )
    return f"cannot open the results store ({diagnose(path, exc)}); make it writable or give another --store"


def read_failed(path: Path, exc: sqlite3.Error, journal: Journal | None) -> str:
    why = diagnose(path, exc)
    if journal is None:
        return f"--store {path}: cannot read the results store ({why}); restore it from a copy"
    return (  # a sweep reading back what it wrote
        f"cannot read the results store {path} ({why}); nothing measured is lost: it is in {journal.path}; "
        f"once the store can be written (a deleted one is made anew), finish with: "
        f"orch sweep --resume {journal.run_id} --store {path}"
    )


def write_failed(
    path: Path, run_id: str, exc: sqlite3.Error, journal: Journal | None, journal_failed: OSError | None
) -> str:
    why = diagnose(path, exc)
    if journal is None:
        return f"cannot write the results store {path} ({why}); nothing of this command was stored"
    if journal_failed is not None:
        return (
            f"cannot write the results store {path} ({why}) nor its journal {journal.path} "
            f"({journal_failed.strerror or journal_failed}): the last write of run {run_id} is lost, "
            f"earlier ones are in the journal; free space, then: orch sweep --resume {run_id} --store {path}"
        )
    return (
        f"cannot write the results store {path} ({why}); nothing measured is lost: it is in "
        f"{journal.path}; once the store can be written (a deleted one is made anew), finish with: "
        f"orch sweep --resume {run_id} --store {path}"
    )
