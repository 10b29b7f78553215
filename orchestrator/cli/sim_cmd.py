"""`orch simulate` (virtual time) and `orch sim serve` (the simulated OpenAI server)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from orchestrator.cli import app, make_console
from orchestrator.cli.bench_tables import print_points
from orchestrator.cli.flags import parse_ints, parse_rates
from orchestrator.disagg import AnyLayout, DisaggLayout, parse_any_layouts
from orchestrator.errors import NoRequestCompleted, SpecError
from orchestrator.loadgen.metrics import finite
from orchestrator.pipeline.validate import load_checked_spec
from orchestrator.plan.candidates import check_pairs, disagg_candidate
from orchestrator.plan.from_spec import constants_line, constants_used, plan_inputs
from orchestrator.sim.pd_run import DisaggSimPoint, simulate_pair_point
from orchestrator.sim.run import SimPoint, prefix_cache_of, simulate_point
from orchestrator.spec.checks import MAX_COUNT
from orchestrator.spec.load import with_workload

sim_app = typer.Typer(help="The simulated engine.", no_args_is_help=True)
app.add_typer(sim_app, name="sim")


@app.command("simulate")
def simulate_command(
    spec_path: Annotated[str, typer.Argument(metavar="SPEC", help="Sweep spec YAML.")],
    layouts: Annotated[str | None, typer.Option(
        "--layouts", help="e.g. tp8,p:tp4+d:tp4 (prefill/decode pairs too). Default: the spec's "
        "layouts.")] = None,
    rates: Annotated[str | None, typer.Option("--rates", help="Requests/s; default: the spec's.")] = None,
    concurrency: Annotated[str | None, typer.Option(
        "--concurrency", help="Closed loop: N[,M...] requests in flight, the next sent as one ends "
        "(instead of --rates).")] = None,
    num_requests: Annotated[int | None, typer.Option(
        "--num-requests", help="Requests per load point (instead of the spec's duration).")] = None,
    routing: Annotated[str | None, typer.Option(
        "--routing", help="Routing over replicas: round_robin, least_outstanding, prefix_aware, or several "
        "to compare (comma-separated); default: the spec's.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Every column, however narrow the terminal.")] = False,
) -> None:
    """Run the spec's workload through simulated replicas in virtual time (a prediction, not measured)."""
    spec = load_checked_spec(spec_path)
    policies = _policies(routing) if routing is not None else spec.routing_policies()
    chosen: list[AnyLayout] = parse_any_layouts(layouts) if layouts else list(spec.layouts)
    if concurrency is not None and rates is not None:
        raise SpecError("give --rates (open loop) or --concurrency (closed loop), not both")
    levels = parse_ints(concurrency, "--concurrency")
    if levels is None and rates is None and spec.workload.loop == "closed" and spec.workload.concurrency:
        levels = tuple(spec.workload.concurrency)  # a closed-loop spec's own grid, as sweep measures it
    if levels is not None and min(levels) < 1:
        raise SpecError("--concurrency: give requests in flight >= 1, e.g. --concurrency 8,32")
    rate_list = parse_rates(rates) or list(spec.workload.rates_per_s or ())
    if spec.workload.kind == "trace" and levels is None:
        if rates is not None:
            raise SpecError("a trace sets its own arrival times; drop --rates "
                            "(workload.time_scale speeds it up)")
        rate_list = [0.0]  # one point at the trace's timestamps
    if levels is None and not rate_list:
        raise SpecError(
            f"{spec_path}: workload.{'concurrency' if spec.workload.loop == 'closed' else 'rates_per_s'} "
            "is not set (orch sweep searches capacity); "
            "give --rates R[,R...] or --concurrency N[,M...]"
        )
    loads: list[tuple[float | None, int | None]] = (
        [(None, c) for c in levels] if levels is not None else [(r, None) for r in rate_list])
    if num_requests is not None:
        parse_ints(str(num_requests), "--num-requests")
        if num_requests < 1:
            raise SpecError("--num-requests must be >= 1")
    if levels is None and spec.workload.kind != "trace":  # open loop: the spec's bounds hold for the flags
        with_workload(spec, rates=[r for r, _ in loads if r is not None], num_requests=num_requests)
    elif num_requests is not None and num_requests > MAX_COUNT:
        raise SpecError(f"--num-requests {num_requests}: at most {MAX_COUNT:,}")
    check_pairs(spec, chosen)  # a pair no deployment could run: one line, exit 2
    inputs = plan_inputs(spec)
    console = make_console(stderr=as_json)
    results: list[SimPoint | DisaggSimPoint] = []
    rejected: list[tuple[AnyLayout, str]] = []
    routed: dict[int, str] = {}  # id(point) -> the routing it ran under
    for layout in chosen:
        # a pair routes through its own router (the spec's disagg.router); routing policies compare
        # how an aggregated layout spreads requests over its replicas
        try:
            pair = (disagg_candidate(spec, layout, inputs.settings)
                    if isinstance(layout, DisaggLayout) else None)
        except SpecError as exc:
            rejected.append((layout, str(exc)))
            continue
        for policy in ([pair.router_policy] if pair is not None else policies):
            name = f"{layout} routing={policy}" if pair is None and len(policies) > 1 else str(layout)
            spec_p = spec.model_copy(update={"routing": policy}) if pair is None else spec
            points: list[SimPoint | DisaggSimPoint] = []
            try:
                for rate, conc in loads:
                    what = f"concurrency {conc}" if conc is not None else f"{rate:g} req/s"
                    if spec.workload.kind == "trace" and conc is None:
                        what = "the trace's timestamps"
                    with console.status(f"simulating {name} at {what}"):
                        sp: SimPoint | DisaggSimPoint
                        if pair is not None:
                            sp = simulate_pair_point(spec, inputs, pair, rate, num_requests=num_requests,
                                                     concurrency=conc)
                        else:
                            assert not isinstance(layout, DisaggLayout)
                            sp = simulate_point(spec_p, inputs, layout, rate, num_requests=num_requests,
                                                concurrency=conc, keep_records=False)  # metrics only
                    points.append(sp)
                    routed[id(sp)] = policy
            except SpecError as exc:  # this layout cannot be simulated (it does not fit): say why, go on
                rejected.append((layout, str(exc)))
                if not as_json:
                    console.print(f"[bold]{layout}[/] ({layout.gpus} GPUs): [red]rejected:[/] "
                                  f"{escape(str(exc))}", highlight=False)
                break
            results += points
            if not as_json:
                _print_layout(console, name, layout, points, wide)
    if not as_json:  # which profile and constants every number above came from
        console.print(f"[dim]constants: {escape(constants_line(inputs.gpu))}[/]", highlight=False)
    if as_json:
        typer.echo(json.dumps(finite({"prediction": "simulated (virtual time)",
                                      "constants": constants_used(inputs.gpu), "points": [
            {"layout": str(p.layout), "gpus": p.layout.gpus, "routing": routed[id(p)], **p.result.to_dict(),
             "steps": p.summary.steps, "preemptions": p.summary.preemptions, "rejected": p.summary.rejected,
             **(prefix_cache_of(p) if isinstance(p, SimPoint) else {})}
            for p in results], "rejected_layouts": [
            {"layout": str(lay), "gpus": lay.gpus, "reason": why} for lay, why in rejected]}), indent=2))
    if not any(p.result.metrics.n_completed for p in results):
        where = f"{len(results)} load point(s)"
        where += f", {len(rejected)} layout(s) rejected" if rejected else ""
        raise NoRequestCompleted(
            f"{spec_path}: no simulated request completed in the measurement window ({where}); "
            "check workload.warmup_s against the run's length, or the rejections above")


def _print_layout(console: Console, name: str, layout: AnyLayout,
                  points: list[SimPoint | DisaggSimPoint], wide: bool) -> None:
    print_points(console, [p.result for p in points],
                 f"orch simulate {name} ({layout.gpus} GPUs): predicted in virtual time, not measured",
                 wide=wide)
    for p in points:
        s = p.summary
        console.print(f"  {p.result.point.label}: {s.steps} engine steps, "
                      f"{s.preemptions} preemptions, {s.rejected} rejected, "
                      f"{s.virtual_s:.1f} virtual s", highlight=False)
        if isinstance(p, DisaggSimPoint):
            t = p.summary
            on_link, waiting = (1e3 * x / max(t.transfers, 1) for x in (t.transfer_s_sum, t.kv_wait_s_sum))
            console.print(f"    {t.transfers} KV transfers, {on_link:.2f} ms each on the link, "
                          f"{waiting:.2f} ms each waiting for decode KV or the link", highlight=False)
        elif p.note:
            console.print(f"  {p.result.point.label}: {p.note}", highlight=False)


def _policies(text: str) -> list[str]:
    from orchestrator.loadgen.balance import BALANCE_KINDS

    out = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in out if x not in BALANCE_KINDS]
    if not out or bad or len(set(out)) != len(out):
        raise SpecError(f"--routing {text!r}: give one or more of {', '.join(BALANCE_KINDS)}, each once")
    return out


# Every argument, --help included, goes to the server's own parser: `orch sim serve --help` lists its flags.
@sim_app.command("serve", context_settings={
    "allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []})
def serve_command(ctx: typer.Context) -> None:
    """Serve the simulated engine over the OpenAI API (orch sim serve --help lists the flags)."""
    from orchestrator.sim.server import main as serve_main

    serve_main(list(ctx.args))
