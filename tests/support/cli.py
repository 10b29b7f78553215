"""`orch` as a user runs it: a fresh Python running the CLI's entry point, output captured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Protocol

import pytest

ORCH = (sys.executable, "-c", "from orchestrator.cli import main; main()")


def orch(
    *args: str, timeout: float = 600, cwd: Path | str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`orch ARGS`, waited for; `timeout` only stops a hung command (tests never assert wall-clock)."""
    return subprocess.run(
        [*ORCH, *args], capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd, env=env
    )


class Orch(Protocol):
    """The type of the `orch` fixture (tests/conftest.py)."""

    def __call__(
        self, *args: str, timeout: float = ..., cwd: Path | str | None = ..., env: dict[str, str] | None = ...
    ) -> subprocess.CompletedProcess[str]: ...


def main_in_process(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    """`orch ARGS` through the real `main()` in this process: (exit code, stdout, stderr)."""
    from orchestrator.cli import main

    monkeypatch.setattr(sys, "argv", ["orch", *args])
    code: int | str | None = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return int(code or 0), captured.out, captured.err
