"""Where a command writes what the user asked for (`--out`, `--html`): a path that cannot be written is
bad input, one line naming the flag, the path and the fix (SpecError, exit 2), never an OSError's
traceback. Checked before the write, so nothing else is half-written; what was measured is in the store
already and stays there."""

from __future__ import annotations

import errno
from pathlib import Path

from orchestrator.errors import SpecError


def _why(exc: OSError, path: Path, *, folder: bool) -> str:
    if exc.errno == errno.EISDIR:
        return "is a directory; give a file path inside it, e.g. " + str(path / "out")
    if exc.errno == errno.ENOTDIR:
        return "a part of the path is a file, not a folder; give a path under a folder"
    if exc.errno == errno.EEXIST and folder:
        return "exists and is not a folder; give a folder to write into"
    if exc.errno == errno.ENOENT:
        return "its folder does not exist; create it or give another path"
    return f"cannot write there ({exc.strerror}); give another path"


def write_text_out(path: str | Path, text: str, flag: str = "--out") -> None:
    """Write `text` to the file the user named with `flag`."""
    p = Path(path)
    try:
        p.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{flag} {path}: {_why(exc, p, folder=False)}") from None


def make_out_dir(path: str | Path, flag: str = "--out") -> Path:
    """Create the folder the user named with `flag` (and its parents); the folder."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"{flag} {path}: {_why(exc, p, folder=True)}") from None
    return p
