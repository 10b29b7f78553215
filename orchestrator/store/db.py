"""SQLite results store. Every write commits, so an interrupted sweep keeps what it measured.

Tables: meta (schema version), runs (spec, hashes, versions, hardware seen, eval metadata, selection),
layouts (plan, launch argv, status and reason), points (one load point's metrics and verdict),
records (every RequestRecord as JSON), consistency (one `orch consistency` comparison of two layouts),
engine_metrics (the engines' /metrics scraped during one load point; added later: CREATE IF NOT EXISTS
gives older stores the table without a schema bump). DataFrames: orchestrator.store.frames.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchError
from orchestrator.loadgen.records import RequestRecord

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
CREATE TABLE IF NOT EXISTS consistency (
    run_id TEXT NOT NULL, layout_a TEXT NOT NULL, layout_b TEXT NOT NULL, created_at REAL NOT NULL,
    passed INTEGER, max_divergence REAL, result_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS engine_metrics (
    run_id TEXT NOT NULL, layout TEXT NOT NULL, label TEXT NOT NULL, series_json TEXT NOT NULL,
    PRIMARY KEY (run_id, layout, label)
);
"""


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
    return json.dumps(asdict(rec), separators=(",", ":"))


def record_from_json(text: str) -> RequestRecord:
    d = json.loads(text)
    d["chunk_times_s"] = tuple(d["chunk_times_s"])
    d["chunk_tokens"] = tuple(d["chunk_tokens"])
    return RequestRecord(**d)


class Store:
    def __init__(self, path: str | Path = DEFAULT_STORE) -> None:
        self.path = Path(path)
        try:
            self.conn = sqlite3.connect(self.path)
        except sqlite3.Error as exc:
            raise OrchError(f"--store {self.path}: cannot open the results store: {exc}") from None
        self.conn.executescript(_SCHEMA)
        found = self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if found is None:
            self.conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            self.conn.commit()
        elif int(found[0]) != SCHEMA_VERSION:
            raise OrchError(
                f"--store {self.path}: schema version {found[0]}, this orch writes "
                f"{SCHEMA_VERSION}; use another --store file"
            )

    def close(self) -> None:
        self.conn.close()

    # -- writes -------------------------------------------------------------------------------------
    def create_run(
        self,
        *,
        run_id: str,
        spec_path: str | None,
        spec_json: dict[str, Any],
        spec_hash: str,
        engine: str,
        engine_version: str | None,
        model: str,
        model_config_hash: str | None,
        orch_version: str,
        hardware: dict[str, Any],
        metadata: dict[str, Any],
    ) -> None:
        self.conn.execute(
            "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                run_id,
                time.time(),
                None,
                "running",
                spec_path,
                json.dumps(spec_json),
                spec_hash,
                engine,
                engine_version,
                model,
                model_config_hash,
                orch_version,
                json.dumps(hardware),
                json.dumps(metadata),
                None,
            ),
        )
        self.conn.commit()

    def set_layout(
        self,
        run_id: str,
        layout: str,
        gpus: int,
        status: str,
        *,
        reason: str | None = None,
        plan: dict[str, Any] | None = None,
        launch: dict[str, Any] | None = None,
    ) -> None:
        now = time.time()
        self.conn.execute(
            "INSERT INTO layouts VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(run_id, layout) DO UPDATE SET "
            "status=excluded.status, reason=excluded.reason, "
            "plan_json=COALESCE(excluded.plan_json, plan_json), "
            "launch_json=COALESCE(excluded.launch_json, launch_json), finished_at=excluded.finished_at",
            (
                run_id,
                layout,
                gpus,
                status,
                reason,
                json.dumps(plan) if plan else None,
                json.dumps(launch) if launch else None,
                now,
                now if status != "pending" else None,
            ),
        )
        self.conn.commit()

    def add_point(
        self,
        run_id: str,
        layout: str,
        label: str,
        rate: float | None,
        passed: bool | None,
        verdict: str | None,
        metrics: dict[str, Any],
        records: Sequence[RequestRecord],
    ) -> None:
        with self.conn:
            self.conn.execute(
                "DELETE FROM records WHERE run_id=? AND layout=? AND label=?", (run_id, layout, label)
            )
            self.conn.execute(
                "INSERT OR REPLACE INTO points VALUES (?,?,?,?,?,?,?,?)",
                (
                    run_id,
                    layout,
                    label,
                    rate,
                    None if passed is None else int(passed),
                    verdict,
                    json.dumps(metrics, default=_json_default),
                    time.time(),
                ),
            )
            self.conn.executemany(
                "INSERT INTO records VALUES (?,?,?,?,?)",
                [(run_id, layout, label, r.request_id, record_to_json(r)) for r in records],
            )

    def add_consistency(
        self,
        run_id: str,
        layout_a: str,
        layout_b: str,
        result: dict[str, Any],
        *,
        passed: bool | None,
        max_divergence: float | None,
    ) -> None:
        self.conn.execute(
            "INSERT INTO consistency VALUES (?,?,?,?,?,?,?)",
            (
                run_id,
                layout_a,
                layout_b,
                time.time(),
                None if passed is None else int(passed),
                max_divergence,
                json.dumps(result, default=_json_default),
            ),
        )
        self.conn.commit()

    def add_engine_metrics(self, run_id: str, layout: str, label: str, series: dict[str, Any]) -> None:
        """One load point's scraped engine metrics (loadgen.engine_metrics.series_to_dict)."""
        self.conn.execute(
            "INSERT OR REPLACE INTO engine_metrics VALUES (?,?,?,?)",
            (run_id, layout, label, json.dumps(series, default=_json_default)),
        )
        self.conn.commit()

    def finish_run(self, run_id: str, status: str, selection: dict[str, Any] | None) -> None:
        self.conn.execute(
            "UPDATE runs SET finished_at=?, status=?, selection_json=? WHERE run_id=?",
            (time.time(), status, json.dumps(selection) if selection else None, run_id),
        )
        self.conn.commit()

    # -- reads --------------------------------------------------------------------------------------
    def runs(self) -> list[RunRow]:
        rows = self.conn.execute(
            "SELECT run_id, created_at, finished_at, status, spec_path, spec_hash, engine, model, "
            "metadata_json, selection_json FROM runs ORDER BY created_at DESC"
        ).fetchall()
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

    def run(self, run_id: str) -> RunRow:
        for row in self.runs():
            if row.run_id == run_id or (len(run_id) >= 6 and row.run_id.startswith(run_id)):
                return row
        known = ", ".join(r.run_id for r in self.runs()[:5]) or "none"
        raise OrchError(f"run {run_id!r} is not in {self.path}; recent runs: {known} (orch runs)")

    def spec_json(self, run_id: str) -> dict[str, Any]:
        row = self.conn.execute("SELECT spec_json FROM runs WHERE run_id=?", (run_id,)).fetchone()
        result: dict[str, Any] = json.loads(row[0])
        return result

    def run_info(self, run_id: str) -> dict[str, Any]:
        cur = self.conn.execute("SELECT * FROM runs WHERE run_id=?", (run_id,))
        names = [c[0] for c in cur.description]
        row = cur.fetchone()
        out = dict(zip(names, row, strict=True))
        for key in ("spec_json", "hardware_json", "metadata_json", "selection_json"):
            if out.get(key):
                out[key.removesuffix("_json")] = json.loads(out.pop(key))
            else:
                out.pop(key, None)
        return out

    def layouts(self, run_id: str) -> list[LayoutRow]:
        rows = self.conn.execute(
            "SELECT layout, gpus, status, reason, plan_json, launch_json FROM layouts "
            "WHERE run_id=? ORDER BY rowid",
            (run_id,),
        ).fetchall()
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
        rows = self.conn.execute(q + " ORDER BY rowid", args).fetchall()
        return [
            PointRow(r[0], r[1], r[2], None if r[3] is None else bool(r[3]), r[4], json.loads(r[5]))
            for r in rows
        ]

    def consistency(self, run_id: str) -> list[ConsistencyRow]:
        rows = self.conn.execute(
            "SELECT layout_a, layout_b, passed, max_divergence, result_json FROM consistency "
            "WHERE run_id=? ORDER BY rowid",
            (run_id,),
        ).fetchall()
        return [
            ConsistencyRow(r[0], r[1], None if r[2] is None else bool(r[2]), r[3], json.loads(r[4]))
            for r in rows
        ]

    def engine_metrics(self, run_id: str) -> dict[tuple[str, str], dict[str, Any]]:
        """(layout, load point label) -> the scraped series; empty for runs from before the table."""
        rows = self.conn.execute(
            "SELECT layout, label, series_json FROM engine_metrics WHERE run_id=? ORDER BY rowid", (run_id,)
        ).fetchall()
        return {(r[0], r[1]): json.loads(r[2]) for r in rows}

    def records(self, run_id: str) -> Iterator[tuple[str, str, RequestRecord]]:
        for layout, label, text in self.conn.execute(
            "SELECT layout, label, record_json FROM records WHERE run_id=? ORDER BY rowid", (run_id,)
        ):
            yield layout, label, record_from_json(text)


def _json_default(obj: object) -> object:
    if isinstance(obj, float):
        return None
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
