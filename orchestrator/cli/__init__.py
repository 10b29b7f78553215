"""The `orch` command line: the only place that prints, exits or parses argv; commands stay thin."""

from __future__ import annotations

import os
import signal
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from orchestrator.errors import OrchError
from orchestrator.pipeline.provenance import orch_version

app = typer.Typer(
    name="orch",
    help="Pick the parallel serving layout (TP/PP/DP/EP) for an LLM: predict, deploy, measure, record.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
err_console = Console(stderr=True)

RUN_HELP = "Run id, a unique prefix of one (6+ characters), or latest (orch runs lists them)."

# Off a terminal (a pipe, a CI log) tables are printed this wide, so layout and metric names are
# never cut; a terminal gets its own width (rich's default), as does an explicit COLUMNS.
PIPE_WIDTH = 240


def make_console(*, stderr: bool = False) -> Console:
    """A console for tables: the terminal's width on a TTY, PIPE_WIDTH otherwise."""
    out = Console(stderr=stderr)
    if out.is_terminal or "COLUMNS" in os.environ:
        return out
    return Console(stderr=stderr, width=PIPE_WIDTH)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"orch {orch_version()}")
        raise typer.Exit()


def err_line(label: str, style: str, message: str) -> None:
    """`label: message` on stderr. The message is plain text: a spec path or value holding "[bold]" or
    other console markup prints as written, never interpreted."""
    err_console.print(Text.assemble((label, style), " ", message), highlight=False, soft_wrap=True)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True, help="Print orch's version and exit.")] = False,
) -> None:
    """orch: predict, deploy and measure LLM serving layouts."""


# Command modules register themselves on `app` when imported (one line each, sorted).
import orchestrator.cli.bench_cmd  # noqa: E402
import orchestrator.cli.calibrate_cmd  # noqa: E402
import orchestrator.cli.catalog_cmd  # noqa: E402
import orchestrator.cli.compile_cmd  # noqa: E402
import orchestrator.cli.consistency_cmd  # noqa: E402
import orchestrator.cli.experts_cmd  # noqa: E402
import orchestrator.cli.gc_cmd  # noqa: E402
import orchestrator.cli.plan_cmd  # noqa: E402
import orchestrator.cli.promote_cmd  # noqa: E402
import orchestrator.cli.runs_cmd  # noqa: E402
import orchestrator.cli.sim_cmd  # noqa: E402
import orchestrator.cli.spec_cmd  # noqa: E402
import orchestrator.cli.sweep_cmd  # noqa: E402, F401


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM (a CI job cancelled, `kill PID`) unwinds like Ctrl-C, so every deployment is torn down
    # and what was measured is kept; the default action would leave engine processes behind.
    raise KeyboardInterrupt


def main() -> None:
    """Console-script entry: expected failures become one line on stderr and their exit code."""
    signal.signal(signal.SIGTERM, _terminate)
    try:
        app()
    except OrchError as exc:
        err_line("error:", "bold red", str(exc))
        sys.exit(exc.exit_code)
