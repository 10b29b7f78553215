"""Stopping a server started in its own session (`start_new_session=True`), workers and all.

Needs nothing but the standard library, so the bench scripts that run inside the vLLM-for-CPU venv
(which has no pytest) can import it too (bench/vllm_prefix_cache.py)."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import IO


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to process group `pgid`; False when no process of it is left (nothing to signal)."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def stop_group(proc: subprocess.Popen[bytes] | subprocess.Popen[str], log: IO[bytes] | IO[str]) -> None:
    """Stop a server started in its own session (its workers with it): SIGTERM to the group, SIGKILL
    after 30 s; reap it; then close its log.

    A group that has already exited (the server died on its own, or was stopped before) is no error:
    there is nothing left to signal, and the server is still reaped and its log closed. A server that
    exited while its workers live on still has its group signalled, so the workers go too."""
    try:
        signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    finally:
        log.close()
