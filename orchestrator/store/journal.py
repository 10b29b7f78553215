"""The sweep's journal: every write of a run, appended and fsync'd to a file beside the store before
the store itself is written, so that a store that cannot take the write (locked for too long, read
only, disk full, deleted or truncated under the sweep) loses nothing: `orch sweep --resume RUN`
replays the journal into the store and carries on.

One JSON object per line: {"op": <Store write>, "args": {...}}. A run's journal lives as long as the
run is unfinished (`<store>.<run_id>.journal.jsonl`) and is removed once the run is stored as done.

The sweep writing a journal holds an exclusive lock on it (flock) for as long as it runs; the kernel
drops the lock when the process ends, however it ends (kill -9 included). So a run stored as
"running" whose journal nobody holds has lost its process (`holder_alive`: `orch runs` shows it as
died), and a second orch resuming a run still in progress is refused instead of interleaving writes."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from orchestrator.errors import StoreError

SUFFIX = ".journal.jsonl"


def journal_path(store: Path, run_id: str) -> Path:
    return store.with_name(f"{store.name}.{run_id}{SUFFIX}")


def journaled_runs(store: Path) -> list[str]:
    """Run ids that have a journal beside `store`."""
    prefix = store.name + "."
    try:
        names = os.listdir(store.parent if str(store.parent) else ".")
    except OSError:
        return []
    return sorted(n[len(prefix) : -len(SUFFIX)] for n in names if n.startswith(prefix) and n.endswith(SUFFIX))


class Journal:
    def __init__(self, store: Path, run_id: str) -> None:
        self.run_id = run_id
        self.path = journal_path(store, run_id)
        self._file: TextIO | None = None

    def open(self) -> None:
        """Open for appending now, so that a directory made read-only later cannot stop it, and hold
        the run's lock (module docstring)."""
        try:
            self._file = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise StoreError(
                f"cannot create the journal {self.path} beside the results store ({exc.strerror or exc}); "
                "give a --store in a writable directory"
            ) from None
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.close()
            self._file = None
            raise StoreError(
                f"run {self.run_id} is in progress in another orch process (it holds {self.path}); wait for "
                "it to end, or end it, before resuming"
            ) from None
        except OSError:
            pass  # a file system without locks: the journal still works, liveness is unknown

    def append(self, op: str, args: dict[str, Any]) -> None:
        """Raises OSError when the line could not be made durable."""
        if self._file is None:
            self.open()
        assert self._file is not None
        self._file.write(json.dumps({"op": op, "args": args}, separators=(",", ":")) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def entries(self) -> Iterator[tuple[str, dict[str, Any]]]:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreError(f"cannot read the journal {self.path}: {exc}") from None
        for n, line in enumerate(lines, 1):
            try:
                entry = json.loads(line)
                op, args = entry["op"], entry["args"]
            except (ValueError, KeyError, TypeError):
                if n == len(lines):  # the last line torn by a crash mid-append: it never counted
                    return
                raise StoreError(f"the journal {self.path} is damaged at line {n}") from None
            yield str(op), dict(args)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def holder_alive(store: Path, run_id: str) -> bool | None:
    """Is an orch process still writing run `run_id`? True while its journal is locked, False when the
    journal is there and nobody holds it (the process is gone), None without a journal (the run
    finished, predates journals, or the store was copied here without it) or without locks."""
    path = journal_path(store, run_id)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)  # closing drops the probe's own lock
    return False
