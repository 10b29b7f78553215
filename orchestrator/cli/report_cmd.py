"""`orch report RUN` prints a stored sweep again without re-running; `orch compare A B` judges what
changed between two runs."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from orchestrator.cli import RUN_HELP, app, err_console, make_console
from orchestrator.cli.consistency_cmd import consistency_lines
from orchestrator.cli.fit_table import FitTable
from orchestrator.cli.sweep_tables import json_out, mode_note, num, print_result
from orchestrator.errors import SpecError
from orchestrator.loadgen.metrics import finite
from orchestrator.pipeline.sweep import SweepResult, outcomes_from_store
from orchestrator.promote import resolve_run
from orchestrator.report.compare import comparability, compare_runs, parse_threshold
from orchestrator.report.data import load_report
from orchestrator.selection import select
from orchestrator.spec.load import spec_from_json
from orchestrator.store.db import DEFAULT_STORE, Store
from orchestrator.store.extras import SideRecords


@app.command("report")
def report_command(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help=RUN_HELP)],
    store_path: Annotated[str, typer.Option("--store", help="Results store (SQLite).")] = DEFAULT_STORE,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    html_out: Annotated[
        str | None, typer.Option("--html", help="Also write an interactive HTML report (one offline file).")
    ] = None,
    wide: Annotated[bool, typer.Option("--wide", help="Every column, however narrow the terminal.")] = False,
) -> None:
    """Print a stored sweep again (verdicts recomputed from the stored measurements)."""
    store = Store(store_path, readonly=True)
    run = store.run(resolve_run(store, run_id))
    stored = store.consistency(run.run_id)
    checks = [{**c.result, "passed": c.passed, "max_divergence": c.max_divergence} for c in stored]
    if checks and not store.layouts(run.run_id):  # an `orch consistency` run: no sweep to show
        if as_json:
            typer.echo(json.dumps(finite({"run_id": run.run_id, "consistency": checks}), indent=2))
        for c in [] if as_json else checks:
            typer.echo("\n".join(consistency_lines(c, c["passed"], c["max_divergence"])))
        return
    spec = spec_from_json(store.spec_json(run.run_id), f"run {run.run_id}")
    outcomes = outcomes_from_store(store, run.run_id)
    result = SweepResult(run.run_id, select(outcomes, spec.objective), tuple(outcomes))
    if html_out is not None:
        # Plotly is imported only here: `orch bench` also runs from engine venvs that have no plotly.
        from orchestrator.outputs import write_text_out
        from orchestrator.report.html import render_html

        page = render_html(load_report(store, run.run_id, result.selection, outcomes))
        write_text_out(html_out, page, "--html")
        err_console().print(f"wrote {html_out}", markup=False)
    if as_json:
        typer.echo(json.dumps({**json.loads(json_out(result, store)), "consistency": checks}, indent=2))
    else:
        mode = SideRecords(store, run.run_id).sweep()
        served = mode is None or mode.mode == "served"
        print_result(result, store, make_console(), scale_note=mode_note(spec, served), wide=wide)
        for c in checks:
            typer.echo("\n".join(consistency_lines(c, c["passed"], c["max_divergence"])))


@app.command("compare")
def compare_command(
    run_a: Annotated[str, typer.Argument(metavar="RUN_A", help="The baseline run (id, prefix or latest).")],
    run_b: Annotated[str, typer.Argument(metavar="RUN_B", help="The run to judge (id, prefix or latest).")],
    threshold: Annotated[
        str, typer.Option("--threshold", help="Relative change that counts, with its unit: 5%.")
    ] = "5%",
    store_path: Annotated[str, typer.Option("--store", help="Results store (SQLite).")] = DEFAULT_STORE,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    allow_mismatch: Annotated[
        bool,
        typer.Option("--allow-mismatch", help="Compare even when spec hashes, engines or hardware differ."),
    ] = False,
) -> None:
    """What changed between two runs; exit code 1 on a regression beyond noise (the nightly CI verdict)."""
    limit = parse_threshold(threshold)
    store = Store(store_path, readonly=True)
    a, b = resolve_run(store, run_a), resolve_run(store, run_b)
    if a == b:
        raise SpecError(f"RUN_A {run_a!r} and RUN_B {run_b!r} are the same run {a}: nothing to compare; "
                        "name two runs (orch runs lists them)")
    mismatch = comparability(store, a, b)
    if mismatch and not allow_mismatch:
        raise SpecError(
            f"runs {a} and {b} are not comparable: {'; '.join(mismatch)}; "
            "pass --allow-mismatch to compare anyway"
        )
    for why in mismatch:
        err_console().print(f"[bold yellow]warning:[/] comparing anyway although {why}", highlight=False)
    changes = compare_runs(store, a, b, limit)
    regressions = [c for c in changes if c.regression]
    if as_json:
        typer.echo(
            json.dumps(
                finite(
                    {
                        "baseline": a,
                        "run": b,
                        "threshold": limit,
                        "mismatch": mismatch,
                        "regression": bool(regressions),
                        "changes": [c.__dict__ for c in changes],
                    }
                ),
                indent=2,
            )
        )
    elif not changes:
        # An empty table reads as a failure to compare; nothing moved beyond the threshold is the answer.
        typer.echo(f"orch compare {a} -> {b}: no change beyond the {limit * 100:g}% threshold: no regression")
    else:
        table = FitTable(f"orch compare {a} -> {b} (threshold {limit * 100:g}%)")
        for col, keep in (("layout", 0), ("load point", 0), ("metric", 0), ("before", 1), ("after", 1),
                          ("change", 0), ("verdict", 0)):
            table.column(col, justify="right" if col in ("before", "after", "change") else "left", keep=keep,
                         wrap=col == "verdict")
        for c in changes:
            rel = "-" if c.relative is None else f"{c.relative:+.1%}"
            table.row(
                c.layout,
                c.point,
                c.metric,
                num(c.before),
                num(c.after),
                rel,
                ("[red]regression[/]" if c.regression else "ok") + (f": {c.note}" if c.note else ""),
            )
        table.print(make_console())
        typer.echo(f"{len(regressions)} regression(s)" if regressions else "no regression")
    if regressions:
        raise typer.Exit(1)
