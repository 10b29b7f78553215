"""Fixtures every test folder shares. Their building blocks live in tests/support/ (importable as
`tests.support.<module>` because pyproject's pytest settings put the repository root on sys.path), so
helpers outside a test function can use them too."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import Orch
from tests.support.cli import orch as run_orch
from tests.support.ports import free_port as pick_free_port
from tests.support.sim_spec import SimSpec, write_spec


@pytest.fixture
def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (outside Ray's worker range)."""
    return pick_free_port()


@pytest.fixture
def orch() -> Orch:
    """Runs `orch ARGS` in a fresh Python and returns the finished process (stdout, stderr, returncode)."""
    return run_orch


@pytest.fixture
def sim_spec(tmp_path: Path) -> SimSpec:
    """Writes the small simulated-engine sweep spec (tests/support/sim_spec.py) with top-level sections
    replaced, into tmp_path; returns its path."""

    def write(**changes: object) -> str:
        return write_spec(tmp_path, **changes)

    return write
