"""Hand a stored run to pandas users: one row per load point (metrics flattened) or per request."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from orchestrator.errors import OrchError
from orchestrator.store.db import Store

FORMATS = ("json", "csv", "parquet")


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value


def point_rows(store: Store, run_id: str) -> list[dict[str, Any]]:
    info = store.run_info(run_id)
    rows = []
    status = {row.layout: row for row in store.layouts(run_id)}
    for p in store.points(run_id):
        row: dict[str, Any] = {
            "run_id": run_id,
            "spec_hash": info["spec_hash"],
            "engine": info["engine"],
            "model": info["model"],
            "layout": p.layout,
            "gpus": status[p.layout].gpus,
            "load_point": p.label,
            "rate": p.rate,
            "passed": p.passed,
            "verdict": p.verdict,
        }
        _flatten("metadata", info.get("metadata") or {}, row)
        _flatten("", p.metrics, row)
        rows.append(row)
    return rows


def request_rows(store: Store, run_id: str) -> list[dict[str, Any]]:
    out = []
    for layout, label, rec in store.records(run_id):
        out.append(
            {
                "run_id": run_id,
                "layout": layout,
                "load_point": label,
                "request_id": rec.request_id,
                "ok": rec.ok,
                "error": rec.error,
                "ttft_ms": None if rec.ttft_s is None else rec.ttft_s * 1e3,
                "tpot_ms": None if rec.tpot_s is None else rec.tpot_s * 1e3,
                "e2e_ms": None if rec.e2e_s is None else rec.e2e_s * 1e3,
                "output_tokens": rec.n_output_tokens,
                "prompt_tokens": rec.prompt_tokens,
            }
        )
    return out


def export_run(store: Store, run_id: str, fmt: str, out: str | None, *, per_request: bool = False) -> str:
    """Write the run in `fmt`; returns the text (json/csv to stdout) or the path written."""
    if fmt not in FORMATS:
        raise OrchError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    rows = request_rows(store, run_id) if per_request else point_rows(store, run_id)
    if fmt == "json":
        text = json.dumps({"run": store.run_info(run_id), "rows": rows}, indent=2, default=str)
    elif fmt == "csv":
        buf = io.StringIO()
        keys = sorted({k for r in rows for k in r})
        writer = csv.DictWriter(buf, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
        text = buf.getvalue()
    else:
        if out is None:
            raise OrchError("--format parquet writes a file: give --out FILE.parquet")
        try:
            import pandas as pd  # type: ignore[import-untyped, unused-ignore]
        except ImportError:
            raise OrchError(
                "--format parquet needs pandas and pyarrow (pip install pandas pyarrow); or use --format csv"
            ) from None
        try:
            pd.DataFrame(rows).to_parquet(out)
        except ImportError as exc:
            raise OrchError(f"--format parquet: {exc}; pip install pyarrow, or use --format csv") from None
        return out
    if out is not None:
        Path(out).write_text(text, encoding="utf-8")
        return out
    return text
