"""pandas DataFrames of a results store, one call each (needs the `[data]` extra: pandas, pyarrow).

    from orchestrator.store.frames import runs_frame, points_frame, requests_frame, engine_frame
    runs = runs_frame("orch-results.db")                  # one row per run, newest first
    pts = points_frame("orch-results.db", "latest")       # one row per (layout, load point), flattened
    reqs = requests_frame("orch-results.db", run_id)      # one row per request
    eng = engine_frame("orch-results.db", run_id)         # one row per /metrics scrape

`run_id` takes a full id, a unique prefix of at least 6 characters, or "latest" (the newest run).
Column names follow the stored metrics with dots for nesting (`ttft_ms.p99`, `per_gpu.output_throughput`,
`engine.kv_usage_peak`), as `orch export` writes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.extras import require
from orchestrator.store.db import Store
from orchestrator.store.export import engine_rows, point_rows, request_rows


def _pandas() -> Any:
    require("data", "DataFrames")
    import pandas as pd  # type: ignore[import-untyped, unused-ignore]

    return pd


def resolve_run(store: Store, run_id: str) -> str:
    return store.resolve(run_id)


def _frame(path: str | Path, rows_of: Any, run_id: str | None) -> Any:
    pd = _pandas()
    store = Store(path, readonly=True)  # a read never creates a store
    try:
        rows = rows_of(store) if run_id is None else rows_of(store, resolve_run(store, run_id))
    finally:
        store.close()
    return pd.DataFrame(rows)


def runs_frame(path: str | Path) -> Any:
    """One row per run: ids, times, engine, model, winner, and the eval metadata as metadata.* columns."""

    def rows(store: Store) -> list[dict[str, Any]]:
        out = []
        for r in store.runs():
            row: dict[str, Any] = {
                "run_id": r.run_id,
                "created_at": r.created_at,
                "finished_at": r.finished_at,
                "status": r.status,
                "spec_path": r.spec_path,
                "spec_hash": r.spec_hash,
                "engine": r.engine,
                "model": r.model,
                "winner": (r.selection or {}).get("winner"),
            }
            row |= {f"metadata.{k}": v for k, v in r.metadata.items()}
            out.append(row)
        return out

    return _frame(path, rows, None)


def points_frame(path: str | Path, run_id: str = "latest") -> Any:
    """One row per (layout, load point) with every metric flattened, the verdict and the prediction."""
    return _frame(path, point_rows, run_id)


def requests_frame(path: str | Path, run_id: str = "latest") -> Any:
    """One row per request: ok/error, TTFT, TPOT, E2E (ms), token counts."""
    return _frame(path, request_rows, run_id)


def engine_frame(path: str | Path, run_id: str = "latest") -> Any:
    """One row per scrape of an endpoint's /metrics: t_s, endpoint, running, waiting, kv_usage ..."""
    return _frame(path, engine_rows, run_id)
