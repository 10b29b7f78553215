"""`orch compile`: one layout of a spec as the exact per-node commands (shell) or as JSON."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from orchestrator.cli import app, err_console
from orchestrator.compile import compile_layout, to_json, to_shell
from orchestrator.errors import SpecError
from orchestrator.layout import parse_layout
from orchestrator.plan.run import make_plan
from orchestrator.spec import load_spec


class EngineName(StrEnum):
    vllm = "vllm"
    sglang = "sglang"
    sim = "sim"


class Format(StrEnum):
    shell = "shell"
    json = "json"


class Executor(StrEnum):
    mp = "mp"
    ray = "ray"


@app.command("compile")
def compile_cmd(
    spec_path: Annotated[Path, typer.Argument(help="Sweep spec YAML, e.g. layouts/qwen72b.yaml")],
    layout: Annotated[str, typer.Option("--layout", "-l", help="Layout to compile, e.g. tp4x2")],
    engine: Annotated[
        EngineName | None, typer.Option(help="Engine; default: the spec's engine.name")
    ] = None,
    fmt: Annotated[
        Format, typer.Option("--format", help="shell: per-node commands; json: the plan")
    ] = Format.shell,
    nodes: Annotated[
        str | None, typer.Option(help="Comma-separated node addresses, node 0 first (default: node0, ...)")
    ] = None,
    redundant_experts: Annotated[
        int | None, typer.Option(help="EPLB: redundant expert slots, a multiple of the EP size")
    ] = None,
    executor: Annotated[Executor | None, typer.Option(help="vLLM multi-node executor")] = None,
    a2a_backend: Annotated[str | None, typer.Option(help="MoE all-to-all backend (vLLM names)")] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Emit the commands even for a layout the planner rejects.")
    ] = False,
) -> None:
    """Print what to run on each node for one layout: shell commands or the launch plan as JSON."""
    spec = load_spec(spec_path)
    chosen = parse_layout(layout)
    (row,) = make_plan(spec, layouts=[chosen], batches=(1,)).rows
    if row.rejected_because:
        why = "; ".join(row.rejected_because)
        if not force:
            raise SpecError(f"{spec_path}: layout {chosen}: the planner rejects it: {why} "
                            "(orch plan shows every layout; --force emits the commands anyway)")
        err_console.print(f"[yellow]warning:[/] layout {chosen} is rejected by the planner, emitted because "
                          f"of --force: {escape(why)}", highlight=False, soft_wrap=True)
    addrs = tuple(a.strip() for a in nodes.split(",") if a.strip()) if nodes else None
    compiled = compile_layout(
        spec, chosen, engine.value if engine else None, addrs,
        num_redundant_experts=redundant_experts, executor=executor.value if executor else None,
        a2a_backend=a2a_backend,
    )
    for note in compiled.warnings:
        err_console.print(f"[yellow]warning:[/] {note}", highlight=False, soft_wrap=True)
    if fmt is Format.json:
        typer.echo(json.dumps(to_json(compiled.plan, compiled.placement.nodes, compiled.warnings), indent=2))
    else:
        typer.echo(to_shell(compiled.plan, compiled.placement.nodes), nl=False)
