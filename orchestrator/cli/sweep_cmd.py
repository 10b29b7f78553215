"""`orch sweep SPEC`: the main job. Its tables and summary lines are in sweep_tables.py; `orch report`
and `orch compare` in report_cmd.py."""

from __future__ import annotations

import contextlib
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orchestrator.cli import app, err_console, make_console
from orchestrator.cli.flags import parse_ints, parse_rates
from orchestrator.cli.progress import SweepLines, stderr_is_terminal
from orchestrator.cli.sweep_tables import (
    infrastructure_failure,
    json_out,
    mode_note,
    ms,
    num,
    print_result,
    unsound_message,
)
from orchestrator.deploy.targets import check_runs_here
from orchestrator.disagg import AnyLayout, parse_any_layouts
from orchestrator.errors import DecisionNotSound, InfrastructureError, NoLayoutMeetsSLO, SpecError
from orchestrator.loadgen.bench import PointResult
from orchestrator.loadgen.records import RequestRecord
from orchestrator.pipeline.sweep import Observer, Sweep, SweepOptions
from orchestrator.pipeline.validate import load_checked_spec
from orchestrator.plan.candidates import check_pairs
from orchestrator.spec.load import revalidated, spec_from_json
from orchestrator.spec.models import SweepSpec
from orchestrator.store.db import DEFAULT_STORE, Store


class _Display:
    """Rich progress on stderr: the layout, its phase, and the load point's completed requests."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task: Any = None
        self.layout = ""
        self.bars: dict[str, Any] = {}

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

    def request_progress(self, layout: str, label: str, done: int, total: int | None) -> None:
        # Side by side: one bar per co-running layout, next to the phase line.
        task = self.bars.get(layout)
        if task is None:
            task = self.bars[layout] = self.progress.add_task("", total=total)
        self.progress.update(task, description=f"{layout}: bench {label}", total=total, completed=done)

    def point_done(self, layout: str, result: PointResult) -> None:
        self.progress.console.print(point_line(layout, result), highlight=False, markup=False)

    def layout_done(self, layout: str, status: str, reason: str | None) -> None:
        if layout in self.bars:
            self.progress.remove_task(self.bars.pop(layout))
        self.progress.console.print(
            f"[bold]{layout}[/]: {status}" + (f": {reason}" if reason else ""), highlight=False
        )

def point_line(layout: str, result: PointResult) -> str:
    m = result.metrics
    verdict = "-" if result.passed is None else ("pass" if result.passed else f"fail ({result.verdict})")
    return (f"  {layout} {result.point.label}: {m.n_completed} ok / {m.n_failed} failed, TTFT p99 "
            f"{ms(m.ttft_ms.p99)}, ITL p99 {ms(m.itl_chunk_ms.p99)}, goodput {num(m.goodput)} req/s: "
            f"{verdict}")


def _as_swept(
    spec: SweepSpec,
    layouts: tuple[AnyLayout, ...] | None,
    rates: tuple[float, ...] | None,
    num_requests: int | None,
    concurrency: tuple[int, ...] | None = None,
) -> SweepSpec:
    """The spec with the command line's --layouts, --rates, --concurrency and --num-requests folded in."""
    update: dict[str, Any] = {}
    if layouts:
        update["layouts"] = list(layouts)
    workload: dict[str, Any] = {}
    if rates:
        workload["rates_per_s"] = list(rates)
    if concurrency:
        # a closed-loop grid: the open loop's rate fields (grid, in-flight cap, rate bounds) go
        search = spec.workload.search
        workload.update(
            loop="closed", concurrency=list(concurrency), rates_per_s=None, max_concurrency=None,
            search=type(search)(tolerance_frac=search.tolerance_frac, max_points=search.max_points),
        )
    if num_requests is not None:  # a request count replaces the duration, as the option always did
        workload.update(num_requests=num_requests, duration_s=None)
    if workload:
        update["workload"] = spec.workload.model_copy(update=workload)
    return (
        revalidated(spec.model_copy(update=update), "--layouts/--rates/--concurrency/--num-requests")
        if update else spec
    )


@app.command("sweep")
def sweep_command(
    spec_path: Annotated[str | None, typer.Argument(metavar="SPEC", help="Sweep spec YAML.")] = None,
    layouts: Annotated[str | None, typer.Option(
        "--layouts", help="Subset, e.g. tp8,tp4x2,p:tp4+d:tp4 (prefill/decode pairs too).")] = None,
    engine: Annotated[
        str | None, typer.Option("--engine", help="Override engine.name: sim|vllm|sglang.")
    ] = None,
    rates: Annotated[str | None, typer.Option("--rates", help="Requests/s; default: the spec's.")] = None,
    concurrency: Annotated[
        str | None,
        typer.Option("--concurrency", help="Closed loop: N[,M...] requests in flight (loop: closed)."),
    ] = None,
    num_requests: Annotated[
        int | None, typer.Option("--num-requests", help="Requests per load point.")
    ] = None,
    store_path: Annotated[str, typer.Option("--store", help="Results store (SQLite).")] = DEFAULT_STORE,
    wide: Annotated[bool, typer.Option("--wide", help="Every column, however narrow the terminal.")] = False,
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
    side_by_side: Annotated[
        bool | None,
        typer.Option(
            "--side-by-side/--one-at-a-time",
            help="Served: measure layouts that fit on disjoint GPUs at the same time; default auto "
            "(real engines on GPUs on local/Ray; a resumed run keeps its choice).",
        ),
    ] = None,
) -> None:
    """Deploy each layout, measure it at each load point, pick the SLO winner, store everything."""
    store = Store(store_path)
    if resume is not None:
        # The store may have lost the run (deleted, emptied): its journal beside the store has it, so
        # the reference is resolved over both, and the journal replayed first.
        run = store.run(store.recover(resume))
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
    chosen = tuple(parse_any_layouts(layouts)) if layouts else None
    check_pairs(spec, chosen or spec.layouts)  # a pair no deployment can run: exit 2 before the store opens
    rate_list = tuple(r) if (r := parse_rates(rates)) else None
    levels = parse_ints(concurrency, "--concurrency")
    if levels is not None and rate_list is not None:
        raise SpecError("give --rates (open loop) or --concurrency (closed loop), not both")
    if levels is not None and min(levels) < 1:
        raise SpecError("--concurrency: give requests in flight >= 1, e.g. --concurrency 8,32")
    if levels is not None and resume is not None:
        raise SpecError("--concurrency does not combine with --resume (a resumed run keeps its loads)")
    if num_requests is not None and num_requests < 1:
        raise SpecError("--num-requests must be >= 1")
    if run_id is None:
        # A new run stores the spec as swept (with these overrides), so --resume repeats the same
        # layouts and load points without the flags being given again.
        spec = _as_swept(spec, chosen, rate_list, num_requests, levels)
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
        side_by_side=None if side_by_side is None else ("on" if side_by_side else "off"),
    )
    console = make_console(stderr=True)
    # Live bars on a terminal; off one (a CI log, a pipe) a line per phase and point, a count every 10 s.
    live = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True) if stderr_is_terminal() else None
    obs: Observer = _Display(live) if live is not None else SweepLines(point_line)
    with live if live is not None else contextlib.nullcontext():
        sweep = Sweep(spec, store, obs, spec_path=shown_path, options=options, run_id=run_id)
        console.print(f"sweep: {sweep.announcement()}", highlight=False)
        try:
            result = sweep.run()
        except KeyboardInterrupt:
            err_console().print(
                f"interrupted: what was measured is stored; finish with "
                f"orch sweep --resume {sweep.run_id} --store {store.path}", markup=False
            )
            raise typer.Exit(130) from None
    note = mode_note(spec, sweep.served)
    if as_json:
        typer.echo(json_out(result, store))
    else:
        print_result(result, store, make_console(), scale_note=note, wide=wide)
    if result.selection.winner is None and (why := infrastructure_failure(result)) is not None:
        raise InfrastructureError(why)
    if not result.selection.sound:
        raise DecisionNotSound(unsound_message(result))
    if result.selection.winner is None:
        raise NoLayoutMeetsSLO(f"no layout meets the SLO in run {result.run_id}; see the reasons above")
