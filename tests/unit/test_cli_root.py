"""`orch --version`, and table widths: the terminal's own, or wide off a terminal (pipes, CI logs)."""

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEEPSEEK = str(ROOT / "layouts" / "deepseek-v3.yaml")


def _orch(*args: str, columns: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = columns
    code = "from orchestrator.cli import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          check=False, env=env)


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
    import sys

    code = (
        "import sys; sys.modules['plotly'] = None; sys.argv = ['orch', 'bench', '--help']\n"
        "from orchestrator.cli import main\nmain()"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Usage" in out.stdout
