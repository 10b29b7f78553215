"""One record per request: raw timestamps, never derived numbers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

OutputTokensSource = Literal["usage", "fallback"]

#: Error kinds: None (success), "http_<status>" (a status other than 200, or an error event in the
#: stream), "timeout" (the per-request deadline passed), "truncated" (clean end without [DONE]),
#: "malformed" (an event that is not the expected JSON), "connection" (refused, or dropped mid-stream),
#: "protocol" (not HTTP/1.1 framing: bad status line, Content-Length or chunk size; a line over its
#: limit), "too_large" (the body passed the response cap, max_response_bytes), "stalled" (no response
#: head or whole streamed event for idle_timeout_s: a server that hangs or dribbles bytes).
ErrorKind = str | None
ERROR_KINDS = ("timeout", "truncated", "malformed", "connection", "protocol", "too_large",
               "stalled")  # + http_<status>


@dataclass(frozen=True)
class RequestRecord:
    """What one request did, in monotonic seconds (time.perf_counter()).

    chunk_times_s[i] is when the bytes of the i-th *content* chunk arrived (a chunk that carries
    output); chunk_tokens[i] is how many output tokens that chunk carried (1 when unknown).
    done_s is when the stream ended (the last byte read).
    """

    request_id: str
    scheduled_s: float
    sent_s: float
    done_s: float | None = None
    chunk_times_s: tuple[float, ...] = ()
    chunk_tokens: tuple[int, ...] = ()
    output_tokens: int | None = None
    prompt_tokens: int | None = None
    output_tokens_source: OutputTokensSource = "usage"
    error: ErrorKind = None
    queued_s: float = 0.0  # time waiting for a concurrency slot (part of sent_s - scheduled_s)
    extra: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if len(self.chunk_times_s) != len(self.chunk_tokens):
            raise ValueError("chunk_times_s and chunk_tokens must have the same length")

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        """dataclasses.asdict(self), without its deep copy of every chunk time: a sweep stores millions,
        and asdict's recursion was most of a simulated load point's time."""
        return {
            "request_id": self.request_id, "scheduled_s": self.scheduled_s, "sent_s": self.sent_s,
            "done_s": self.done_s, "chunk_times_s": self.chunk_times_s, "chunk_tokens": self.chunk_tokens,
            "output_tokens": self.output_tokens, "prompt_tokens": self.prompt_tokens,
            "output_tokens_source": self.output_tokens_source, "error": self.error, "queued_s": self.queued_s,
            "extra": dict(self.extra),
        }

    @property
    def n_output_tokens(self) -> int:
        """N: the server's usage count when known, else the sum of tokens per chunk."""
        if self.output_tokens is not None:
            return self.output_tokens
        return sum(self.chunk_tokens)

    @property
    def ttft_s(self) -> float | None:
        """Send to the first chunk carrying output."""
        if not self.chunk_times_s:
            return None
        return self.chunk_times_s[0] - self.sent_s

    @property
    def e2e_s(self) -> float | None:
        """Send to end of stream."""
        if self.done_s is None:
            return None
        return self.done_s - self.sent_s

    @property
    def tpot_s(self) -> float | None:
        """(E2E - TTFT) / (N - 1); None when N < 2."""
        ttft, e2e, n = self.ttft_s, self.e2e_s, self.n_output_tokens
        if ttft is None or e2e is None or n < 2:
            return None
        return (e2e - ttft) / (n - 1)

    @property
    def itl_chunk_s(self) -> tuple[float, ...]:
        """Gaps between consecutive content chunks (vLLM's ITL convention)."""
        t = self.chunk_times_s
        return tuple(t[i] - t[i - 1] for i in range(1, len(t)))

    @property
    def itl_token_s(self) -> tuple[float, ...]:
        """Per-token ITL: each chunk's gap spread evenly over the tokens that chunk carries."""
        out: list[float] = []
        t, k = self.chunk_times_s, self.chunk_tokens
        for i in range(1, len(t)):
            n = max(k[i], 1)
            out.extend([(t[i] - t[i - 1]) / n] * n)
        return tuple(out)

    @property
    def scheduling_lag_s(self) -> float:
        """The client's own lateness: sent - scheduled, less the wait for a concurrency slot."""
        return self.sent_s - self.scheduled_s - self.queued_s
