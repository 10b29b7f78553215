"""`orch compile`: one layout of a spec as per-node commands (shell), JSON, Helm values, Kubernetes
manifests or a Ray Serve config."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.candidate import DisaggCandidate
from orchestrator.cli import app, err_line
from orchestrator.compile import prepare, to_json, to_shell
from orchestrator.compile.artifacts import artifact_options, render
from orchestrator.disagg import DisaggLayout, parse_any_layout
from orchestrator.errors import SpecError
from orchestrator.pipeline.validate import load_checked_spec
from orchestrator.plan.candidates import candidate_of, check_pairs
from orchestrator.plan.disagg import DisaggRow, plan_pair
from orchestrator.plan.from_spec import engine_settings, mean_tokens, plan_inputs
from orchestrator.plan.planner import PlanRow
from orchestrator.plan.run import itl_bound_ms, make_plan
from orchestrator.promote import k8s_name
from orchestrator.spec.load import revalidated, spec_hash


class EngineName(StrEnum):
    vllm = "vllm"
    sglang = "sglang"
    sim = "sim"


class Format(StrEnum):
    shell = "shell"
    json = "json"
    helm_values = "helm-values"
    k8s = "k8s"
    ray_serve = "ray-serve"


class Executor(StrEnum):
    mp = "mp"
    ray = "ray"


@app.command("compile")
def compile_cmd(
    spec_path: Annotated[Path, typer.Argument(
        metavar="SPEC", help="Sweep spec YAML, e.g. layouts/qwen72b.yaml")],
    layout: Annotated[str, typer.Option(
        "--layout", "-l", help="Layout to compile, e.g. tp4x2, or a prefill/decode pair, e.g. p:tp4+d:tp4")],
    engine: Annotated[
        EngineName | None, typer.Option(help="Engine; default: the spec's engine.name")
    ] = None,
    fmt: Annotated[
        Format,
        typer.Option(
            "--format",
            help="shell: per-node commands; json: the plan; helm-values: values for helm/; k8s: manifests "
            "(multi-document YAML); ray-serve: a `serve run` config (vLLM)",
        ),
    ] = Format.shell,
    nodes: Annotated[
        str | None, typer.Option(help="Comma-separated node addresses, node 0 first (default: node0, ...)")
    ] = None,
    redundant_experts: Annotated[
        int | None, typer.Option(help="EPLB: redundant expert slots, a multiple of the EP size")
    ] = None,
    executor: Annotated[Executor | None, typer.Option(help="vLLM multi-node executor")] = None,
    a2a_backend: Annotated[str | None, typer.Option(help="MoE all-to-all backend (vLLM names)")] = None,
    name: Annotated[
        str | None, typer.Option(help="helm-values/k8s: object name; default MODEL-LAYOUT.")
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(help="helm-values/k8s: engine image (pinned tag); default target.image or the engine's"),
    ] = None,
    namespace: Annotated[
        str | None, typer.Option(help="helm-values/k8s: namespace; default target.namespace or default.")
    ] = None,
    router_image: Annotated[
        str | None, typer.Option(help="helm-values/k8s of a prefill/decode pair: the router's image (pinned; "
                                 "vLLM: one with orch installed; SGLang: default the engine image)")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Emit the commands even for a layout the planner rejects.")
    ] = False,
) -> None:
    """Print one layout as shell commands, the launch plan as JSON, Helm values, manifests or a Ray config."""
    spec = load_checked_spec(spec_path)
    chosen = parse_any_layout(layout)
    if engine is not None and engine.value != spec.engine.name and isinstance(chosen, DisaggLayout):
        spec = revalidated(spec.model_copy(update={"engine": spec.engine.model_copy(
            update={"name": engine.value})}), "--engine")  # the pair's transfer backend is that engine's
    check_pairs(spec, [chosen])
    # One settings value for the plan and the command: the engine runs what the planner judged.
    settings = engine_settings(spec, engine=engine.value if engine else None)
    candidate = candidate_of(spec, chosen, settings)
    if isinstance(candidate, DisaggCandidate):
        w = spec.workload
        row: PlanRow | DisaggRow = plan_pair(
            plan_inputs(spec, settings), candidate, prompt_tokens=mean_tokens(w.input_tokens),
            output_tokens=mean_tokens(w.output_tokens), itl_bound_ms=itl_bound_ms(spec))
    else:
        (row,) = make_plan(spec, layouts=[candidate.layout], batches=(1,), settings=settings).rows
    if row.rejected_because:
        why = "; ".join(row.rejected_because)
        if not force:
            raise SpecError(f"{spec_path}: layout {chosen}: the planner rejects it: {why} "
                            "(orch plan shows every layout; --force emits the commands anyway)")
        err_line("warning:", "yellow", f"layout {chosen} is rejected by the planner, emitted because "
                 f"of --force: {why}")
    addrs = tuple(a.strip() for a in nodes.split(",")) if nodes is not None else None
    if addrs is not None and not all(addrs):  # '' or 'a,,b' is a typo, never "use the defaults"
        raise SpecError(f"--nodes {nodes!r}: an empty node address; give comma-separated addresses, node 0 "
                        "first, e.g. --nodes gpu1,gpu2 (or leave --nodes out for node0, node1, ...)")
    compiled = prepare(
        spec, candidate, engine=settings.engine, node_addrs=addrs,
        num_redundant_experts=redundant_experts, executor=executor.value if executor else None,
        a2a_backend=a2a_backend,
    )
    for note in compiled.warnings:
        err_line("warning:", "yellow", note)
    if fmt is Format.json:
        typer.echo(json.dumps(to_json(compiled.plan, compiled.placement.nodes, compiled.warnings), indent=2))
    elif fmt is Format.shell:
        typer.echo(to_shell(compiled.plan, compiled.placement.nodes), nl=False)
    else:
        opts = None
        if fmt in (Format.helm_values, Format.k8s):
            model = spec.model.name or spec.model.path or "model"
            obj_name = name or k8s_name(model, str(chosen), pair=isinstance(chosen, DisaggLayout))
            opts, notes = artifact_options(
                spec, compiled.plan.engine, obj_name,
                image=image, namespace=namespace, spec_hash=spec_hash(spec), router_image=router_image,
            )  # fmt: skip
            for note in notes:
                err_line("note:", "yellow", note)
        text = render(fmt.value, compiled, spec, opts)
        if text is None:
            raise SpecError(f"--format ray-serve: Ray Serve LLM runs vLLM, not {compiled.plan.engine}")
        typer.echo(text, nl=False)
