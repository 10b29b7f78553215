"""The `orch` command line: the only place that prints, exits or parses argv; commands stay thin."""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from orchestrator.errors import OrchError

if TYPE_CHECKING:  # rich is imported when something is printed through it, not at start-up
    from rich.console import Console

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


# The module that registers each command. A command's module (and what it imports: numpy, asyncio,
# aiohttp, plotly ...) is imported when that command runs or help lists every command, so `orch plan`
# starts without the load generator and `orch validate` without the cost model's friends: start-up is
# most of a quick command's time. A test keeps this table and the registered commands equal.
COMMAND_MODULES = {
    "sweep": "sweep_cmd", "plan": "plan_cmd", "simulate": "sim_cmd", "sim": "sim_cmd",
    "validate": "spec_cmd", "schema": "spec_cmd", "compile": "compile_cmd", "report": "report_cmd",
    "compare": "report_cmd", "runs": "runs_cmd", "export": "runs_cmd", "promote": "promote_cmd",
    "calibrate": "calibrate_cmd", "bench": "bench_cmd", "consistency": "consistency_cmd",
    "experts": "experts_cmd", "catalog": "catalog_cmd", "gc": "gc_cmd",
}


def load_commands(names: list[str] | None = None) -> None:
    """Import the modules that register `names` (every command when None)."""
    wanted = COMMAND_MODULES.values() if names is None else [COMMAND_MODULES[n] for n in names]
    for module in sorted(set(wanted)):
        importlib.import_module(f"orchestrator.cli.{module}")


class _OrderedGroup(TyperGroup):
    """The root group: commands in workflow order, each registered on first use (COMMAND_MODULES)."""

    def _take_new(self) -> None:
        fresh = typer.main.get_group(app)  # the group typer builds from what is registered now
        for name, cmd in fresh.commands.items():
            self.commands.setdefault(name, cmd)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:  # a click Context and Command
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            load_commands([cmd_name])
            self._take_new()
        _StartUp.done()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: Any) -> list[str]:
        if len(self.commands) < len(COMMAND_MODULES):  # help lists every command
            load_commands()
            self._take_new()
        rank = {name: i for i, name in enumerate(COMMAND_ORDER)}
        return sorted(super().list_commands(ctx), key=lambda name: rank.get(name, len(rank)))

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except typer.TyperException:  # an unknown name: click suggests close ones from every command
            if len(self.commands) < len(COMMAND_MODULES):
                load_commands()
                self._take_new()
                return super().resolve_command(ctx, args)
            raise


app = typer.Typer(
    name="orch",
    cls=_OrderedGroup,
    help="Pick the parallel serving layout (TP/PP/DP/EP) for an LLM: predict, deploy, measure, record.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@cache
def err_console() -> Console:
    """stderr for one-line errors and warnings; soft_wrap keeps each one line in a CI log (80 columns
    off a terminal)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)

RUN_HELP = "Run id, a unique prefix of one (6+ characters), its short hash, or latest (orch runs lists them)."

# Off a terminal (a pipe, a CI log) tables are printed this wide, so layout and metric names are
# never cut; a terminal gets its own width (rich's default), as does an explicit COLUMNS.
PIPE_WIDTH = 240


def make_console(*, stderr: bool = False) -> Console:
    """A console for tables: the terminal's width on a TTY, PIPE_WIDTH otherwise. No emoji codes: a
    name or reason holding ':b:' prints as written, as table cells do (fit_table.py), and the table
    of emoji codes is not imported."""
    from rich.console import Console

    out = Console(stderr=stderr, emoji=False)
    if out.is_terminal or "COLUMNS" in os.environ:
        return out
    return Console(stderr=stderr, width=PIPE_WIDTH, emoji=False)


# What numpy's bundled BLAS (OpenBLAS) reads for its thread count, in its order.
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """For a quick command whose numpy work is a few small vectors (plan and validate: expert
    popularity): OpenBLAS starts a thread per core when numpy is imported, and they spin waiting for
    work, about 0.04 CPU s of the 1,024-GPU DeepSeek-V3 plan's 0.5 s. One thread is asked for, unless
    the user set a count or numpy is imported already (then nothing changes); the variable is removed
    afterwards, so nothing started later (an engine) inherits it."""
    if "numpy" in sys.modules or any(name in os.environ for name in BLAS_THREAD_VARS):
        yield
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        os.environ.pop("OPENBLAS_NUM_THREADS", None)


def _print_version(value: bool) -> None:
    if value:
        from orchestrator.pipeline.provenance import orch_version

        typer.echo(f"orch {orch_version()}")
        raise typer.Exit()


_ANSI = {"bold red": "1;31", "yellow": "33", "bold yellow": "1;33"}


def err_line(label: str, style: str, message: str) -> None:
    """`label: message` on stderr, one line. The message is plain text: a spec path or value holding
    "[bold]" or other console markup prints as written, never interpreted. Written without rich (a
    one-line error should not pay for importing it): the label is coloured on a terminal, as rich
    would (NO_COLOR, TERM=dumb and FORCE_COLOR respected)."""
    color = (sys.stderr.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
             ) or bool(os.environ.get("FORCE_COLOR"))
    code = _ANSI.get(style)
    shown = f"\x1b[{code}m{label}\x1b[0m" if color and code else label
    sys.stderr.write(f"{shown} {message}\n")
    sys.stderr.flush()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True, help="Print orch's version and exit.")] = False,
) -> None:
    """orch: predict, deploy and measure LLM serving layouts."""



def _terminate(signum: int, frame: object) -> None:
    # SIGTERM (a CI job cancelled, `kill PID`) unwinds like Ctrl-C, so every deployment is torn down
    # and what was measured is kept; the default action would leave engine processes behind.
    raise KeyboardInterrupt


class _StartUp:
    """The garbage collector while a command starts. Start-up allocates what lives as long as the
    process (modules, classes, pydantic validators): passes over those objects, during the imports, in
    every full collection after them and once more at exit, are wasted, about 0.03 CPU s of `orch plan`
    and 0.06 s of the 1,024-GPU plan (bench/cli_speed.py). So main() collects nothing until the
    command's modules are imported (`done`), then freezes what exists (gc.freeze: never scanned again)
    and collects as usual from there; at exit what is left is frozen too, before the interpreter's last
    collection."""

    paused = False
    exit_hook = False

    @classmethod
    def pause(cls) -> bool:
        # Not where the caller collects nothing already or froze objects of its own (a forking server).
        if not gc.isenabled() or gc.get_freeze_count():
            return False
        gc.disable()
        cls.paused = True
        if not cls.exit_hook:
            atexit.register(gc.freeze)
            cls.exit_hook = True
        return True

    @classmethod
    def done(cls) -> None:
        if cls.paused:
            cls.paused = False
            gc.freeze()
            gc.enable()

    @classmethod
    def restore(cls) -> None:
        """As main() found it: called in-process, the caller's objects are collected as before."""
        cls.paused = False
        gc.unfreeze()
        gc.enable()


def main() -> None:
    """Console-script entry: expected failures become one line on stderr and their exit code."""
    # Put back on the way out: called in-process (tests, an embedding tool), the caller's own SIGTERM
    # handling must not stay a KeyboardInterrupt raised wherever it lands, nor its objects frozen.
    previous = signal.signal(signal.SIGTERM, _terminate)
    paused = _StartUp.pause()
    try:
        _main()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if paused:
            _StartUp.restore()


def _main() -> None:
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
