"""Incremental Server-Sent Events parser: bytes in, complete events out.

Handles lines split across reads, several events in one read, CRLF/LF line ends, comments and
multi-line `data:` fields. `[DONE]` is an ordinary event with `done` set.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SSEEvent:
    data: str
    event: str | None = None

    @property
    def done(self) -> bool:
        return self.data.strip() == "[DONE]"


class SSEParser:
    def __init__(self) -> None:
        self._buf = b""
        self._data: list[str] = []
        self._event: str | None = None

    @property
    def pending(self) -> bytes:
        """Bytes of an unfinished line (non-empty at end of stream means truncation)."""
        return self._buf

    @property
    def has_partial_event(self) -> bool:
        return bool(self._buf.strip()) or bool(self._data)

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        buf = self._buf + chunk if self._buf else chunk
        if b"\n" not in buf:
            self._buf = buf
            return []
        lines = buf.split(b"\n")
        self._buf = lines.pop()  # the unfinished last line (b"" when buf ended with a newline)
        events: list[SSEEvent] = []
        for raw in lines:
            line = raw[:-1] if raw.endswith(b"\r") else raw
            if not line:
                if self._data:
                    events.append(SSEEvent("\n".join(self._data), self._event))
                self._data, self._event = [], None
                continue
            if line.startswith(b"data:"):
                value = line[5:]
                self._data.append((value[1:] if value.startswith(b" ") else value).decode("utf-8", "replace"))
                continue
            if line.startswith(b":"):
                continue
            name, _, value = line.partition(b":")
            if name == b"data":  # a bare "data" line: an empty data field
                self._data.append("")
            elif name == b"event":
                self._event = (value[1:] if value.startswith(b" ") else value).decode("utf-8", "replace")
        return events
