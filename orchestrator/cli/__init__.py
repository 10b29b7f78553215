"""The `orch` command line: the only place that prints, exits or parses argv; commands stay thin."""

from __future__ import annotations

import os
import signal
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from orchestrator.errors import OrchError
from orchestrator.pipeline.provenance import orch_version

# The order `orch --help` lists the commands in: the decision a new user comes for and its steps
# first, then the stored runs, then the tools. Modules register in import order (alphabetical), which
# put report and compare before sweep. A command missing here is listed last (tests pin the list).
COMMAND_ORDER = (
    "sweep",
    "plan",
    "simulate",
    "validate",
    "compile",
    "report",
    "compare",
    "runs",
    "export",
    "promote",
    "calibrate",
    "bench",
    "consistency",
    "experts",
    "catalog",
    "schema",
    "gc",
    "sim",
)


class _OrderedGroup(TyperGroup):
    def list_commands(self, ctx: Any) -> list[str]:  # a click Context (typer vendors click)
        rank = {name: i for i, name in enumerate(COMMAND_ORDER)}
        return sorted(super().list_commands(ctx), key=lambda name: rank.get(name, len(rank)))


app = typer.Typer(
    name="orch",
    cls=_OrderedGroup,
    help="Pick the parallel serving layout (TP/PP/DP/EP) for an LLM: predict, deploy, measure, record.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
# soft_wrap: a one-line error or warning stays one line in a CI log (80 columns off a terminal).
err_console = Console(stderr=True, soft_wrap=True)

RUN_HELP = "Run id, a unique prefix of one (6+ characters), its short hash, or latest (orch runs lists them)."

# Off a terminal (a pipe, a CI log) tables are printed this wide, so layout and metric names are
# never cut; a terminal gets its own width (rich's default), as does an explicit COLUMNS.
PIPE_WIDTH = 240


def make_console(*, stderr: bool = False) -> Console:
    """A console for tables: the terminal's width on a TTY, PIPE_WIDTH otherwise."""
    out = Console(stderr=stderr)
    if out.is_terminal or "COLUMNS" in os.environ:
        return out
    return Console(stderr=stderr, width=PIPE_WIDTH)


def print_table(console: Console, table: Table) -> None:
    """The table with its title as a line of its own: rich wraps a title wider than the table's columns
    (a one-point `orch simulate` or `orch bench`) and pads a narrower one with spaces to the width."""
    title = table.title
    if isinstance(title, str):
        table.title = None
        console.print(Text(title, style="table.title"), highlight=False, soft_wrap=True)
    console.print(table)


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
import orchestrator.cli.report_cmd  # noqa: E402
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
        # Not standalone: click's own errors come here instead of typer's multi-line boxed panel.
        code = app(prog_name="orch", standalone_mode=False)
    except OrchError as exc:
        err_line("error:", "bold red", str(exc))
        sys.exit(exc.exit_code)
    except typer.Exit as exc:  # typer.Exit(N) raised outside a command's own invocation
        sys.exit(exc.exit_code)
    except typer.TyperException as exc:  # click's errors: usage errors (exit 2), unreadable files
        if type(exc).__name__ != "NoArgsIsHelpError":  # `orch`, `orch sim`: the help is printed already
            err_line("error:", "bold red", usage_error_line(exc))
        sys.exit(getattr(exc, "exit_code", 2))
    except typer.Abort:
        err_line("error:", "bold red", "aborted")
        sys.exit(1)
    # Without standalone mode an Exit (typer.Exit(1), --help, --version) comes back as its code.
    sys.exit(code if isinstance(code, int) else 0)


def usage_error_line(exc: typer.TyperException) -> str:
    """Click's message as one line, with where to read the valid usage."""
    message = " ".join(exc.format_message().split())
    message = message.replace("Value error, ", "")  # typer's enum conversion keeps pydantic's label
    ctx = getattr(exc, "ctx", None)
    if getattr(exc, "exit_code", 2) == 2 and ctx is not None:
        message = message.rstrip(".")
        see = f"see {ctx.command_path} --help"
        message = f"{message} {see[0].upper()}{see[1:]}" if message.endswith("?") else f"{message}; {see}"
    return message
