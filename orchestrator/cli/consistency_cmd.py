"""`orch consistency SPEC --layouts tp1,tp2`: do two layouts give the same greedy outputs?"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.progress import Progress, TextColumn, TimeElapsedColumn

from orchestrator.cli import app, make_console
from orchestrator.consistency.run import (
    ConsistencyOptions,
    new_run_id,
    run_base_urls,
    run_layouts,
    store_result,
)
from orchestrator.deploy.targets import check_runs_here
from orchestrator.errors import ConsistencyExceeded, SpecError
from orchestrator.layout import parse_layouts
from orchestrator.loadgen.metrics import finite
from orchestrator.promote import resolve_run
from orchestrator.spec.load import load_spec
from orchestrator.store.db import DEFAULT_STORE, Store


class _Phases:
    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task = progress.add_task("consistency", total=None)

    def phase(self, label: str, phase: str) -> None:
        self.progress.update(self.task, description=f"{label}: {phase}")


def _f(v: Any, nd: int = 4) -> str:
    if v is None:
        return "-"
    return f"{v:.{nd}g}" if isinstance(v, float) else str(v)


def consistency_lines(r: dict[str, Any], passed: bool | None = None, bound: float | None = None) -> list[str]:
    """The human summary of one stored or fresh comparison (also used by `orch report`)."""
    fd, kl, tv, mg = r["first_divergence"], r["kl_per_token"], r["tv_per_token"], r["margin_at_divergence"]
    hist = ", ".join(f"{h['from']}-{h['to']}: {h['count']}" for h in r["divergence_histogram"] if h["count"])
    lines = [
        f"consistency {r['layout_a']} vs {r['layout_b']} ({r['model']}): {r['n_prompts']} prompts, "
        f"max {r['max_tokens']} tokens, greedy",
        f"  exact match: {r['exact_match_rate']:.1%} ({round(r['exact_match_rate'] * r['n_prompts'])}"
        f"/{r['n_prompts']})",
        f"  first divergence at token: p50 {_f(fd['p50'])} over {fd['n']} diverged outputs; by position: "
        + (hist or "none"),
        f"  argmax agreement before divergence: {_f(r['argmax_agreement_before_divergence'])}; "
        f"teacher-forced over A's whole output: {_f(r['argmax_agreement_teacher_forced'])}",
        f"  KL(A||B) per token, nats: mean {_f(kl['mean'])}, p99 {_f(kl['p99'])}, max {_f(kl['max'])} "
        f"({kl['n']} tokens)",
        f"  TV per token: mean {_f(tv['mean'])}, p99 {_f(tv['p99'])}, max {_f(tv['max'])}",
        f"  top-1 vs top-2 logprob margin where outputs diverged: p50 {_f(mg['p50'])}, max {_f(mg['max'])}",
        f"  method: {r['method']}",
    ]
    if bound is not None:
        verdict = "pass" if passed else "FAIL"
        lines.append(f"  --max-divergence {bound:g}: divergence rate {r['divergence_rate']:.1%}: {verdict}")
    return lines


@app.command("consistency")
def consistency_command(
    spec_path: Annotated[str | None, typer.Argument(metavar="SPEC", help="Sweep spec YAML.")] = None,
    layouts: Annotated[
        str | None, typer.Option("--layouts", help="Two layouts, e.g. tp1,tp2 (the same twice is allowed).")
    ] = None,
    base_urls: Annotated[
        str | None, typer.Option("--base-urls", help="Two running servers instead: URL_A,URL_B (.../v1).")
    ] = None,
    prompts: Annotated[
        str, typer.Option("--prompts", help="'builtin' or a file, one prompt a line.")
    ] = "builtin",
    n: Annotated[int, typer.Option("-n", help="Number of prompts.", min=1)] = 60,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Greedy tokens per prompt.", min=1)] = 96,
    top_k: Annotated[
        int, typer.Option("--top-k", help="Logprobs per position (vLLM allows 20).", min=1)
    ] = 10,
    max_divergence: Annotated[
        float | None,
        typer.Option("--max-divergence", help="Fail (exit 5) if more than this fraction of outputs differ."),
    ] = None,
    store_path: Annotated[str, typer.Option("--store", help="Results store (SQLite).")] = DEFAULT_STORE,
    run: Annotated[
        str | None,
        typer.Option("--run", help="Attach to this stored run (e.g. a sweep; id, prefix or latest)."),
    ] = None,
    workdir: Annotated[str | None, typer.Option("--workdir", help="Logs directory.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Send the same prompts greedily to two layouts; report exact match, divergence, KL and TV."""
    if (spec_path is None) == (base_urls is None):
        raise SpecError("give a SPEC with --layouts A,B, or --base-urls URL_A,URL_B (not both)")
    if max_divergence is not None and not 0 <= max_divergence <= 1:
        raise SpecError(f"--max-divergence {max_divergence:g}: a fraction of prompts, 0 to 1")
    store = Store(store_path)
    run_id = resolve_run(store, run) if run else new_run_id()
    opts = ConsistencyOptions(n=n, max_tokens=max_tokens, top_k=top_k, prompts=prompts, workdir=workdir)
    console = make_console(stderr=True)
    spec = None
    with Progress(TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  transient=True) as progress:  # fmt: skip
        obs = _Phases(progress)
        if spec_path is not None:
            if not layouts:
                raise SpecError("--layouts: give the two layouts to compare, e.g. --layouts tp1,tp2")
            spec = load_spec(spec_path)
            check_runs_here(spec, spec_path)
            result = run_layouts(spec, parse_layouts(layouts), opts, obs, run_id)
        else:
            assert base_urls is not None
            result = run_base_urls([u for u in base_urls.split(",") if u], opts, obs)
    passed = store_result(store, result, spec=spec, spec_path=spec_path, run_id=run_id,
                          attach=run is not None, max_divergence=max_divergence)  # fmt: skip
    if as_json:
        out = {"run_id": run_id, "store": str(store.path), "passed": passed, "max_divergence": max_divergence,
               **result.to_dict()}  # fmt: skip
        typer.echo(json.dumps(finite(out), indent=2))
    else:
        for line in consistency_lines(finite(result.to_dict()), passed, max_divergence):
            typer.echo(line)
        typer.echo(f"stored in {store.path} as run {run_id}")
    if passed is False:
        raise ConsistencyExceeded(
            f"{result.divergence_rate:.1%} of outputs differ between {result.layout_a} and "
            f"{result.layout_b}, above --max-divergence {max_divergence:g}"
        )
