"""`orch calibrate RUN... --out profile.yaml`: fit the guessed hardware constants to measured runs."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from orchestrator.calibrate.acceptance import AcceptanceFit, fit_acceptance, stored_records
from orchestrator.calibrate.fitting import (
    METRICS,
    Calibration,
    fit,
    points_from_store,
    profile_extra,
    simulated_runs,
)
from orchestrator.catalog.loader import canonical_gpu
from orchestrator.catalog.profiles import write_profile
from orchestrator.cli import app, err_line, make_console
from orchestrator.cli.fit_table import FitTable
from orchestrator.cli.progress import Lines, stderr_is_terminal
from orchestrator.errors import SpecError
from orchestrator.promote import resolve_run
from orchestrator.spec.load import spec_from_json
from orchestrator.store.db import DEFAULT_STORE, Store


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def _median(x: float | None) -> str:
    """Three significant digits: a median of 0.004% is not "0.0%"."""
    return "-" if x is None else f"{x * 100:.3g}%"


def _print(cal: Calibration, out: str | None, console: Console) -> None:
    table = FitTable("calibration: simulated vs measured, per point (error = predicted/measured - 1)")
    table.column("point", justify="left")
    for i, (name, _) in enumerate(METRICS):  # the first metric's columns are the last left out
        table.column(f"{name} measured", keep=1 + i)
        table.column(f"{name} before", keep=1 + i)
        table.column(f"{name} after", keep=i)
    for p in cal.points:
        cells = [p.point]
        for name, _ in METRICS:
            meas = p.measured.get(name)
            cells += [f"{meas:,.1f}" if meas is not None else "-", _pct(p.error(name, "before")),
                      _pct(p.error(name, "after"))]
        table.row(*cells)
    table.print(console)
    for name in cal.fitted:
        kept = " (kept: the points do not constrain it)" if name in cal.unconstrained else ""
        console.print(f"  {name}: {cal.start[name]:.4g} -> {cal.fitted[name]:.4g}{kept}", highlight=False)
    worse = "; ".join(f"{m} worse on {w} of {n} points" for m, (w, n) in cal.worse_after().items() if w)
    console.print(f"median |error| over {', '.join(cal.metrics)}: "
                  f"{_median(cal.median_abs_error('before'))} before, "
                  f"{_median(cal.median_abs_error('after'))} after ({cal.iterations} iterations, "
                  f"{cal.evaluations} simulations of every point)"
                  + (f"; after the fit: {worse}" if worse else ""), highlight=False)
    if out:
        console.print(f"wrote {out}; use it with hardware.calibration: {out}", highlight=False)


@app.command("calibrate")
def calibrate_command(
    runs: Annotated[list[str], typer.Argument(
        metavar="RUN...", help="Stored runs: ids, unique prefixes (6+ characters) or latest (orch runs).")],
    out: Annotated[str | None, typer.Option("--out", help="Write the fitted profile (YAML) here.")] = None,
    store_path: Annotated[str, typer.Option("--store", help="Results store (SQLite).")] = DEFAULT_STORE,
    constants: Annotated[str | None, typer.Option(
        "--constants", help="Constants to fit, e.g. hbm_efficiency,step_overhead_s "
        "(default: hbm/compute efficiency and step overhead, + MoE efficiency for MoE models).")] = None,
    allow_mixed: Annotated[bool, typer.Option(
        "--allow-mixed", help="Fit one profile to runs of different models or engines.")] = False,
    metrics: Annotated[str | None, typer.Option(
        "--metrics", help="Fit only these measured metrics, e.g. tpot_mean_ms,output_tokens_per_s "
        "(default: ttft_mean_ms, tpot_mean_ms, output_tokens_per_s).")] = None,
    max_requests: Annotated[int | None, typer.Option(
        "--max-requests", help="Simulate at most this many requests per point (faster, rougher).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Fit efficiencies and the per-step overhead so the simulator reproduces measured runs."""
    if not Path(store_path).is_file():
        raise SpecError(f"--store {store_path}: no such results store; run orch sweep first or pass --store")
    if max_requests is not None and max_requests < 1:
        raise SpecError("--max-requests must be >= 1")
    names = [c.strip() for c in constants.split(",") if c.strip()] if constants else None
    store = Store(store_path, readonly=True)  # a read never creates or changes a store
    try:
        runs = [resolve_run(store, ref) for ref in runs]  # ids, unique prefixes or latest, as elsewhere
        points = points_from_store(store, runs)
        acceptance = fit_acceptance(stored_records(store, runs))  # speculative decoding, if measured
        first = spec_from_json(store.spec_json(runs[0]), f"run {runs[0]}")
    finally:
        store.close()
    if sim := simulated_runs(points):
        err_line("warning:", "bold yellow",
                 f"run(s) {', '.join(sim)} measured the simulated engine: calibrating on them fits the "
                 "simulator to its own output (errors near 0 by construction, the fit only chases noise); "
                 "calibrate against runs of a real engine")
    console = make_console(stderr=as_json)
    if acceptance and len(points) < 2:
        # Nothing to fit the constants to (closed-loop points only, say): the acceptance alone.
        if out:
            write_profile(out, gpu=canonical_gpu(first.hardware.gpu), engine=first.engine.name, constants={},
                          source=f"orch calibrate {' '.join(runs)}", extra={"acceptance": _rates(acceptance)})
        if as_json:
            typer.echo(json.dumps({"acceptance": {m: f.to_dict() for m, f in acceptance.items()}, "out": out},
                                  indent=2))
            return
        console.print(f"no open-loop points to fit the constants to; the measured acceptance of {len(runs)} "
                      "run(s):", highlight=False)
        _print_acceptance(acceptance, out, console)
        return
    start = f"fitting to {len(points)} measured points (each step simulates every one)"
    lines = Lines("calibrate: ", interval_s=0)  # each iteration's line, on a terminal or not

    def progress(text: str) -> None:
        if lines.last == -float("inf"):  # the first iteration: the checks passed, the fit runs
            lines.say(start)
        lines.say(text)

    status = console.status(start) if stderr_is_terminal() else contextlib.nullcontext()
    with status:
        cal = fit(points, constants=names, allow_mixed=allow_mixed, max_requests=max_requests,
                  metrics=[m.strip() for m in metrics.split(",") if m.strip()] if metrics else None,
                  progress=progress)
    extra = profile_extra(cal, runs)
    if acceptance:
        extra["acceptance"] = _rates(acceptance)
    if out:
        write_profile(out, gpu=cal.gpu, engine=cal.engine, constants=cal.fitted,
                      source=f"orch calibrate {' '.join(runs)}", extra=extra)
    if as_json:
        typer.echo(json.dumps({"gpu": cal.gpu, "engine": cal.engine, "start": cal.start, "fitted": cal.fitted,
                               **extra["fit"], "acceptance": {m: f.to_dict() for m, f in acceptance.items()},
                               "out": out}, indent=2))
        return
    _print(cal, out, console)
    _print_acceptance(acceptance, out, console)


def _rates(acceptance: dict[str, AcceptanceFit]) -> dict[str, list[float]]:
    return {m: [round(x, 4) for x in f.per_position] for m, f in acceptance.items()}


def _print_acceptance(acceptance: dict[str, AcceptanceFit], out: str | None, console: Console) -> None:
    for f in acceptance.values():
        console.print(
            f"  speculative {f.method}: {f.tokens_per_step:.2f} tokens per step measured over {f.points} "
            f"points, {f.assumed_tokens_per_step:.2f} assumed; acceptance per position "
            f"[{', '.join(f'{x:.3f}' for x in f.per_position)}] ({f.form})"
            + (" -> written to the profile: a spec naming it predicts with these" if out else ""),
            highlight=False)
