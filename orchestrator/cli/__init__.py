"""The `orch` command line: the only place that prints, exits or parses argv; commands stay thin."""

from __future__ import annotations

import signal
import sys

import typer
from rich.console import Console

from orchestrator.errors import OrchError

app = typer.Typer(
    name="orch",
    help="Pick the parallel serving layout (TP/PP/DP/EP) for an LLM: predict, deploy, measure, record.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
err_console = Console(stderr=True)


@app.callback()
def _root() -> None:
    """orch: predict, deploy and measure LLM serving layouts."""


# Command modules register themselves on `app` when imported (one line each, sorted).
import orchestrator.cli.bench_cmd  # noqa: E402
import orchestrator.cli.calibrate_cmd  # noqa: E402
import orchestrator.cli.catalog_cmd  # noqa: E402
import orchestrator.cli.compile_cmd  # noqa: E402
import orchestrator.cli.consistency_cmd  # noqa: E402
import orchestrator.cli.experts_cmd  # noqa: E402
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
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
