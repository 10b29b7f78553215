"""`orch promote RUN`: write a stored run's winner as deployable artifacts with provenance."""

from __future__ import annotations

import json
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
import yaml

from orchestrator.cli import RUN_HELP, app, err_line
from orchestrator.compile.artifacts import FORMATS
from orchestrator.promote import PromoteOptions, pin_block, promote, resolve_run
from orchestrator.store.db import DEFAULT_STORE, Store


class ArtifactEngine(StrEnum):
    vllm = "vllm"
    sglang = "sglang"


def _formats(values: list[str] | None) -> tuple[str, ...]:
    names = [n.strip() for v in values or ["all"] for n in v.split(",") if n.strip()]
    return FORMATS if "all" in names else tuple(dict.fromkeys(names))


@app.command("promote")
def promote_command(
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help=RUN_HELP)],
    store_path: Annotated[str, typer.Option("--store", help="Results store (SQLite).")] = DEFAULT_STORE,
    out: Annotated[
        Path | None, typer.Option("--out", "--to", help="Directory to write; default promoted/RUN_ID.")
    ] = None,
    fmt: Annotated[
        list[str] | None,
        typer.Option("--format", help="helm-values, k8s, shell, ray-serve or all (repeat, or a,b)."),
    ] = None,
    engine: Annotated[
        ArtifactEngine | None,
        typer.Option(help="Engine of the artifacts; default the run's engine, vllm for a simulated run."),
    ] = None,
    layout: Annotated[
        str | None, typer.Option("--layout", "-l", help="Promote this passing layout instead of the winner.")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Kubernetes object name; default MODEL-LAYOUT.")] = None,
    image: Annotated[str | None, typer.Option(help="Engine container image (pin a tag).")] = None,
    namespace: Annotated[str | None, typer.Option(help="Kubernetes namespace of the objects.")] = None,
    router_image: Annotated[str | None, typer.Option(
        "--router-image", help="A vLLM prefill/decode pair's router: an image with orch installed (pin a "
        "tag); default target.router_image.")] = None,
    pin: Annotated[
        bool, typer.Option("--pin", help="Print only the layout block an eval config carries; write nothing.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the provenance as JSON.")] = False,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace the artifacts in an existing, non-empty --out.")
    ] = False,
) -> None:
    """Write the winner of a stored run as Helm values, manifests, launch commands and PROVENANCE files."""
    store = Store(store_path, readonly=True)
    opts = PromoteOptions(
        formats=_formats(fmt), engine=engine.value if engine else None, layout=layout, name=name,
        image=image, namespace=namespace, overwrite=overwrite, router_image=router_image,
    )  # fmt: skip
    if pin:
        with tempfile.TemporaryDirectory(prefix="orch-pin-") as tmp:
            done = promote(store, run_ref, tmp, opts)
        typer.echo(yaml.safe_dump(pin_block(done.provenance), sort_keys=False), nl=False)
        return
    target = out if out is not None else Path("promoted") / resolve_run(store, run_ref)
    done = promote(store, run_ref, target, opts)
    for note in done.notes:
        err_line("note:", "yellow", note)
    if as_json:
        typer.echo(json.dumps(done.provenance, indent=2, default=str))
        return
    typer.echo(f"promoted {done.layout} from run {done.run_id} for {done.engine} into {done.out_dir}/")
    for path in done.files:
        typer.echo(f"  {path.name}")
