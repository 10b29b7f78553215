"""HTTP/1.1 response framing for the load path's client (orchestrator.loadgen.http1): the limits, the
head block and chunk-size lines, parsed strictly, since the server may be broken or hostile.

Every length is checked before it is used: Python's int() also takes "-5", "+5", "5_0", spaces and
(base 16) "0x5", and a negative chunk size once sent the chunked parser backwards forever inside one
data_received call, where no timer can fire. A violation is the error kind "protocol".
"""

from __future__ import annotations

from typing import NamedTuple

#: The status line and headers, all interim (1xx) responses included; also the trailers' limit.
MAX_HEAD_BYTES = 64 * 1024
#: A chunk-size line with its extensions (servers send a few hex digits).
MAX_LINE_BYTES = 4 * 1024
#: Body bytes one response may carry (framing removed) unless the caller sets its own cap.
DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
#: What each read costs against that cap besides its bytes: its list entry, timestamp and bytes
#: object take about 120 bytes, so a server that dribbles one byte per read meets the cap too.
READ_COST_BYTES = 256
_MAX_LENGTH_DIGITS = 19  # a Content-Length above 10**19 is far over any cap
_MAX_SIZE_DIGITS = 16  # a chunk size above 16**16 is too
_HEX = b"0123456789abcdefABCDEF"
#: Chunk-size lines seen, with their checked values: a server repeats a few sizes, so each line is
#: checked once (the chunked parser looks here first, then calls chunk_size).
SIZES_SEEN: dict[bytes, int] = {}
_MAX_SIZES = 4096


class Head(NamedTuple):  # (a tuple: built once per response on the hot path)
    status: int
    keep_alive: bool
    chunked: bool
    length: int | None  # Content-Length (None: chunked, or delimited by the close)


def status_of(status_line: bytes) -> int | None:
    """The status code of `HTTP/1.x NNN reason`, or None when the line is not one."""
    parts = status_line.split(b" ", 2)
    code = parts[1] if len(parts) > 1 else b""
    if not parts[0].startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
        return None
    return int(code)


def parse_head(lines: list[bytes], status: int) -> Head | None:
    """The framing of a final response from its head lines (status line first); None if it is broken."""
    length: bytes | None = None
    chunked = False
    keep_alive = lines[0].startswith(b"HTTP/1.1 ")
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        key = name.strip().lower()
        if key == b"content-length":
            v = value.strip()
            if length is not None and v != length:  # two different lengths: which one is true?
                return None
            length = v
        elif key == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif key == b"connection":
            v = value.strip().lower()
            keep_alive = v != b"close" and (keep_alive or v == b"keep-alive")
    if chunked:  # chunked framing wins over a Content-Length (RFC 9112, 6.3), but do not reuse
        return Head(status, keep_alive and length is None, True, None)
    if status in (204, 304):  # never a body
        return Head(status, keep_alive, False, 0)
    if length is None:
        return Head(status, False, False, None)
    if not length.isdigit() or len(length) > _MAX_LENGTH_DIGITS:  # digits only
        return None
    return Head(status, keep_alive, False, int(length))


def chunk_size(line: bytes) -> int:
    """The size a chunk-size line (hex digits, then extensions) gives, or -1 when it is not one."""
    size = SIZES_SEEN.get(line)
    if size is not None:
        return size
    digits = line.split(b";", 1)[0].rstrip(b" \t") if b";" in line else line
    if len(line) > MAX_LINE_BYTES or not digits or len(digits) > _MAX_SIZE_DIGITS:
        return -1
    if digits.translate(None, _HEX):  # anything but hex digits
        return -1
    size = int(digits, 16)
    if len(SIZES_SEEN) < _MAX_SIZES:
        SIZES_SEEN[line] = size
    return size
