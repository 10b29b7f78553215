"""`orch plan` tables for prefill/decode pairs (`--layouts p:tp4+d:tp4`) and for `--disagg N`."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from orchestrator.cli.fit_table import FitTable
from orchestrator.plan.disagg import DisaggRow
from orchestrator.plan.disagg_run import DisaggPlanResult
from orchestrator.plan.disagg_search import SplitPlan, output_tokens_per_s_per_gpu
from orchestrator.plan.planner import PlanRow

SHOWN = 20  # rows of `--disagg N` printed (all of them with --json)


def _rps(x: float) -> str:
    return f"{x:,.2f}" if x < 100 else f"{x:,.0f}"


def _pair_cells(row: DisaggRow) -> list[str]:
    if not row.fits:
        return [str(row.layout), str(row.gpus), "[red]no[/]"] + ["-"] * 8
    return [
        str(row.layout), str(row.gpus), "[green]yes[/]",
        _rps(row.prefill_rps) + (" (KV)" if row.prefill_kv_limited else ""), _rps(row.decode_rps),
        f"{row.transfer_ms:.2f} {row.link}", _rps(row.capacity_rps), row.binds,
        f"{row.ttft_ms:.0f} / {row.ttft_loaded_ms:.0f}", f"{row.itl_ms:.1f}",
        f"{row.output_tokens_per_s_per_gpu:,.0f}",
    ]


def print_pairs(result: DisaggPlanResult, console: Console, *, wide: bool = False) -> None:
    table = FitTable("plan, prefill/decode pairs: predicted by the cost model (not measured); "
                     + result.call_text()
                     + (f", ITL bound {result.itl_bound_ms:g} ms" if result.itl_bound_ms else ""), wide=wide)
    # keep: 0 always shown, then 1, 2 ... as the terminal allows (fit_table.py)
    for col, keep in (("layout", 0), ("GPUs", 0), ("fits", 0), ("prefill req/s", 2), ("decode req/s", 2),
                      ("KV transfer ms", 3), ("req/s", 0), ("binds", 1), ("TTFT ms idle / 80%", 1),
                      ("ITL ms", 1), ("tok/s/GPU", 0)):
        table.column(col, justify="left" if col == "layout" else "right", keep=keep)
    for row in result.rows:
        table.row(*_pair_cells(row))
    table.print(console)
    for row in result.rows:
        notes = [f"[red]rejected:[/] {escape(r)}" for r in row.rejected_because]
        notes += [f"[yellow]warning:[/] {escape(w)}" for w in row.warnings]
        if row.fits and row.decode_per_prefill_replica:
            ratio = row.decode_per_prefill_replica
            notes.append(f"P:D replicas {ratio:.2f}:1 balance the pools (one decode replica takes what "
                         f"{ratio:.2f} prefill replicas produce)")
        if (call := result.sessions.note(str(row.layout)) if result.sessions else None) is not None:
            notes.append(call)
        if row.fits and row.balanced is not None:
            notes.append(f"split the same {row.gpus} GPUs as {row.balanced}: "
                         f"{_rps(row.balanced_rps)} req/s instead of {_rps(row.capacity_rps)}")
        for note in notes:
            console.print(f"  {row.layout}: {note}", highlight=False)
    console.print("[dim]req/s: each pool's capacity within the ITL bound; the system's is the smallest "
                  "(binds). TTFT = request overhead + prefill queue + prefill + KV transfer + first decode "
                  "step; idle: no queue, 80%: M/D/1 queue at 80% of capacity. (KV): the prefill KV held "
                  "until each transfer limits the pool.[/]", highlight=False)


def _split_cells(rank: int, row: PlanRow | DisaggRow, output_tokens: int) -> list[str]:
    value = output_tokens_per_s_per_gpu(row)
    kind = "disagg" if isinstance(row, DisaggRow) else "agg"
    if isinstance(row, DisaggRow):
        extra = [f"{row.itl_ms:.1f}", f"{row.ttft_ms:.0f}", _rps(row.capacity_rps), row.binds,
                 f"{row.transfer_ms:.2f}"]
    else:
        best = row.best
        rps = value * row.gpus / max(output_tokens, 1)  # the pool's requests/s at its best batch
        extra = [f"{best.itl_ms:.1f}" if best else "-", f"{row.prefill_ms:.0f}" if row.prefill_ms else "-",
                 _rps(rps), "-", "-"]
    return [str(rank), str(row.layout), kind, str(row.gpus), f"{value:,.0f}", *extra]


def print_splits(plan: SplitPlan, console: Console, *, wide: bool = False) -> None:
    fitting = [r for r in plan.rows if r.fits and output_tokens_per_s_per_gpu(r) > 0]
    table = FitTable(f"plan --disagg {plan.gpus}: {plan.splits} prefill/decode splits and the aggregated "
                     f"layouts of {plan.gpus} GPUs ({plan.cluster.nodes} x {plan.cluster.gpus_per_node}), "
                     f"ranked by predicted output tok/s per GPU"
                     + (f" within ITL {plan.itl_bound_ms:g} ms" if plan.itl_bound_ms else "")
                     + "; " + (plan.sessions.text(plan.sessions.call.planned().context_tokens,
                                                    per_layout="each row's in --json")
                               if plan.sessions is not None
                               else f"prompt {plan.prompt_tokens}, output {plan.output_tokens} tokens"),
                     wide=wide)
    for col, keep in (("#", 0), ("layout", 0), ("kind", 0), ("GPUs", 0), ("tok/s/GPU", 0), ("ITL ms", 1),
                      ("TTFT ms", 1), ("req/s", 2), ("binds", 2), ("KV transfer ms", 3)):
        table.column(col, justify="left" if col in ("layout", "kind") else "right", keep=keep)
    for i, row in enumerate(fitting[:SHOWN], 1):
        table.row(*_split_cells(i, row, plan.output_tokens))
    table.print(console)
    best_agg = next((r for r in fitting if isinstance(r, PlanRow)), None)
    best_pd = next((r for r in fitting if isinstance(r, DisaggRow)), None)
    if best_pd is not None and best_agg is not None:
        ratio = output_tokens_per_s_per_gpu(best_pd) / max(output_tokens_per_s_per_gpu(best_agg), 1e-9)
        console.print(f"best disaggregated {best_pd.layout} vs best aggregated {best_agg.layout}: "
                      f"{ratio:.2f}x the output tokens/s per GPU; {best_pd.layout} binds on {best_pd.binds}",
                      highlight=False)
    console.print(f"[dim]{len(fitting)} fit with an estimate ({len(fitting) - min(len(fitting), SHOWN)} not "
                  f"shown), {len(plan.rows) - len(fitting)} rejected or over the ITL bound; --json lists "
                  "every row with its reasons.[/]", highlight=False)
