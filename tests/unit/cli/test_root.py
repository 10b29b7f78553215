"""`orch --version`, and table widths: the terminal's own, or wide off a terminal (pipes, CI logs)."""

import os
import re
import subprocess
import sys
from importlib.metadata import version

import pytest

from tests.support.cli import orch
from tests.support.paths import ROOT

DEEPSEEK = str(ROOT / "layouts" / "deepseek-v3.yaml")


def _orch(*args: str, columns: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = columns
    return orch(*args, env=env)


def test_version_comes_from_the_package_metadata() -> None:
    out = _orch("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"orch {version('orch')}"


def _table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line[:1] in "┏┃┡│└"]


def test_a_pipe_gets_wide_tables_with_whole_names() -> None:
    out = _orch("plan", DEEPSEEK)
    assert out.returncode == 0, out.stderr
    lines = _table_lines(out.stdout)
    assert lines and max(len(line) for line in lines) > 120  # not rich's 80 columns for a pipe
    assert "…" not in out.stdout
    # The longest enumerated names appear whole in the layout column.
    assert "│ tp2dp4epx4 " in out.stdout and "│ tp2dp16ep " in out.stdout


def test_an_explicit_width_is_honoured_without_cutting_names() -> None:
    out = _orch("plan", DEEPSEEK, columns="100")
    assert out.returncode == 0, out.stderr
    lines = _table_lines(out.stdout)
    assert lines and max(len(line) for line in lines) <= 100
    assert "│ tp2dp4epx4 " in out.stdout and "…" not in out.stdout


def test_cli_imports_without_plotly() -> None:
    # `orch bench` runs inside engine venvs (vLLM for CPU) that have orch's core deps but no plotly.
    import subprocess

    code = (
        "import sys; sys.modules['plotly'] = None; sys.argv = ['orch', 'bench', '--help']\n"
        "from orchestrator.cli import main\nmain()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Usage" in out.stdout


def test_help_reads_as_sentences_and_names_arguments_in_capitals() -> None:
    # A hard line break inside a command's docstring showed in `orch --help` as a run of spaces
    # ("per engine     metrics scrape"), and a bare argument as its Python name ({spec_path}).
    out = _orch("--help", columns="100")
    assert out.returncode == 0, out.stderr
    for line in out.stdout.splitlines():
        text = re.sub(r"^\S+ {2,}", "", line.strip("│ "))  # the command-name column and its gap
        assert not re.search(r"\S {3,}\S", text), line
    for cmd in ("validate", "compile", "gc"):
        usage = _orch(cmd, "--help").stdout
        assert "SPEC" in usage and "spec_path" not in usage, (cmd, usage)


def test_help_lists_the_commands_in_workflow_order() -> None:
    # Commands register in import order, which once put report and compare before sweep.
    from orchestrator.cli import COMMAND_ORDER

    out = _orch("--help", columns="100")
    assert out.returncode == 0, out.stderr
    listed = [m.group(1) for m in re.finditer(r"^│ ([a-z]+) ", out.stdout, re.MULTILINE)]
    assert listed == list(COMMAND_ORDER)  # every command placed, none missing from the list
    assert listed[:4] == ["sweep", "plan", "simulate", "validate"]


def test_usage_errors_are_one_line_with_the_fix_and_exit_2() -> None:
    cases = {
        ("compile", DEEPSEEK, "--format", "yaml"): (
            "'yaml' is not one of 'shell', 'json', 'helm-values', 'k8s', 'ray-serve'",
            "see orch compile --help",
        ),
        ("plan", DEEPSEEK, "--bogus"): ("No such option: --bogus", "see orch plan --help"),
        ("plan",): ("Missing argument 'SPEC'", "see orch plan --help"),
        ("nosuch",): ("No such command 'nosuch'", "see orch --help"),
        ("compile", DEEPSEEK, "-l", "tp8", "--redundant-experts", "x"): (
            "'--redundant-experts'", "see orch compile --help"),
        ("sim", "serve", "--bogus"): ("required: --model", "see orch sim serve --help"),
    }
    for args, (what, fix) in cases.items():
        out = _orch(*args, columns="60")  # narrow: nothing may wrap onto a second line either
        assert out.returncode == 2, (args, out.stderr)
        lines = out.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, out.stderr)
        assert what in lines[0] and lines[0].endswith(fix), (args, lines[0])
        assert "╭" not in out.stderr and "Traceback" not in out.stderr


def test_no_command_still_prints_the_help() -> None:
    for args in ((), ("sim",)):
        out = _orch(*args, columns="100")
        assert out.returncode == 2 and out.stderr == "", (args, out.stderr)
        assert "Usage: orch" in out.stdout and "Commands" in out.stdout


def test_main_in_process_puts_the_callers_sigterm_handler_back(monkeypatch: pytest.MonkeyPatch) -> None:
    # While orch runs, SIGTERM unwinds like Ctrl-C; once it returns, the caller's handler is back (a test
    # process that kept orch's would turn its own SIGTERM into a KeyboardInterrupt anywhere).
    import signal

    from orchestrator.cli import main

    def mine(signum: int, frame: object) -> None: ...

    before = signal.signal(signal.SIGTERM, mine)
    try:
        monkeypatch.setattr(sys, "argv", ["orch", "--version"])
        with pytest.raises(SystemExit) as done:
            main()
        assert done.value.code == 0
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)
