"""Progress of long commands (bench, sweep, calibrate) when stderr is not a terminal (a CI log, a pipe,
nohup): plain lines on stderr, each phase when it starts and a request count at most every
INTERVAL_S, so a job that runs for minutes says what it is doing. On a terminal the commands draw
rich's live bars instead, which off a terminal print nothing until they end."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from orchestrator.loadgen.bench import PointResult
    from orchestrator.loadgen.records import RequestRecord

INTERVAL_S = 10.0  # at most one count line this often; phases and ends are written at once


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty()


class Lines:
    """Timestamped progress lines (seconds since the command started) on stderr."""

    def __init__(self, prefix: str, *, out: TextIO | None = None, clock: Callable[[], float] = time.monotonic,
                 interval_s: float = INTERVAL_S) -> None:
        self.prefix = prefix
        self.out = out
        self.clock = clock
        self.interval_s = interval_s
        self.t0 = clock()
        self.last = -float("inf")

    def say(self, text: str) -> None:
        out = self.out if self.out is not None else sys.stderr
        out.write(f"[{self.clock() - self.t0:6.0f} s] {self.prefix}{text}\n")
        out.flush()
        self.last = self.clock()

    def due(self) -> bool:
        return self.clock() - self.last >= self.interval_s


class RequestLines(Lines):
    """The load generator's per-request progress (loadgen.bench.Progress) as lines."""

    def __init__(self, prefix: str, *, out: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic, interval_s: float = INTERVAL_S) -> None:
        super().__init__(prefix, out=out, clock=clock, interval_s=interval_s)
        self.label = ""
        self.total: int | None = None
        self.done = self.failed = 0

    def begin(self, label: str, total: int | None) -> None:
        self.label, self.total, self.done, self.failed = label, total, 0, 0
        self.say(f"{label}: started" + (f", {total:,} requests" if total else ""))

    def append(self, rec: RequestRecord, /) -> None:
        self.done += 1
        self.failed += rec.error is not None
        if self.due():
            self.counts()

    def counts(self) -> None:
        of = f"/{self.total:,}" if self.total else ""
        self.say(f"{self.label}: {self.done:,}{of} requests ended, {self.failed:,} failed")


class SweepLines(RequestLines):
    """The sweep's Observer (pipeline.sweep) as lines: each layout's phases, its load points' request
    counts, and each point's and layout's outcome."""

    def __init__(self, point_line: Callable[[str, PointResult], str], *, out: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic, interval_s: float = INTERVAL_S) -> None:
        super().__init__("", out=out, clock=clock, interval_s=interval_s)
        self.point_line = point_line
        self.layout = ""

    def phase(self, layout: str, phase: str) -> None:
        self.layout = layout
        self.say(f"{layout}: {phase}")

    def point_start(self, layout: str, label: str, total: int | None) -> None:
        self.layout = layout
        self.begin(f"{layout}: bench {label}", total)

    def request_progress(self, layout: str, label: str, done: int, total: int | None) -> None:
        if self.due():
            of = f"/{total:,}" if total else ""
            self.say(f"{layout}: bench {label}: {done:,}{of} requests ended")

    def point_done(self, layout: str, result: PointResult) -> None:
        self.say(self.point_line(layout, result).strip())

    def layout_done(self, layout: str, status: str, reason: str | None) -> None:
        self.say(f"{layout}: {status}" + (f": {reason}" if reason else ""))
