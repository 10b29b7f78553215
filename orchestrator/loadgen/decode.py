"""From timestamped reads to a RequestRecord: SSE events, their JSON, usage counts, failure kinds.

Decoding is kept off the request hot path. A run hands each ended exchange to a Backlog, which
decodes it when the sender has time to spare before its next scheduled send, when the undecoded
bytes pass a bound, or when the run ends. While the loop decodes, it cannot timestamp reads, so
decoding as responses arrive (what clients usually do) adds its own CPU time to other requests'
timings exactly when many responses arrive together.
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from orchestrator.loadgen.exchange import Exchange
from orchestrator.loadgen.records import ErrorKind, RequestRecord
from orchestrator.loadgen.sse import SSEParser

try:  # orjson decodes an event in ~0.55 us against json's ~1.3 (33 events a request in the ceiling bench)
    import orjson

    _loads: Any = orjson.loads
except ImportError:  # e.g. `orch bench` run inside an engine's own venv: the stdlib is exact, only slower
    _loads = json.loads

#: Undecoded body bytes a Backlog may hold before it decodes on the spot (memory bound).
MAX_BACKLOG_BYTES = 256 * 1024 * 1024


def parse_json(data: bytes | str) -> Any:
    """One event's JSON value; ValueError when it is not exactly one valid JSON value."""
    return _loads(data)


def _choice_text(choice: dict[str, Any]) -> str:
    """The output a choice carries: completions' text, chat's delta content (or reasoning)."""
    text = choice.get("text")
    if text is None:
        delta = choice.get("delta")
        if not delta:
            return ""
        text = delta.get("content") or delta.get("reasoning_content")
    return str(text) if text else ""


@dataclass(frozen=True)
class Sent:
    """An ended exchange and what the record needs besides it."""

    request_id: str
    exchange: Exchange
    sent_s: float
    scheduled_s: float
    queued_s: float = 0.0
    prompt_tokens: int | None = None
    failed_s: float | None = None  # when the transport gave up (timeout, dropped connection)
    endpoint: str | None = None  # set when several endpoints share the run

    @property
    def nbytes(self) -> int:
        return sum(len(data) for _, data in self.exchange.reads)


def to_record(s: Sent) -> RequestRecord:
    ex = s.exchange
    times: list[float] = []
    tokens: list[int] = []
    usage_out: int | None = None
    usage_in: int | None = s.prompt_tokens
    error: ErrorKind = None
    got_done = False
    if ex.status and ex.status != 200:
        error = f"http_{ex.status}"
    elif ex.status == 200:
        # The hot loop of decoding (33 events a request in the ceiling bench): plain dict access, one
        # decode per event, and anything of the wrong shape is "malformed", never an exception.
        parser, loads = SSEParser(), _loads
        for now, data in ex.reads:
            for event in parser.feed_data(data):
                try:
                    obj = loads(event)
                except (ValueError, RecursionError):  # RecursionError: stdlib json on deep nesting
                    if event.strip() == b"[DONE]":  # the one event that is not JSON
                        got_done = True
                        continue
                    error = "malformed"
                    break
                try:
                    if "error" in obj and isinstance(obj["error"], dict):  # an error event in a 200 stream
                        code = obj["error"].get("code")
                        error = f"http_{code}" if isinstance(code, int) else "malformed"
                        break
                    n_chunk = 0
                    usage = obj.get("usage")
                    if usage is not None and usage.get("completion_tokens") is not None:
                        total = int(usage["completion_tokens"])
                        n_chunk = total - (usage_out or 0)
                        usage_out = total
                        if usage.get("prompt_tokens") is not None:
                            usage_in = int(usage["prompt_tokens"])
                    choices = obj.get("choices")
                    # A token arrived when the chunk's usage says so (a token can decode to no text
                    # yet: half of a multi-byte character) or, without per-chunk usage, when it
                    # carries text. A role-only first chat delta is neither.
                    if choices and (n_chunk > 0 or _choice_text(choices[0])):
                        times.append(now)
                        tokens.append(max(n_chunk, 1))
                except (AttributeError, TypeError, KeyError, IndexError, ValueError, OverflowError):
                    error = "malformed"  # valid JSON of the wrong shape (a list, a string, 1e999 ...)
                    break
            if parser.overflowed and error is None:  # an event of endless data lines
                error = "malformed"
            if error is not None:
                break
    if ex.error is not None and (error is None or ex.error != "connection"):
        # The transport's fault (timed out, bad framing, over the cap, refused) outranks what was
        # parsed of a body it cut short; a dropped connection after a bad event is that event's fault.
        error = ex.error
    elif error is None and not got_done:
        error = "truncated"
    return RequestRecord(
        request_id=s.request_id,
        scheduled_s=s.scheduled_s,
        sent_s=s.sent_s,
        done_s=s.failed_s if s.failed_s is not None else (ex.end_s if ex.end_s is not None else s.sent_s),
        chunk_times_s=tuple(times),
        chunk_tokens=tuple(tokens),
        output_tokens=usage_out,
        prompt_tokens=usage_in,
        output_tokens_source="usage" if usage_out is not None else "fallback",
        error=error,
        queued_s=s.queued_s,
        extra={"endpoint": s.endpoint} if s.endpoint is not None else {},
    )


def answer_text(ex: Exchange) -> str:
    """The output text a 200 stream carried (a session's next turn quotes it), "" otherwise."""
    if ex.status != 200:
        return ""
    parser, parts = SSEParser(), []
    for _, data in ex.reads:
        for event in parser.feed_data(data):
            try:
                obj = _loads(event)
                choices = obj.get("choices") if isinstance(obj, dict) else None
                if choices and isinstance(choices[0], dict):
                    parts.append(_choice_text(choices[0]))
            except (ValueError, RecursionError, AttributeError, TypeError):
                continue  # [DONE], or an event the record already calls malformed
    return "".join(parts)


class RecordSink(Protocol):
    """Receives each record once decoded (a list works; the CLI's progress bar is one too)."""

    def append(self, rec: RequestRecord, /) -> None: ...


class Backlog:
    """Ended exchanges waiting to be decoded, in the order they ended; records by key once decoded."""

    def __init__(self, sink: RecordSink | None = None, max_bytes: int = MAX_BACKLOG_BYTES) -> None:
        self.sink = sink
        self.max_bytes = max_bytes
        self.records: dict[int, RequestRecord] = {}
        self._queue: deque[tuple[int, Sent, int]] = deque()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: int, sent: Sent) -> None:
        n = sent.nbytes
        self._queue.append((key, sent, n))
        self._bytes += n
        while self._bytes > self.max_bytes and self._queue:
            self._decode_one()

    def drain(self, until_s: float | None = None) -> None:
        """Decode queued exchanges; with until_s (time.perf_counter()), stop once it has passed."""
        while self._queue:
            if until_s is not None and time.perf_counter() >= until_s:
                return
            self._decode_one()

    def _decode_one(self) -> None:
        key, sent, n = self._queue.popleft()
        self._bytes -= n
        rec = to_record(sent)
        self.records[key] = rec
        if self.sink is not None:
            self.sink.append(rec)
