"""`orch plan SPEC`: the cost model's verdict per layout, as a table or JSON."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli import app, make_console, one_blas_thread
from orchestrator.cli.flags import parse_ints
from orchestrator.disagg import DisaggLayout, parse_any_layouts
from orchestrator.errors import SpecError
from orchestrator.layout import Layout
from orchestrator.pipeline.validate import load_checked_spec
from orchestrator.plan.calls import SESSION_KINDS, CallPricer
from orchestrator.plan.planner import PlanRow
from orchestrator.plan.run import DEFAULT_BATCHES, PlanResult, make_plan
from orchestrator.spec.models import SweepSpec

if TYPE_CHECKING:  # rich is imported when a table is printed: `orch plan --json` never needs it
    from rich.console import Console

GB = 1e9


def _tokens(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1_000_000 else f"{n / 1e3:.0f}k" if n >= 10_000 else str(n)


def _row_cells(row: PlanRow, candidates: set[str], n_batches: int) -> list[str]:
    name = str(row.layout) + (" *" if str(row.layout) in candidates else "")
    if not row.fits:
        weights = f"{row.weight_bytes_per_gpu / GB:.1f}" if row.weight_bytes_per_gpu else "-"
        return [name, str(row.gpus), "[red]no[/]", weights, "-", "-", "-"] + ["-"] * (n_batches + 2)
    cells = [name, str(row.gpus), "[green]yes[/]", f"{row.weight_bytes_per_gpu / GB:.1f}",
             _tokens(row.kv_tokens_per_replica), _tokens(row.kv_tokens_total), str(row.max_batch)]
    for d in row.decode:
        mark = "" if d.fits_kv else "[dim]†[/]"
        cells.append(f"{d.itl_ms:.1f} / {d.output_tokens_per_s_per_gpu:,.0f}{mark}")
    cells.append(f"{row.prefill_ms:.0f}" if row.prefill_ms is not None else "-")
    b = row.best
    cells.append(f"b{b.batch}: {b.output_tokens_per_s_per_gpu:,.0f} @ {b.itl_ms:.1f} ms" if b else "-")
    return cells


def print_plan(result: PlanResult, candidates: set[str], console: Console, *, wide: bool = False) -> None:
    from rich.markup import escape

    from orchestrator.cli.fit_table import FitTable

    inp = result.inputs
    counts = inp.counts
    console.print(
        f"[bold]{inp.cfg.name}[/] ({counts.total / 1e9:.1f}B params, {counts.active / 1e9:.1f}B active, "
        f"{inp.weight_dtype}) on {inp.cluster.nodes} x {inp.cluster.gpus_per_node} {inp.gpu.name}; "
        + result.call_text()
        + (f", ITL bound {result.itl_bound_ms:g} ms" if result.itl_bound_ms else ""), highlight=False)
    if inp.speculative is not None:
        sp = inp.speculative
        console.print(
            f"speculative decoding: {sp.label}, acceptance {', '.join(f'{x:g}' for x in sp.acceptance)} "
            f"per position: {sp.tokens_per_step:.2f} tokens per step; ITL below is the gap between those "
            f"bursts (TPOT = ITL / {sp.tokens_per_step:.2f}), tok/s counts every token; speculation's own "
            f"cost {inp.gpu.spec_step_overhead_s * 1e3:g} ms per step + "
            f"{inp.gpu.spec_sequence_overhead_s * 1e3:g} ms per sequence", highlight=False)
    table = FitTable("plan: predicted by the cost model (not measured)", wide=wide)
    # keep: 0 always shown, then 1, 2 ... as the terminal allows (fit_table.py)
    for col, keep in (("layout", 0), ("GPUs", 0), ("fits", 0), ("weights GB/GPU", 2), ("KV tok/replica", 3),
                      ("KV tok total", 4), ("max batch", 3)):
        table.column(col, justify="left" if col == "layout" else "right", keep=keep)
    for i, b in enumerate(result.batches):  # the largest batch first, then the smallest
        keep = 1 if i == len(result.batches) - 1 else (2 if i == 0 else 3)
        table.column(f"b={b}: ITL ms / tok/s/GPU", keep=keep)
    table.column("prefill ms", keep=2)
    table.column("best within SLO", keep=0)
    for row in result.rows:
        table.row(*_row_cells(row, candidates, len(result.batches)))
    table.print(console)

    # "fixed": the step overhead and every layer's kernel floor, which the step pays beside its bytes,
    # FLOPs and messages; without it the parts left a gap the table did not name (80 layers of a 70B
    # model: 3.2 ms of a 14 ms step). Per stage, step = max(weights, GEMMs) + max(KV, attention) + comm
    # + fixed (plan/cost.py); the title stays one short line (FitTable sizes the table by it).
    parts = FitTable("decode step parts at each batch (ms, one micro-batch through all stages)", wide=wide)
    for col, keep in (("layout", 0), ("batch", 0), ("weights", 1), ("KV", 1), ("compute", 1), ("TP comm", 2),
                      ("EP comm", 2), ("PP comm", 2), ("fixed", 1), ("step", 0), ("bound", 1),
                      ("experts touched", 3)):
        parts.column(col, justify="left" if col == "layout" else "right", keep=keep)
    for row in result.rows:
        if not row.fits:
            continue
        for d in row.decode:
            p = d.parts
            touched = f"{d.touched_expert_fraction:.0%}" if d.touched_expert_fraction is not None else "-"
            times = (p.weight_read_s, p.kv_read_s, p.compute_s, p.tp_comm_s, p.ep_comm_s, p.pp_comm_s,
                     p.overhead_s, p.total_s)
            parts.row(str(row.layout), str(d.batch), *(f"{t * 1e3:.2f}" for t in times), p.bound, touched)
    if parts.cols[0].cells:  # every layout rejected: no step to show, the reasons follow
        parts.print(console)

    lines: list[str] = []
    for row in result.rows:
        # Reasons can quote spec values: escaped, so "[bold]" in one prints as written.
        notes = [f"[red]rejected:[/] {escape(r)}" for r in row.rejected_because] + [
            f"[yellow]warning:[/] {escape(w)}" for w in row.warnings]
        if row.expert_imbalance is not None:
            notes.append(f"expert imbalance (busiest EP rank / mean) {row.expert_imbalance:.2f}")
        if (call := result.call_note(str(row.layout))) is not None:
            notes.append(call)
        lines.extend(f"  {row.layout}: {note}" for note in notes)
    if lines:  # one print: rich wraps each line alone, and a print costs (a 1,024-GPU plan has 150 notes)
        console.print("\n".join(lines), highlight=False)
    a = result.to_dict()["assumptions"]
    console.print(
        "[dim]assumptions (guesses, override in the spec): "
        + ", ".join(f"{k}={v:g}" for k, v in a.items())
        + f"; profile: {inp.gpu.profile or 'none (preset)'}; GPU figures: {inp.gpu.source}. "
        "* = candidate in the spec; † = batch exceeds KV capacity.[/]",
        highlight=False)


@app.command("plan")
def plan_command(
    spec_path: Annotated[str, typer.Argument(metavar="SPEC", help="Sweep spec YAML.")],
    layouts: Annotated[str | None, typer.Option(
        "--layouts", help="Only these, e.g. tp8,tp4x2,p:tp4+d:tp4 (prefill/decode pairs too); 'spec' = the "
        "spec's candidates. Default: every sensible layout.")] = None,
    disagg: Annotated[int | None, typer.Option(
        "--disagg", metavar="N", help="Every prefill/decode split of N GPUs ranked beside the aggregated "
        "layouts of N GPUs; 0 = the spec's hardware.")] = None,
    batch: Annotated[str | None, typer.Option("--batch", help="Decode batch sizes, e.g. 1,64.")] = None,
    context: Annotated[int | None, typer.Option(
        "--context", help="Context tokens per sequence while decoding.")] = None,
    prompt: Annotated[int | None, typer.Option(
        "--prompt", help="Prompt tokens for the prefill estimate.")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print JSON with every number and its parts.")] = False,
    wide: Annotated[bool, typer.Option(
        "--wide", help="Every column, however narrow the terminal (default: the columns that fit).")] = False,
) -> None:
    """Predict memory fit, KV capacity, decode and prefill times per layout, with rejections and warnings."""
    with one_blas_thread():
        _plan(spec_path, layouts, disagg, batch, context, prompt, as_json, wide)


def _plan(spec_path: str, layouts: str | None, disagg: int | None, batch: str | None, context: int | None,
          prompt: int | None, as_json: bool, wide: bool) -> None:
    spec = load_checked_spec(spec_path)
    if disagg is not None:
        _plan_splits(spec, disagg, prompt, as_json, wide)
        return
    given = (parse_any_layouts(layouts) if layouts is not None and layouts.strip() != "spec"
             else list(spec.layouts))
    pairs = [lay for lay in given if isinstance(lay, DisaggLayout)]
    # None: every sensible aggregated layout (and the spec's own)
    chosen = [lay for lay in given if isinstance(lay, Layout)] if layouts is not None else None
    if pairs:
        _plan_pairs(spec, chosen, pairs, batch, context, prompt, as_json, wide)
        return
    result = make_plan(spec, layouts=chosen, all_layouts=layouts is None,
                       batches=parse_ints(batch, "--batch") or DEFAULT_BATCHES, context_tokens=context,
                       prompt_tokens=prompt, calls=_session_calls(spec))
    if as_json:
        typer.echo(json.dumps(result.to_dict(), indent=2))
        return
    print_plan(result, {str(lay) for lay in spec.layouts}, make_console(), wide=wide)


def _session_calls(spec: SweepSpec, *, pairs: bool = False) -> CallPricer | None:
    """A session spec's calls priced on their whole history, as a sweep's plan rows are (the load
    generator's sessions: imported only for such a spec). `pairs`: a pair's prefill pool, which its
    router balances by load (pipeline/points.py `call_tokens`)."""
    if spec.workload.kind not in SESSION_KINDS:
        return None
    from orchestrator.loadgen.spec_workload import spec_call_pricer

    return spec_call_pricer(spec, pairs=pairs)


def _plan_pairs(spec: SweepSpec, chosen: list[Layout] | None, pairs: list[DisaggLayout], batch: str | None,
                context: int | None, prompt: int | None, as_json: bool, wide: bool) -> None:
    """Prefill/decode pairs, and the aggregated layouts given beside them."""
    from orchestrator.cli.plan_disagg import print_pairs
    from orchestrator.plan.disagg_run import make_disagg_plan

    result = make_disagg_plan(spec, pairs, prompt_tokens=prompt, calls=_session_calls(spec, pairs=True))
    agg = None
    if chosen is None or chosen:  # None: every sensible layout, as without pairs
        agg = make_plan(spec, layouts=chosen, all_layouts=chosen is None,
                        batches=parse_ints(batch, "--batch") or DEFAULT_BATCHES,
                        context_tokens=context, prompt_tokens=prompt, calls=_session_calls(spec))
    if as_json:
        data = {**(agg.to_dict() if agg else {}), "disaggregated": result.to_dict()}
        typer.echo(json.dumps(data, indent=2))
        return
    console = make_console()
    if agg is not None:
        print_plan(agg, {str(lay) for lay in spec.layouts}, console, wide=wide)
    print_pairs(result, console, wide=wide)


def _plan_splits(spec: SweepSpec, gpus: int, prompt: int | None, as_json: bool, wide: bool) -> None:
    from orchestrator.cli.plan_disagg import print_splits
    from orchestrator.plan.disagg_run import make_split_plan

    if gpus < 0:
        raise SpecError(f"--disagg {gpus}: give a number of GPUs (0 = the spec's hardware)")
    plan = make_split_plan(spec, gpus or None, prompt_tokens=prompt, calls=_session_calls(spec),
                           pair_calls=_session_calls(spec, pairs=True))
    if as_json:
        typer.echo(json.dumps(plan.to_dict(), indent=2))
        return
    print_splits(plan, make_console(), wide=wide)
