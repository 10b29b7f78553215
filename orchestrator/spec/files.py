"""Reading a file a user named: never hang on a FIFO or device, never read without a size bound,
and say which line is not UTF-8 instead of a UnicodeDecodeError."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from orchestrator.errors import SpecError

MAX_SPEC_BYTES = 1 << 20  # 1 MiB: the largest example spec is 3 kB; anything near this is not a spec
MAX_DATA_FILE_BYTES = 64 << 20  # config.json, expert statistics: kilobytes in practice


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def read_user_bytes(path: str | Path, *, max_bytes: int, example: str = "a file") -> bytes:
    """The bytes of a regular file of at most max_bytes; anything else is a one-line SpecError."""
    p = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO nobody writes to returns at once instead of blocking; fstat then
        # refuses it. Checking the opened descriptor (not a stat of the name) leaves no race.
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise SpecError(f"{p}: cannot read: no such file; pass {example}") from None
    except OSError as exc:
        raise SpecError(f"{p}: cannot read: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(f"{p}: {_kind(info.st_mode)}, not a regular file; pass {example}")
        if info.st_size > max_bytes:
            raise SpecError(
                f"{p}: {info.st_size:,} bytes, more than the {max_bytes:,} allowed; is this the right file?"
            )
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise SpecError(f"{p}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:  # grew while we read it
        raise SpecError(f"{p}: more than the {max_bytes:,} bytes allowed; is this the right file?")
    return data


def decode_utf8(data: bytes, source: str) -> str:
    """UTF-8 text (a BOM is dropped); a bad byte is reported with its line and column."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        bad = data[exc.start]
        raise SpecError(
            f"{source}:{line}: not UTF-8 text (byte 0x{bad:02x} at column {column}); save the file as UTF-8"
        ) from None


def read_user_text(path: str | Path, *, max_bytes: int, example: str = "a file") -> str:
    """read_user_bytes, then decode_utf8."""
    return decode_utf8(read_user_bytes(path, max_bytes=max_bytes, example=example), str(path))
