"""`orch schema` and `orch validate`: the spec's JSON Schema, and a check of a spec file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli import app, err_line, one_blas_thread
from orchestrator.pipeline.validate import check_spec
from orchestrator.spec import spec_hash, spec_json_schema
from orchestrator.spec.load import load_spec_lines


@app.command()
def schema() -> None:
    """Print the JSON Schema of the sweep spec (for editors and CI validation)."""
    typer.echo(json.dumps(spec_json_schema(), indent=2))


# help= as one string: a line break inside a docstring shows up in `orch --help` as a gap.
@app.command(help="Check a spec file as plan, compile and sweep would (catalog names, files, engine argv); "
             "print its layouts and hash, or one line naming the file, line, field and fix (exit code 2).")
def validate(
    spec_path: Annotated[Path, typer.Argument(
        metavar="SPEC", help="Sweep spec YAML, e.g. layouts/qwen72b.yaml")],
) -> None:
    """Check a spec as plan, compile and sweep would; print its layouts and hash, or the one-line error."""
    loaded = load_spec_lines(spec_path)
    with one_blas_thread():
        warnings = check_spec(loaded)
    for warning in warnings:
        err_line("warning:", "yellow", warning)
    spec = loaded.spec
    layouts = ", ".join(str(x) for x in spec.layouts)
    typer.echo(f"{spec_path}: ok; layouts {layouts}; spec sha256 {spec_hash(spec)[:16]}")
