"""The store's writes. Each public write turns its arguments into JSON-able values (what the journal
keeps) and hands them to `Store._write`, which journals them and then applies them with the matching
`_apply_*` inside one transaction; a journal replay calls the same `_apply_*`, so both agree.

The public write's signature is the typed one; an `_apply_*` takes the same names as keywords (`**a`)
from JSON, so the argument list is written once, not again on the apply side."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from orchestrator.loadgen.records import RequestRecord


class Writes:
    conn: sqlite3.Connection

    def _write(self, run_id: str, op: str, args: dict[str, Any]) -> None:
        raise NotImplementedError

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
        args = {
            "run_id": run_id,
            "spec_path": spec_path,
            "spec_json": spec_json,
            "spec_hash": spec_hash,
            "engine": engine,
            "engine_version": engine_version,
            "model": model,
            "model_config_hash": model_config_hash,
            "orch_version": orch_version,
            "hardware": hardware,
            "metadata": metadata,
            "created_at": time.time(),
        }
        self._write(run_id, "create_run", _jsonable(args))

    def _apply_create_run(self, *, created_at: float, **a: Any) -> None:
        self.conn.execute(
            "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                a["run_id"],
                created_at,
                None,
                "running",
                a["spec_path"],
                json.dumps(a["spec_json"]),
                a["spec_hash"],
                a["engine"],
                a["engine_version"],
                a["model"],
                a["model_config_hash"],
                a["orch_version"],
                json.dumps(a["hardware"]),
                json.dumps(a["metadata"]),
                None,
            ),
        )

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
        args = {
            "run_id": run_id,
            "layout": layout,
            "gpus": gpus,
            "status": status,
            "reason": reason,
            "plan": plan,
            "launch": launch,
            "now": time.time(),
        }
        self._write(run_id, "set_layout", _jsonable(args))

    def _apply_set_layout(self, *, now: float, **a: Any) -> None:
        self.conn.execute(
            "INSERT INTO layouts VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT(run_id, layout) DO UPDATE SET "
            "status=excluded.status, reason=excluded.reason, "
            "plan_json=COALESCE(excluded.plan_json, plan_json), "
            "launch_json=COALESCE(excluded.launch_json, launch_json), finished_at=excluded.finished_at",
            (
                a["run_id"],
                a["layout"],
                a["gpus"],
                a["status"],
                a["reason"],
                json.dumps(a["plan"]) if a["plan"] else None,
                json.dumps(a["launch"]) if a["launch"] else None,
                now,
                now if a["status"] != "pending" else None,
            ),
        )

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
        args = {
            "run_id": run_id,
            "layout": layout,
            "label": label,
            "rate": rate,
            "passed": passed,
            "verdict": verdict,
            "metrics": metrics,
            "records": [r.to_dict() for r in records],
            "created_at": time.time(),
        }
        self._write(run_id, "add_point", _jsonable(args))

    def _apply_add_point(self, *, run_id: str, layout: str, label: str, **a: Any) -> None:
        self.conn.execute(
            "DELETE FROM records WHERE run_id=? AND layout=? AND label=?", (run_id, layout, label)
        )
        self.conn.execute(
            "INSERT OR REPLACE INTO points VALUES (?,?,?,?,?,?,?,?)",
            (
                run_id,
                layout,
                label,
                a["rate"],
                None if a["passed"] is None else int(a["passed"]),
                a["verdict"],
                json.dumps(a["metrics"]),
                a["created_at"],
            ),
        )
        self.conn.executemany(
            "INSERT INTO records VALUES (?,?,?,?,?)",
            [
                (run_id, layout, label, r["request_id"], json.dumps(r, separators=(",", ":")))
                for r in a["records"]
            ],
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
        args = {
            "run_id": run_id,
            "layout_a": layout_a,
            "layout_b": layout_b,
            "result": result,
            "passed": passed,
            "max_divergence": max_divergence,
            "created_at": time.time(),
        }
        self._write(run_id, "add_consistency", _jsonable(args))

    def _apply_add_consistency(self, **a: Any) -> None:
        self.conn.execute(
            "INSERT INTO consistency VALUES (?,?,?,?,?,?,?)",
            (
                a["run_id"],
                a["layout_a"],
                a["layout_b"],
                a["created_at"],
                None if a["passed"] is None else int(a["passed"]),
                a["max_divergence"],
                json.dumps(a["result"]),
            ),
        )

    def add_engine_metrics(self, run_id: str, layout: str, label: str, series: dict[str, Any]) -> None:
        """One load point's scraped engine metrics (loadgen.engine_metrics.series_to_dict)."""
        args = {"run_id": run_id, "layout": layout, "label": label, "series": series}
        self._write(run_id, "add_engine_metrics", _jsonable(args))

    def _apply_add_engine_metrics(
        self, *, run_id: str, layout: str, label: str, series: dict[str, Any]
    ) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO engine_metrics VALUES (?,?,?,?)",
            (run_id, layout, label, json.dumps(series)),
        )

    def set_extra(self, run_id: str, key: str, value: dict[str, Any]) -> None:
        """A named document the sweep derives for the run (capacity, objectives, pareto ...)."""
        self._write(run_id, "set_extra", _jsonable({"run_id": run_id, "key": key, "value": value}))

    def _apply_set_extra(self, *, run_id: str, key: str, value: dict[str, Any]) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO run_extras VALUES (?,?,?)", (run_id, key, json.dumps(value))
        )

    def finish_run(self, run_id: str, status: str, selection: dict[str, Any] | None) -> None:
        args = {"run_id": run_id, "status": status, "selection": selection, "finished_at": time.time()}
        self._write(run_id, "finish_run", _jsonable(args))

    def _apply_finish_run(
        self, *, run_id: str, status: str, selection: dict[str, Any] | None, finished_at: float
    ) -> None:
        self.conn.execute(
            "UPDATE runs SET finished_at=?, status=?, selection_json=? WHERE run_id=?",
            (finished_at, status, json.dumps(selection) if selection else None, run_id),
        )


def _jsonable(args: dict[str, Any]) -> dict[str, Any]:
    """What the journal keeps and the store applies: the arguments through one JSON round trip."""
    out: dict[str, Any] = json.loads(json.dumps(args, default=_json_default))
    return out


def _json_default(obj: object) -> object:
    if isinstance(obj, float):
        return None
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
