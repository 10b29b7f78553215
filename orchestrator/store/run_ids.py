"""Run ids become directory names (work directories, `promoted/RUN`): check one before it does.

A store is a file anyone can hand over; an id read from it such as `../../etc` or `a/b` must not
choose where orch writes.
"""

from __future__ import annotations

import re

from orchestrator.errors import OrchError

# What new_run_id makes (20261203-093803-566768) and what users pass: letters, digits, '-', '_', '.'.
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def checked_run_id(run_id: str) -> str:
    """run_id itself when it is safe as one path component; else an OrchError naming it."""
    if not _RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise OrchError(
            f"run id {run_id!r}: not a safe name (letters, digits, '-', '_', '.'; no '/' or '..'); "
            "the store holding it was not written by orch or was altered"
        )
    return run_id
