"""Hand a stored run to analysis tools: one row per load point (metrics flattened), per request or per
engine-metrics scrape, as JSON, JSON lines, CSV or Parquet; or one `vllm bench serve`-format JSON file
per load point (loadgen.vllm_format), recomputed from the stored requests."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Collection
from typing import Any

from orchestrator.errors import OrchError, SpecError
from orchestrator.extras import require
from orchestrator.outputs import make_out_dir, write_text_out
from orchestrator.store.db import Store

FORMATS = ("json", "jsonl", "csv", "parquet", "vllm")
TABLES = ("points", "requests", "engine")


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


def engine_rows(store: Store, run_id: str) -> list[dict[str, Any]]:
    out = []
    for (layout, label), series in store.engine_metrics(run_id).items():
        for s in series.get("samples") or []:
            out.append({"run_id": run_id, "layout": layout, "load_point": label, **s})
    return out


def vllm_results(store: Store, run_id: str) -> dict[str, dict[str, Any]]:
    """{file name: vllm bench serve JSON} per load point, metrics recomputed from the stored records
    with the run's warm-up window (so they match the stored metrics)."""
    from orchestrator.loadgen.bench import BenchConfig, BenchRun, LoadPoint
    from orchestrator.loadgen.client import ClientConfig
    from orchestrator.loadgen.vllm_format import vllm_result

    info = store.run_info(run_id)
    workload = (info.get("spec") or {}).get("workload") or {}
    gpus = {row.layout: row.gpus for row in store.layouts(run_id)}
    records: dict[tuple[str, str], list[Any]] = {}
    for layout, label, rec in store.records(run_id):
        records.setdefault((layout, label), []).append(rec)
    out: dict[str, dict[str, Any]] = {}
    for p in store.points(run_id):
        cfg = BenchConfig(
            targets=(ClientConfig(f"stored://{run_id}/{p.layout}", info["model"]),),
            arrival=workload.get("arrival", "poisson"),
            burstiness=workload.get("burstiness", 1.0),
            num_requests=len(records.get((p.layout, p.label), [])),
            warmup_s=workload.get("warmup_s") or 0.0,
            gpus=gpus.get(p.layout),
        )
        point = LoadPoint(rate=p.rate)
        result = BenchRun(cfg).measure(point, records.get((p.layout, p.label), []))
        name = file_name(f"{p.layout}_{p.label.replace('=', '').replace('/', 'per')}", taken=out)
        out[name] = vllm_result(result, cfg) | {"layout": p.layout, "run_id": run_id}
    return out


def file_name(text: str, taken: Collection[str] = ()) -> str:
    """`text` as one safe file name ending in .json: only letters, digits, '.', '_' and '-', no leading
    dot, so a name read from a store (a layout `../../x`, a label with '/') cannot leave the directory
    it is written into; a name already `taken` gets a number."""
    base = re.sub(r"[^A-Za-z0-9._-]", "_", text).lstrip(".") or "point"
    name, n = f"{base}.json", 1
    while name in taken:
        n += 1
        name = f"{base}-{n}.json"
    return name


def export_run(
    store: Store, run_id: str, fmt: str, out: str | None, *, per_request: bool = False, table: str = "points"
) -> str:
    """Write the run in `fmt`; returns the text (json/jsonl/csv to stdout) or the path written."""
    if fmt not in FORMATS:
        raise SpecError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    table = "requests" if per_request else table
    if table not in TABLES:
        raise SpecError(f"--table {table!r}: expected one of {', '.join(TABLES)}")
    if fmt == "vllm":
        if out is None:
            raise SpecError("--format vllm writes one JSON file per load point: give --out DIRECTORY")
        folder = make_out_dir(out)
        for name, result in vllm_results(store, run_id).items():
            path = folder / name
            if path.resolve().parent != folder.resolve():  # file_name makes this impossible; kept as a guard
                raise OrchError(f"--out {out}: {name!r} would be written outside it")
            path.write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")
        return out
    rows = {"points": point_rows, "requests": request_rows, "engine": engine_rows}[table](store, run_id)
    if fmt == "json":
        text = json.dumps({"run": store.run_info(run_id), "rows": rows}, indent=2, default=str)
    elif fmt == "jsonl":
        text = "".join(json.dumps(r, default=str) + "\n" for r in rows)
    elif fmt == "csv":
        buf = io.StringIO()
        keys = sorted({k for r in rows for k in r})
        writer = csv.DictWriter(buf, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
        text = buf.getvalue()
    else:
        if out is None:
            raise SpecError("--format parquet writes a file: give --out FILE.parquet")
        require("data", "--format parquet (or use --format csv)")
        import pandas as pd  # type: ignore[import-untyped, unused-ignore]

        pd.DataFrame(rows).to_parquet(out)
        return out
    if out is not None:
        write_text_out(out, text)
        return out
    return text
