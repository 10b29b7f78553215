"""`orch runs` lists stored runs; `orch export RUN` hands one to pandas users."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from rich.text import Text

from orchestrator.cli import RUN_HELP, app, make_console
from orchestrator.cli.fit_table import FitTable
from orchestrator.promote import resolve_run
from orchestrator.store.db import DEFAULT_STORE, Store
from orchestrator.store.export import export_run


@app.command("runs")
def runs_command(
    store_path: Annotated[str, typer.Option("--store", help="Results store (SQLite).")] = DEFAULT_STORE,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Every column, however narrow the terminal.")] = False,
) -> None:
    """List the runs in the results store, newest first."""
    store = Store(store_path, readonly=True)
    runs = store.runs()
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {
                        "run_id": r.run_id,
                        "created_at": r.created_at,
                        "status": store.status_now(r),
                        "spec_path": r.spec_path,
                        "spec_hash": r.spec_hash,
                        "engine": r.engine,
                        "model": r.model,
                        "winner": (r.selection or {}).get("winner"),
                        "metadata": r.metadata,
                    }
                    for r in runs
                ],
                indent=2,
            )
        )
        return
    table = FitTable(f"runs in {store.path}", wide=wide)
    for col, keep, wrap in (("run", 0, False), ("created (UTC)", 2, False), ("status", 0, False),
                            ("engine", 1, False), ("model", 1, False), ("spec", 3, True),
                            ("winner", 0, False), ("eval metadata", 4, True)):
        table.column(col, justify="left", keep=keep, wrap=wrap)
    for r in runs:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r.created_at))
        meta = ", ".join(f"{k}={v}" for k, v in r.metadata.items())
        cells = (r.run_id, created, store.status_now(r), r.engine, r.model, r.spec_path or "-",
                 (r.selection or {}).get("winner") or "-", meta)
        # Text cells: a path or metadata value holding "[bold]" prints as written, not as markup.
        table.row(*(Text(str(c)) for c in cells))
    table.print(make_console())
    died = [r.run_id for r in runs if store.status_now(r) == "died"]
    if died:
        typer.echo(f"died: the orch process of {', '.join(died)} ended without finishing it; "
                   f"orch sweep --resume {died[0]} --store {store.path} finishes it")


@app.command("export", help="Export a run: one row per (layout, load point) with flattened metrics, per "
             "request or per engine metrics scrape; or the vLLM benchmark JSON of every load point.")
def export_command(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help=RUN_HELP)],
    fmt: Annotated[
        str, typer.Option("--format", help="json | jsonl | csv | parquet | vllm (vllm bench JSON per point)")
    ] = "json",
    out: Annotated[
        str | None, typer.Option("--out", help="File to write (a directory for vllm); default stdout.")
    ] = None,
    per_request: Annotated[bool, typer.Option("--requests", help="One row per request.")] = False,
    table: Annotated[
        str, typer.Option("--table", help="points | requests | engine (one row per /metrics scrape)")
    ] = "points",
    store_path: Annotated[str, typer.Option("--store", help="Results store (SQLite).")] = DEFAULT_STORE,
) -> None:
    """Export a run (rows per load point, request or /metrics scrape; or vLLM benchmark JSON)."""
    store = Store(store_path, readonly=True)
    result = export_run(store, resolve_run(store, run_id), fmt, out, per_request=per_request, table=table)
    typer.echo(result if out is None else f"wrote {result}")
