"""The values of one HTTP/1.1 request: where it goes (Origin, with its fixed request head) and what came
back (Exchange: status, timestamped body reads, error). orchestrator.loadgen.http1 fills them."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class Exchange:
    """What one request got back. reads: (arrival time, body bytes with the chunk framing removed)."""

    status: int = 0
    reads: list[tuple[float, bytes]] = field(default_factory=list)
    #: "connection" (refused, dropped), "timeout", "protocol" (not HTTP/1.1 framing), "too_large"
    error: str | None = None
    complete: bool = False  # the body ended by its framing (or by the close of a close-delimited body)
    end_s: float | None = None  # when the last byte arrived


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int
    path: str  # request target, e.g. /v1/completions

    @classmethod
    def parse(cls, url: str) -> Origin:
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = u.port or (443 if u.scheme == "https" else 80)
        return cls(u.scheme, u.hostname, port, (u.path or "/") + (f"?{u.query}" if u.query else ""))

    def head(self, headers: dict[str, str]) -> bytes:
        """The request head up to (not including) the Content-Length value."""
        host = self.host if self.port in (80, 443) else f"{self.host}:{self.port}"
        lines = [f"POST {self.path} HTTP/1.1", f"Host: {host}", "Connection: keep-alive",
                 "Accept: text/event-stream, application/json"]
        lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() not in ("host", "content-length")]
        return ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")
