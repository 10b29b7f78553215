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
        self._buf += chunk
        events: list[SSEEvent] = []
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                break
            raw, self._buf = self._buf[:nl], self._buf[nl + 1 :]
            line = raw[:-1] if raw.endswith(b"\r") else raw
            if not line:
                if self._data:
                    events.append(SSEEvent("\n".join(self._data), self._event))
                self._data, self._event = [], None
                continue
            if line.startswith(b":"):
                continue
            name, sep, value = line.partition(b":")
            if sep and value.startswith(b" "):
                value = value[1:]
            text = value.decode("utf-8", errors="replace")
            if name == b"data":
                self._data.append(text)
            elif name == b"event":
                self._event = text
        return events
