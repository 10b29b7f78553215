"""stop_group (tests/support/process_groups.py) with real process groups: a server that already exited
(reaped or not) is no error and is still reaped; a server that exited while a worker of its group
lives on still takes the worker with it; a live one is stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pytest

from tests.support.process_groups import signal_group, stop_group

DEADLINE_S = 60.0  # only a hung machine gets near it; nothing asserts how long anything took


def _state(pid: int) -> str | None:
    """The process's state letter from /proc (Z = exited, not reaped), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _start(argv: list[str], log: Path) -> tuple[subprocess.Popen[bytes], BinaryIO]:
    out = log.open("wb")
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True), out


@pytest.mark.parametrize("reaped", [False, True], ids=["exited", "exited-and-reaped"])
def test_a_group_that_already_exited_is_no_error_and_is_reaped(tmp_path: Path, reaped: bool) -> None:
    proc, out = _start(["sleep", "0"], tmp_path / "log")
    # Wait for the exit without reaping it (WNOWAIT): the group is then only a zombie leader.
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    if reaped:
        proc.wait()  # a caller (poll() in a readiness loop) reaped it: the group has no process left
        assert not signal_group(proc.pid, 0), "the group should be empty"
    else:
        assert _state(proc.pid) == "Z"
    stop_group(proc, out)
    assert proc.returncode == 0  # sleep's own exit status: reaped, never signalled
    assert _state(proc.pid) is None
    assert out.closed


def test_a_worker_outlives_its_server_and_still_goes(tmp_path: Path) -> None:
    # The server starts a worker in its own group, says the worker's pid, and exits.
    proc, out = _start(["sh", "-c", "sleep 600 & echo $!; exit 3"], tmp_path / "log")
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    proc.wait()
    worker = int((tmp_path / "log").read_text().split()[0])
    assert os.getpgid(worker) == proc.pid
    stop_group(proc, out)
    assert proc.returncode == 3
    # The orphaned worker got SIGTERM; whoever adopted it reaps it (or it lingers as a zombie here).
    _until(lambda: _state(worker) in (None, "Z"), f"worker {worker} still running after stop_group")


def test_a_live_server_is_stopped_and_reaped(tmp_path: Path) -> None:
    proc, out = _start(["sleep", "600"], tmp_path / "log")
    stop_group(proc, out)
    assert proc.returncode == -signal.SIGTERM
    assert out.closed
