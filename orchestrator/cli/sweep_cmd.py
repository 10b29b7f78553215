"""`orch sweep SPEC`: the main job; `orch report RUN` prints a stored sweep again without re-running."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from orchestrator.cli import RUN_HELP, app, err_console, make_console
from orchestrator.cli.consistency_cmd import consistency_lines
from orchestrator.cli.sim_cmd import _rates
from orchestrator.deploy.targets import check_runs_here
from orchestrator.errors import DecisionNotSound, NoLayoutMeetsSLO, OrchError, SpecError
from orchestrator.layout import Layout, parse_layouts
from orchestrator.loadgen.bench import PointResult
from orchestrator.loadgen.metrics import finite
from orchestrator.loadgen.records import RequestRecord
from orchestrator.pipeline.sweep import Sweep, SweepOptions, SweepResult, outcomes_from_store
from orchestrator.pipeline.validate import load_checked_spec
from orchestrator.promote import resolve_run
from orchestrator.report.compare import comparability, compare_runs
from orchestrator.report.data import load_report
from orchestrator.selection import select
from orchestrator.spec.load import revalidated, spec_from_json
from orchestrator.spec.models import SweepSpec
from orchestrator.store.db import DEFAULT_STORE, Store


class _Display:
    """Rich progress on stderr: the layout, its phase, and the load point's completed requests."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task: Any = None
        self.layout = ""

    def phase(self, layout: str, phase: str) -> None:
        self.layout = layout
        if self.task is None:
            self.task = self.progress.add_task(f"{layout}: {phase}", total=None)
        else:
            self.progress.update(self.task, description=f"{layout}: {phase}", total=None, completed=0)

    def point_start(self, layout: str, label: str, total: int | None) -> None:
        self.progress.update(self.task, description=f"{layout}: bench {label}", total=total, completed=0)

    def record(self, rec: RequestRecord, /) -> None:
        self.progress.advance(self.task)

    # the bench runner's Progress protocol
    def begin(self, label: str, total: int | None) -> None:
        self.progress.update(self.task, total=total, completed=0)

    def append(self, rec: RequestRecord, /) -> None:
        self.progress.advance(self.task)

    def point_done(self, layout: str, result: PointResult) -> None:
        m = result.metrics
        verdict = "-" if result.passed is None else ("pass" if result.passed else f"fail ({result.verdict})")
        self.progress.console.print(
            f"  {layout} {result.point.label}: {m.n_completed} ok / {m.n_failed} failed, TTFT p99 "
            f"{_ms(m.ttft_ms.p99)}, ITL p99 {_ms(m.itl_chunk_ms.p99)}, goodput {_num(m.goodput)} req/s: "
            f"{verdict}",
            highlight=False,
        )

    def layout_done(self, layout: str, status: str, reason: str | None) -> None:
        self.progress.console.print(
            f"[bold]{layout}[/]: {status}" + (f": {reason}" if reason else ""), highlight=False
        )


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f} ms"


def _num(v: float | None, nd: int = 2) -> str:
    return "-" if v is None else f"{v:,.{nd}f}"


def _err(measured: object, predicted: object) -> str:
    if not isinstance(measured, int | float) or not isinstance(predicted, int | float) or not measured:
        return "?"
    return f"{(predicted - measured) / measured:+.0%}"


def _predicted(m: dict[str, Any]) -> str:
    """The simulator's prediction for the same requests, with its error against the measurement."""
    pred = m.get("predicted") or {}
    if not pred or "error" in pred:
        return "-"
    ttft, tpot = (m.get("ttft_ms") or {}).get("p99"), (m.get("tpot_ms") or {}).get("p50")
    return (
        f"{_num(pred.get('ttft_p99_ms'), 1)} ({_err(ttft, pred.get('ttft_p99_ms'))}) / "
        f"{_num(pred.get('tpot_p50_ms'), 1)} ({_err(tpot, pred.get('tpot_p50_ms'))})"
    )


def _engine(m: dict[str, Any]) -> str:
    """The engines' own view of the point (scraped /metrics): peak KV use, mean running/waiting
    requests, preemptions during the point."""
    e = m.get("engine") or {}
    if not e.get("samples"):
        return "-"
    kv = e.get("kv_usage_peak")
    pre = e.get("preemptions")
    return (
        f"{'-' if kv is None else f'{kv:.0%}'}, {_num(e.get('running_mean'), 1)}/"
        f"{_num(e.get('waiting_mean'), 1)}, {'-' if pre is None else f'{pre:.0f}'}"
    )


def print_result(result: SweepResult, store: Store, console: Console, *, scale_note: str = "") -> None:
    table = Table(title=f"orch sweep {result.run_id}{scale_note}", title_justify="left")
    virtual = (store.extras(result.run_id, "sweep").get("sweep") or {}).get("mode") == "virtual"
    cols = [
        "layout",
        "GPUs",
        "status",
        "load point",
        "TTFT p99 ms",
        "ITL p99 ms",
        "TPOT p50 ms",
        "out tok/s/GPU",
        "goodput/GPU [95%]",
    ]
    if not virtual:  # in virtual time the prediction is the measurement
        cols.append("predicted TTFT p99 / TPOT p50 (err)")
    cols.append("engine KV peak, run/wait mean, preempt")
    cols.append("SLO")
    for col in cols:
        table.add_column(
            col,
            justify="left" if col in ("layout", "status", "load point", "SLO") else "right",
            no_wrap=col != "SLO",  # the verdict text wraps; numbers and headers stay on one line
            overflow="fold",
        )
    for o in result.outcomes:
        if not o.points:
            table.add_row(
                o.layout, str(o.gpus), o.status, *["-"] * (len(cols) - 4), (o.reason or "")[:80]
            )
        for p in sorted(store.points(result.run_id, o.layout), key=lambda p: p.rate or 0.0):
            m = p.metrics
            per_gpu = m.get("per_gpu") or {}
            iv = (m.get("intervals") or {}).get("goodput_per_gpu")
            cells = [
                o.layout,
                str(o.gpus),
                o.status,
                p.label,
                _num((m.get("ttft_ms") or {}).get("p99"), 1),
                _num((m.get("itl_chunk_ms") or {}).get("p99"), 1),
                _num((m.get("tpot_ms") or {}).get("p50"), 1),
                _num(per_gpu.get("output_throughput"), 1),
                _num(None if m.get("goodput") is None else m["goodput"] / o.gpus, 3)
                + (f" [{iv[0]:.2f}, {iv[1]:.2f}]" if iv else ""),
            ]
            if not virtual:
                cells.append(_predicted(m))
            cells.append(_engine(m))
            table.add_row(*cells, "pass" if p.passed else f"fail: {p.verdict}")
    console.print(table)
    caps = _capacity_lines(result, store)
    if caps:
        console.print("SLO capacity (highest request rate meeting the SLO, by bracketing and bisection):")
        for line in caps:
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    extras = store.extras(result.run_id)
    for line in _objective_lines(extras) + _timing_lines(extras):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    sel = result.selection
    for v in sel.verdicts:
        mark = (
            "[bold green]winner[/]"
            if v.layout == sel.winner
            else ("[yellow]tie[/]" if v.layout in sel.tie_with else "[red]loses[/]")
        )
        console.print(f"  {v.layout}: {mark}: {escape(v.reason)}", highlight=False)
    if not sel.sound:
        console.print(f"[bold red]{escape(unsound_message(result))}[/]", highlight=False)
    if sel.winner is None:
        console.print("[bold red]no layout meets the SLO[/]")
    else:
        console.print(
            f"[bold]winner: {sel.winner}[/] (objective {sel.objective}); stored in {store.path} as "
            f"run {result.run_id}",
            highlight=False,
        )


def unsound_message(result: SweepResult) -> str:
    bad = result.selection.unjudged
    return (
        f"decision not sound: {len(bad)} load point(s) could not be judged even when measured again "
        f"({', '.join(bad)}); rerun on an idle machine (run {result.run_id})"
    )


def _mode_note(spec: SweepSpec, served: bool) -> str:
    if spec.engine.name != "sim":
        return ""
    if not served:
        return (
            " (simulated engine in virtual time: predicted, not measured on GPUs; "
            f"deterministic for workload seed {spec.workload.seed})"
        )
    scale = spec.engine.time_scale
    return " (simulated engine served over HTTP: predicted, not measured on GPUs" + (
        f"; run at time scale {scale:g}, reported in simulated time)" if scale != 1 else ")"
    )


def _capacity_lines(result: SweepResult, store: Store) -> list[str]:
    lines = []
    cap_iv = {v.layout: v.capacity_interval for v in result.selection.verdicts}
    for key, cap in store.extras(result.run_id, "capacity/").items():
        iv = cap_iv.get(key.removeprefix("capacity/"))
        sure = f" [{iv[0]:g}, {'-' if iv[1] is None else f'{iv[1]:g}'}]" if iv else ""
        pts = ", ".join(
            f"{p['rate']:g}{'' if p['passed'] else ('?' if not p['judged'] else 'x')}" for p in cap["points"]
        )
        lines.append(
            f"  {key.removeprefix('capacity/')}: {_capacity_text(cap, sure)}; seed {cap['seed_per_s']:g}/s "
            f"from {cap['seed_source']}; measured {pts} (x fails, ? unjudged)"
        )
    return lines


def _capacity_text(cap: dict[str, Any], sure: str) -> str:
    lo, hi = cap["bracket_per_s"]
    if cap["capacity_per_s"] is None:
        return f"capacity 0 req/s: fails the SLO down to the search minimum ({cap['limiting']})"
    if hi is None:
        return f"capacity >= {lo:g} req/s ({cap['stopped_because']})"
    return f"capacity {lo:g} req/s{sure}, fails at {hi:g} ({cap['limiting']})"


def _objective_lines(extras: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for layout, obj in (extras.get("objectives") or {}).items():
        parts = []
        cur = obj.get("currency") or ""
        cap = obj.get("at_capacity")
        if cap:
            parts.append(
                f"at capacity {_num(cap.get('tokens_per_s_per_gpu'), 1)} tok/s/GPU, "
                f"{_num(cap.get('tokens_per_s_per_user'), 1)} tok/s/user"
                + (f", {_num(cap.get('cost_per_million_output_tokens'), 3)} {cur}/M output tokens"
                   if "cost_per_million_output_tokens" in cap else "")
            )
        at = obj.get("at_interactivity")
        if at:
            target = f"at >= {at['target_tokens_per_s_per_user']:g} tok/s/user"
            parts.append(
                f"{target}: {at['verdict']}" if "verdict" in at else
                f"{target}: {_num(at.get('tokens_per_s_per_gpu'), 1)} tok/s/GPU ({at.get('label')})"
                + (f", {_num(at.get('cost_per_million_output_tokens'), 3)} {cur}/M output tokens"
                   if "cost_per_million_output_tokens" in at else "")
            )
        if parts:
            lines.append(f"  {layout}: " + "; ".join(parts))
    front = (extras.get("pareto") or {}).get("frontier") or []
    if lines:
        lines.insert(0, "objectives (interactivity = 1000 / TPOT p50 ms):")
    if front:
        lines.append(
            "Pareto frontier (tok/s/user, tok/s/GPU): "
            + ", ".join(
                f"{f['layout']} {f['label']} "
                f"({f['tokens_per_s_per_user']:.1f}, {f['tokens_per_s_per_gpu']:.1f})"
                for f in front
            )
        )
    return lines


def _timing_lines(extras: dict[str, dict[str, Any]]) -> list[str]:
    t = (extras.get("sweep") or {}).get("timing")
    if not t:
        return []
    ratio = f" ({t['exhaustive_s'] / t['wall_s']:.1f}x this sweep's time)" if t["wall_s"] > 0 else ""
    return [
        f"time to decision: {t['wall_s']:.1f} s for {t['points_measured']} load points on "
        f"{t['layouts_measured']} layouts; an exhaustive grid: {t['exhaustive_points']} points on "
        f"{t['exhaustive_layouts']} layouts, about {t['exhaustive_s']:.0f} s{ratio}"
    ]


def _json_out(result: SweepResult, store: Store) -> str:
    return json.dumps(
        finite(
            {
                "run_id": result.run_id,
                "store": str(store.path),
                **store.extras(result.run_id, "sweep"),
                **store.extras(result.run_id, "objectives"),
                **store.extras(result.run_id, "pareto"),
                "capacity": {
                    k.removeprefix("capacity/"): v
                    for k, v in store.extras(result.run_id, "capacity/").items()
                },
                "selection": result.selection.to_dict(),
                "layouts": [
                    {
                        "layout": o.layout,
                        "gpus": o.gpus,
                        "status": o.status,
                        "reason": o.reason,
                        "points": [
                            {
                                "label": p.label,
                                "rate": p.rate,
                                "passed": p.passed,
                                "verdict": p.verdict,
                                "metrics": p.metrics,
                            }
                            for p in store.points(result.run_id, o.layout)
                        ],
                    }
                    for o in result.outcomes
                ],
            }
        ),
        indent=2,
    )


def _as_swept(
    spec: SweepSpec,
    layouts: tuple[Layout, ...] | None,
    rates: tuple[float, ...] | None,
    num_requests: int | None,
) -> SweepSpec:
    """The spec with the command line's --layouts, --rates and --num-requests folded in."""
    update: dict[str, Any] = {}
    if layouts:
        update["layouts"] = list(layouts)
    workload: dict[str, Any] = {}
    if rates:
        workload["rates_per_s"] = list(rates)
    if num_requests is not None:  # a request count replaces the duration, as the option always did
        workload.update(num_requests=num_requests, duration_s=None)
    if workload:
        update["workload"] = spec.workload.model_copy(update=workload)
    return revalidated(spec.model_copy(update=update), "--layouts/--rates/--num-requests") if update else spec


@app.command("sweep")
def sweep_command(
    spec_path: Annotated[str | None, typer.Argument(metavar="SPEC", help="Sweep spec YAML.")] = None,
    layouts: Annotated[str | None, typer.Option("--layouts", help="Subset, e.g. tp8,tp4x2.")] = None,
    engine: Annotated[
        str | None, typer.Option("--engine", help="Override engine.name: sim|vllm|sglang.")
    ] = None,
    rates: Annotated[str | None, typer.Option("--rates", help="Requests/s; default: the spec's.")] = None,
    num_requests: Annotated[
        int | None, typer.Option("--num-requests", help="Requests per load point.")
    ] = None,
    store_path: Annotated[str, typer.Option("--store", help="Results store (SQLite).")] = DEFAULT_STORE,
    resume: Annotated[
        str | None, typer.Option("--resume", help="Finish an interrupted run (id, prefix or latest).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Also deploy layouts the planner rejects.")] = False,
    served: Annotated[
        bool,
        typer.Option(
            "--served", help="engine sim: run real OpenAI servers over HTTP instead of virtual time."
        ),
    ] = False,
    measure_all: Annotated[
        bool, typer.Option("--measure-all", help="Also measure layouts predicted to lose clearly.")
    ] = False,
    workdir: Annotated[
        str | None, typer.Option("--workdir", help="Logs directory; default a temp dir.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Deploy each layout, measure it at each load point, pick the SLO winner, store everything."""
    store = Store(store_path)
    if resume is not None:
        try:
            ref = resolve_run(store, resume)
        except OrchError:
            ref = resume  # the store may have lost the run (deleted, emptied): its journal has it
        store.recover(ref)  # a journal left by a store that failed under the sweep goes in first
        run = store.run(ref)
        spec = spec_from_json(store.spec_json(run.run_id), f"run {run.run_id}")
        run_id: str | None = run.run_id
        shown_path = run.spec_path
    else:
        if spec_path is None:
            raise SpecError("give a SPEC file, or --resume RUN_ID (orch runs lists them)")
        spec = load_checked_spec(spec_path)
        run_id, shown_path = None, spec_path
    if engine is not None:
        if engine not in ("sim", "vllm", "sglang"):
            raise SpecError(f"--engine {engine!r}: expected sim, vllm or sglang")
        spec = spec.model_copy(update={"engine": spec.engine.model_copy(update={"name": engine})})
    chosen = tuple(parse_layouts(layouts)) if layouts else None
    rate_list = tuple(r) if (r := _rates(rates)) else None
    if num_requests is not None and num_requests < 1:
        raise SpecError("--num-requests must be >= 1")
    if run_id is None:
        # A new run stores the spec as swept (with these overrides), so --resume repeats the same
        # layouts and load points without the flags being given again.
        spec = _as_swept(spec, chosen, rate_list, num_requests)
        chosen = rate_list = None
        num_requests = None
    check_runs_here(spec, shown_path or "the stored spec")
    options = SweepOptions(
        layouts=chosen,
        rates=rate_list,
        num_requests=num_requests,
        force=force,
        workdir=workdir,
        served=served,
        measure_all=measure_all,
    )
    console = make_console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        sweep = Sweep(spec, store, _Display(progress), spec_path=shown_path, options=options, run_id=run_id)
        try:
            result = sweep.run()
        except KeyboardInterrupt:
            err_console.print(
                f"interrupted: what was measured is stored; finish with "
                f"orch sweep --resume {sweep.run_id} --store {store.path}", markup=False
            )
            raise typer.Exit(130) from None
    note = _mode_note(spec, sweep.served)
    if as_json:
        typer.echo(_json_out(result, store))
    else:
        print_result(result, store, make_console(), scale_note=note)
    if not result.selection.sound:
        raise DecisionNotSound(unsound_message(result))
    if result.selection.winner is None:
        raise NoLayoutMeetsSLO(f"no layout meets the SLO in run {result.run_id}; see the reasons above")


@app.command("report")
def report_command(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help=RUN_HELP)],
    store_path: Annotated[str, typer.Option("--store", help="Results store (SQLite).")] = DEFAULT_STORE,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    html_out: Annotated[
        str | None, typer.Option("--html", help="Also write an interactive HTML report (one offline file).")
    ] = None,
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
        from orchestrator.report.html import render_html

        page = render_html(load_report(store, run.run_id, result.selection, outcomes))
        Path(html_out).write_text(page, encoding="utf-8")
        err_console.print(f"wrote {html_out}", markup=False)
    if as_json:
        typer.echo(json.dumps({**json.loads(_json_out(result, store)), "consistency": checks}, indent=2))
    else:
        mode = (store.extras(run.run_id, "sweep").get("sweep") or {}).get("mode", "served")
        print_result(result, store, make_console(), scale_note=_mode_note(spec, mode == "served"))
        for c in checks:
            typer.echo("\n".join(consistency_lines(c, c["passed"], c["max_divergence"])))


@app.command("compare")
def compare_command(
    run_a: Annotated[str, typer.Argument(metavar="RUN_A", help="The baseline run (id, prefix or latest).")],
    run_b: Annotated[str, typer.Argument(metavar="RUN_B", help="The run to judge (id, prefix or latest).")],
    threshold: Annotated[
        str, typer.Option("--threshold", help="Relative change that counts, e.g. 5%.")
    ] = "5%",
    store_path: Annotated[str, typer.Option("--store", help="Results store (SQLite).")] = DEFAULT_STORE,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    allow_mismatch: Annotated[
        bool,
        typer.Option("--allow-mismatch", help="Compare even when spec hashes, engines or hardware differ."),
    ] = False,
) -> None:
    """What changed between two runs; exit code 1 on a regression beyond noise (the nightly CI verdict)."""
    text = threshold.strip().rstrip("%")
    try:
        limit = float(text) / (100 if threshold.strip().endswith("%") else 1)
    except ValueError:
        raise SpecError(f"--threshold {threshold!r}: give a relative change such as 5% or 0.05") from None
    if limit < 0:
        raise SpecError("--threshold must not be negative")
    store = Store(store_path, readonly=True)
    a, b = resolve_run(store, run_a), resolve_run(store, run_b)
    mismatch = comparability(store, a, b)
    if mismatch and not allow_mismatch:
        raise SpecError(
            f"runs {a} and {b} are not comparable: {'; '.join(mismatch)}; "
            "pass --allow-mismatch to compare anyway"
        )
    for why in mismatch:
        err_console.print(f"[bold yellow]warning:[/] comparing anyway although {why}", highlight=False)
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
    else:
        table = Table(title=f"orch compare {a} -> {b} (threshold {limit:.0%})", title_justify="left")
        for col in ("layout", "load point", "metric", "before", "after", "change", "verdict"):
            table.add_column(col, no_wrap=col == "layout", overflow="fold")
        for c in changes:
            rel = "-" if c.relative is None else f"{c.relative:+.1%}"
            table.add_row(
                c.layout,
                c.point,
                c.metric,
                _num(c.before),
                _num(c.after),
                rel,
                ("[red]regression[/]" if c.regression else "ok") + (f": {c.note}" if c.note else ""),
            )
        make_console().print(table)
        typer.echo(f"{len(regressions)} regression(s)" if regressions else "no regression")
    if regressions:
        raise typer.Exit(1)
