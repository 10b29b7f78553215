"""Incremental Server-Sent Events parser: bytes in, complete events out.

Handles lines split across reads, several events in one read, CRLF/LF line ends, comments and
multi-line `data:` fields. `[DONE]` is an ordinary event with `done` set. Event data stay bytes
(JSON decoders take bytes; decoding to str first would be a copy per event).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SSEEvent:
    data: bytes
    event: str | None = None

    @property
    def done(self) -> bool:
        return self.data.strip() == b"[DONE]"

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


#: What one event's data lines may cost (their bytes plus LINE_COST_BYTES each, for the line's own
#: object): an OpenAI-style event is a few hundred bytes; an endless one of tiny `data:` lines would
#: otherwise hold ~40 bytes of objects per 8 bytes of stream.
MAX_EVENT_BYTES = 1024 * 1024
LINE_COST_BYTES = 64


class SSEParser:
    def __init__(self) -> None:
        self._parts: list[bytes] = []  # pieces of the unfinished last line, joined once it ends
        self._data: list[bytes] = []
        self._event: str | None = None
        self._cost = 0  # of the event being collected, against MAX_EVENT_BYTES
        self.overflowed = False  # an event passed MAX_EVENT_BYTES: the stream is not SSE any more

    @property
    def pending(self) -> bytes:
        """Bytes of an unfinished line (non-empty at end of stream means truncation)."""
        return b"".join(self._parts)

    @property
    def has_partial_event(self) -> bool:
        return any(p.strip() for p in self._parts) or bool(self._data)

    def feed_data(self, chunk: bytes) -> list[bytes]:
        """Like feed, but only the events' data fields (the load generator reads nothing else)."""
        if not self._parts and not self._data and not self.overflowed:
            fast = _simple_events(chunk)
            if fast is not None:
                return fast
        return [e.data for e in self.feed(chunk)]

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if self.overflowed:
            return []
        if not self._parts and not self._data and self._event is None:  # (a pending `event:` name)
            fast = _simple_events(chunk)
            if fast is not None:
                return [SSEEvent(d) for d in fast]
        if b"\n" not in chunk:
            # The line goes on. Keeping pieces (not one growing buffer) makes a line that never ends
            # cost linear time: each read is scanned and copied once, not once per later read.
            if chunk:
                self._parts.append(chunk)
            return []
        buf = b"".join([*self._parts, chunk]) if self._parts else chunk
        lines = buf.split(b"\n")
        last = lines.pop()  # the unfinished last line (b"" when buf ended with a newline)
        self._parts = [last] if last else []
        events: list[SSEEvent] = []
        for raw in lines:
            line = raw[:-1] if raw.endswith(b"\r") else raw
            if not line:
                if self._data:
                    events.append(SSEEvent(b"\n".join(self._data), self._event))
                self._data, self._event, self._cost = [], None, 0
                continue
            if line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
                self._cost += len(value) + LINE_COST_BYTES
                if self._cost > MAX_EVENT_BYTES:  # stop: what is left of this read is not parsed
                    self.overflowed, self._data, self._parts = True, [], []
                    return events
                continue
            if line.startswith(b":"):
                continue
            name, _, value = line.partition(b":")
            if name == b"data":  # a bare "data" line: an empty data field
                self._data.append(b"")
            elif name == b"event":
                self._event = (value[1:] if value.startswith(b" ") else value).decode("utf-8", "replace")
        return events


def _simple_events(chunk: bytes) -> list[bytes] | None:
    """The shape every OpenAI-compatible server sends: whole `data: X\\n\\n` events and nothing else.

    Returns the data fields, or None when the chunk has any other shape (then the general parser
    runs). The newline count proves no event has a second line, and the `\\n\\ndata: ` count that
    every event starts with `data: `.
    """
    if not chunk.startswith(b"data: ") or not chunk.endswith(b"\n\n") or b"\r" in chunk:
        return None
    parts = chunk.split(b"\n\n")
    parts.pop()  # the empty piece after the last separator
    n = len(parts)
    if chunk.count(b"\n") != 2 * n or chunk.count(b"\n\ndata: ") != n - 1:
        return None
    return [p[6:] for p in parts]
