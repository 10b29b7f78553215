"""The store's reads: the rows they return and the queries behind them. `Store` (store/db.py) opens the
connection, keeps the schema and the journal, and takes these reads as a base beside its writes
(store/writes.py). Every read goes through `_read`, so a store that fails under a read is one StoreError
(store/faults.py says why and where the journal is), not a sqlite3 traceback."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from orchestrator.errors import StoreError
from orchestrator.loadgen.records import RequestRecord
from orchestrator.store.faults import is_fault, read_failed
from orchestrator.store.journal import Journal, holder_alive
from orchestrator.store.run_ids import resolve_ref

T = TypeVar("T")


@dataclass(frozen=True)
class RunRow:
    run_id: str
    created_at: float
    finished_at: float | None
    status: str
    spec_path: str | None
    spec_hash: str
    engine: str
    model: str
    metadata: dict[str, Any]
    selection: dict[str, Any] | None


@dataclass(frozen=True)
class PointRow:
    layout: str
    label: str
    rate: float | None
    passed: bool | None
    verdict: str | None
    metrics: dict[str, Any]


@dataclass(frozen=True)
class LayoutRow:
    layout: str
    gpus: int
    status: str  # rejected | failed | measured | pending
    reason: str | None
    plan: dict[str, Any] | None
    launch: dict[str, Any] | None


@dataclass(frozen=True)
class ConsistencyRow:
    layout_a: str
    layout_b: str
    passed: bool | None
    max_divergence: float | None
    result: dict[str, Any]


def record_to_json(rec: RequestRecord) -> str:
    return json.dumps(rec.to_dict(), separators=(",", ":"))


def record_from_json(text: str) -> RequestRecord:
    d = json.loads(text)
    d["chunk_times_s"] = tuple(d["chunk_times_s"])
    d["chunk_tokens"] = tuple(d["chunk_tokens"])
    return RequestRecord(**d)


class Reads:
    """What `Store` reads; the connection, path and journal are the Store's."""

    conn: sqlite3.Connection
    path: Path
    readonly: bool
    _journal: Journal | None

    # -- reads --------------------------------------------------------------------------------------
    def _read(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except sqlite3.DatabaseError as exc:
            if not is_fault(exc):
                raise
            raise StoreError(read_failed(self.path, exc, self._journal)) from None

    def runs(self) -> list[RunRow]:
        rows = self._read(
            lambda: self.conn.execute(
                "SELECT run_id, created_at, finished_at, status, spec_path, spec_hash, engine, model, "
                "metadata_json, selection_json FROM runs ORDER BY created_at DESC"
            ).fetchall()
        )
        return [
            RunRow(
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                r[6],
                r[7],
                json.loads(r[8]),
                json.loads(r[9]) if r[9] else None,
            )
            for r in rows
        ]

    def status_now(self, row: RunRow) -> str:
        """The run's status as stored, except that a "running" run whose orch process is gone (nobody
        holds its journal: store/journal.py) is "died"; it finishes with `orch sweep --resume`."""
        if row.status == "running" and holder_alive(self.path, row.run_id) is False:
            return "died"
        return row.status

    def resolve(self, ref: str) -> str:
        """The run id `ref` names: latest, an id, a unique prefix or the short hash (store/run_ids.py);
        an ambiguous or unknown one is an UnknownRun naming the candidates."""
        return resolve_ref(ref, [r.run_id for r in self.runs()], str(self.path))

    def run(self, ref: str) -> RunRow:
        run_id = self.resolve(ref)
        return next(r for r in self.runs() if r.run_id == run_id)

    def spec_json(self, run_id: str) -> dict[str, Any]:
        row = self._read(
            lambda: self.conn.execute("SELECT spec_json FROM runs WHERE run_id=?", (run_id,)).fetchone()
        )
        result: dict[str, Any] = json.loads(row[0])
        return result

    def run_info(self, run_id: str) -> dict[str, Any]:
        cur = self._read(lambda: self.conn.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)))
        names = [c[0] for c in cur.description]
        row = self._read(cur.fetchone)
        out = dict(zip(names, row, strict=True))
        for key in ("spec_json", "hardware_json", "metadata_json", "selection_json"):
            if out.get(key):
                out[key.removesuffix("_json")] = json.loads(out.pop(key))
            else:
                out.pop(key, None)
        return out

    def layouts(self, run_id: str) -> list[LayoutRow]:
        rows = self._read(
            lambda: self.conn.execute(
                "SELECT layout, gpus, status, reason, plan_json, launch_json FROM layouts "
                "WHERE run_id=? ORDER BY rowid",
                (run_id,),
            ).fetchall()
        )
        return [
            LayoutRow(
                r[0], r[1], r[2], r[3], json.loads(r[4]) if r[4] else None, json.loads(r[5]) if r[5] else None
            )
            for r in rows
        ]

    def points(self, run_id: str, layout: str | None = None) -> list[PointRow]:
        q = "SELECT layout, label, rate, passed, verdict, metrics_json FROM points WHERE run_id=?"
        args: tuple[Any, ...] = (run_id,)
        if layout is not None:
            q, args = q + " AND layout=?", (run_id, layout)
        rows = self._read(lambda: self.conn.execute(q + " ORDER BY rowid", args).fetchall())
        return [
            PointRow(r[0], r[1], r[2], None if r[3] is None else bool(r[3]), r[4], json.loads(r[5]))
            for r in rows
        ]

    def consistency(self, run_id: str) -> list[ConsistencyRow]:
        rows = self._read(
            lambda: self.conn.execute(
                "SELECT layout_a, layout_b, passed, max_divergence, result_json FROM consistency "
                "WHERE run_id=? ORDER BY rowid",
                (run_id,),
            ).fetchall()
        )
        return [
            ConsistencyRow(r[0], r[1], None if r[2] is None else bool(r[2]), r[3], json.loads(r[4]))
            for r in rows
        ]

    def extras(self, run_id: str, prefix: str = "") -> dict[str, dict[str, Any]]:
        """The run's derived documents (capacity, objectives, pareto ...) whose key starts with `prefix`."""
        if self.readonly and not self._has_table("run_extras"):
            return {}  # a store older than the table, opened read-only

        def read() -> dict[str, dict[str, Any]]:
            rows = self.conn.execute(
                "SELECT key, value_json FROM run_extras WHERE run_id=? AND key LIKE ? ORDER BY rowid",
                (run_id, prefix.replace("%", "") + "%"),
            ).fetchall()
            return {k: json.loads(v) for k, v in rows}

        return self._read(read)

    def engine_metrics(self, run_id: str) -> dict[tuple[str, str], dict[str, Any]]:
        """(layout, load point label) -> the scraped series; empty for runs from before the table."""
        if self.readonly and not self._has_table("engine_metrics"):  # a store from before the table
            return {}
        rows = self._read(
            lambda: self.conn.execute(
                "SELECT layout, label, series_json FROM engine_metrics WHERE run_id=? ORDER BY rowid",
                (run_id,),
            ).fetchall()
        )
        return {(r[0], r[1]): json.loads(r[2]) for r in rows}

    def _has_table(self, name: str) -> bool:
        query = "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?"
        return self._read(lambda: self.conn.execute(query, (name,)).fetchone()) is not None

    def records(self, run_id: str) -> Iterator[tuple[str, str, RequestRecord]]:
        cur = self._read(
            lambda: self.conn.execute(
                "SELECT layout, label, record_json FROM records WHERE run_id=? ORDER BY rowid", (run_id,)
            )
        )
        while batch := self._read(lambda: cur.fetchmany(1000)):
            for layout, label, text in batch:
                yield layout, label, record_from_json(text)
