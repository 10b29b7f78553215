"""Run ids: checked before they become directory names, and resolved from what a user types.

A store is a file anyone can hand over; an id read from it such as `../../etc` or `a/b` must not
choose where orch writes (`checked_run_id`). A user names a run by its id, a unique prefix, its short
hash or `latest` (`resolve_ref`), in every command that takes one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from orchestrator.errors import OrchError, UnknownRun

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


LATEST = "latest"
MIN_PREFIX = 6  # characters of a run id prefix (a day's runs share 8: 20261206)
SHOWN_CANDIDATES = 8


def short_hash(run_id: str) -> str | None:
    """The random tail orch gives a run id (20261206-041115-598dc7 -> 598dc7): what `orch calibrate` and
    others print on their own; None for ids not shaped so."""
    head, sep, tail = run_id.rpartition("-")
    return tail if sep and head and len(tail) >= 4 and all(c in "0123456789abcdef" for c in tail) else None


def resolve_ref(ref: str, newest_first: Sequence[str], where: str) -> str:
    """The one run id `ref` names among `newest_first` (the runs of `where`, newest first): `latest`,
    an exact id, a prefix of MIN_PREFIX or more characters, or the short hash. A prefix that fits
    several runs is refused with the candidates, never silently the newest (issue 29: `orch compare
    20261206 latest` compared a run with itself)."""
    ids = list(dict.fromkeys(newest_first))
    if ref == LATEST:
        if not ids:
            raise UnknownRun(f"RUN latest: {where} holds no runs yet; run `orch sweep SPEC --store {where}`")
        return ids[0]
    if ref in ids:
        return ref
    found = [i for i in ids if (len(ref) >= MIN_PREFIX and i.startswith(ref)) or short_hash(i) == ref]
    if len(found) == 1:
        return found[0]
    if found:
        shown = ", ".join(found[:SHOWN_CANDIDATES]) + (
            f" and {len(found) - SHOWN_CANDIDATES} more" if len(found) > SHOWN_CANDIDATES else "")
        raise UnknownRun(
            f"run {ref!r} is ambiguous in {where}: it fits {len(found)} runs ({shown}); give more of the id"
        )
    hint = "" if len(ref) >= MIN_PREFIX else f" (a prefix needs at least {MIN_PREFIX} characters)"
    known = ", ".join(ids[:5]) or "none"
    raise UnknownRun(f"run {ref!r} is not in {where}{hint}; recent runs: {known} (orch runs)")
