"""`orch gc`: remove what interrupted runs left on a Kubernetes cluster (run ConfigMaps own the rest)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from orchestrator.cli import app
from orchestrator.errors import SpecError
from orchestrator.extras import require
from orchestrator.spec.load import load_spec
from orchestrator.spec.targets import KubernetesTarget


@app.command("gc")
def gc_command(
    spec_path: Annotated[
        str | None,
        typer.Argument(metavar="SPEC", help="A spec with a kubernetes target (namespace, context, image)."),
    ] = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", help="Namespace; default the spec's.")
    ] = None,
    context: Annotated[str | None, typer.Option("--context", help="kubeconfig context.")] = None,
    run: Annotated[
        str | None, typer.Option("--run", help="Only this run's objects; default every run's.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Delete the objects orch runs left in a namespace (labelled orch.dev/run)."""
    require("k8s", "orch gc")
    from orchestrator.deploy.k8s_gc import collect_garbage

    if spec_path is not None:
        target = load_spec(spec_path).target
        if not isinstance(target, KubernetesTarget):
            raise SpecError(f"{spec_path}: target.kind is {target.kind!r}; orch gc cleans kubernetes targets")
        updates = {k: v for k, v in (("namespace", namespace), ("context", context)) if v is not None}
        target = target.model_copy(update=updates)
    else:
        target = KubernetesTarget(
            kind="kubernetes", image="-", namespace=namespace or "default", context=context
        )
    removed = collect_garbage(target, run)
    if as_json:
        typer.echo(json.dumps({"namespace": target.namespace, "removed": removed}))
        return
    for name in removed:
        typer.echo(f"deleted {name}")
    typer.echo(f"{len(removed)} object(s) removed from namespace {target.namespace}")
