"""`orch schema` and `orch validate`: the spec's JSON Schema, and a check of a spec file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli import app
from orchestrator.spec import load_spec, spec_hash, spec_json_schema


@app.command()
def schema() -> None:
    """Print the JSON Schema of the sweep spec (for editors and CI validation)."""
    typer.echo(json.dumps(spec_json_schema(), indent=2))


@app.command()
def validate(
    spec_path: Annotated[Path, typer.Argument(help="Sweep spec YAML, e.g. layouts/qwen72b.yaml")],
) -> None:
    """Check a spec file; print its layouts and hash, or one line naming the file, line and field."""
    spec = load_spec(spec_path)
    layouts = ", ".join(str(x) for x in spec.layouts)
    typer.echo(f"{spec_path}: ok; layouts {layouts}; spec sha256 {spec_hash(spec)[:16]}")
