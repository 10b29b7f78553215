"""Bounded logs for the simulated server: under overload, one line per kind of trouble and a count.

Past its open-file limit, an asyncio server logs "socket.accept() out of system resource" with a full
traceback for every connection it cannot accept, and aiohttp logs a traceback per request that fails
in a handler: 53 MB in two minutes of overload, which in a served sweep is the engine log. Here every
such report becomes one line the first time its kind is seen (message and exception, no traceback);
repeats within SUMMARY_S are counted and reported as one summary line when the window closes. A kind
is the message text before any per-connection detail (the logger name and the format string for
logging records; the context message for the event loop's exception handler).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import sys
import time
from typing import Any, TextIO

SUMMARY_S = 10.0  # repeats of one kind within this many seconds are reported as one count
MAX_KINDS = 64  # distinct kinds remembered; beyond that, everything new is counted under "other"


class LogLimiter:
    """Counts reports by kind; says the first of each window and summarizes the rest."""

    def __init__(self, out: TextIO | None = None, prefix: str = "orch sim serve", window_s: float = SUMMARY_S,
                 clock: Any = time.monotonic) -> None:
        self.out = out
        self.prefix = prefix
        self.window_s = window_s
        self.clock = clock
        self.windows: dict[str, tuple[float, int]] = {}  # kind -> (window start, repeats suppressed)
        self.lines_written = 0

    def _write(self, text: str) -> None:
        out = self.out if self.out is not None else sys.stderr
        with contextlib.suppress(OSError, ValueError):  # a closed stderr must not become a new error
            out.write(f"{self.prefix}: {text}\n")
            out.flush()
        self.lines_written += 1

    def report(self, kind: str, line: str) -> bool:
        """One report: written (True) if it opens a window for its kind, else counted."""
        now = self.clock()
        if kind not in self.windows and len(self.windows) >= MAX_KINDS:
            kind = "other"
        start, repeats = self.windows.get(kind, (None, 0))
        if start is not None and now - start < self.window_s:
            self.windows[kind] = (start, repeats + 1)
            return False
        if repeats:
            self._summary(kind, repeats, now - start if start is not None else 0.0)
        self.windows[kind] = (now, 0)
        self._write(line)
        return True

    def flush(self) -> None:
        """Summary lines for every kind with repeats still uncounted (at shutdown, or from a timer)."""
        now = self.clock()
        for kind, (start, repeats) in list(self.windows.items()):
            if repeats:
                self._summary(kind, repeats, now - start)
                self.windows[kind] = (start, 0)

    def _summary(self, kind: str, repeats: int, span_s: float) -> None:
        self._write(f"{repeats} more like '{kind}' in {span_s:.0f} s (not shown)")


def one_line(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _LimitedHandler(logging.Handler):
    """A logging handler that writes each record as one line through a LogLimiter (no tracebacks)."""

    def __init__(self, limiter: LogLimiter) -> None:
        super().__init__(logging.WARNING)
        self.limiter = limiter

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        message = " ".join(record.getMessage().split())
        detail = one_line(exc)
        kind = f"{record.name}: {record.msg}"[:200]
        line = f"{record.levelname.lower()}: {message}" + (f" ({detail})" if detail else "")
        self.limiter.report(kind, line)


def install(limiter: LogLimiter) -> None:
    """Route warnings and errors of every logger (aiohttp's included) through `limiter`."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(_LimitedHandler(limiter))
    root.setLevel(logging.WARNING)


def loop_handler(limiter: LogLimiter) -> Any:
    """An event-loop exception handler (loop.set_exception_handler) that reports through `limiter`,
    with a timer so a window's count is written even when the trouble stops."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = " ".join(str(context.get("message") or "event loop error").split())
        exc = context.get("exception")
        detail = one_line(exc if isinstance(exc, BaseException) else None)
        if limiter.report(message[:200], f"error: {message}" + (f" ({detail})" if detail else "")):
            # a new window opened: its count is written when it closes, even if nothing else comes
            loop.call_later(limiter.window_s, limiter.flush)

    return handle


def raise_open_file_limit() -> int:
    """Lift this process's soft limit on open files to its hard limit (a server under load holds one
    descriptor per connection); returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    return soft
