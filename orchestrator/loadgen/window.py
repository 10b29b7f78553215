"""The measurement window of a load point and its warm-up: which requests and which streamed tokens
a point's metrics count (definitions: the module docstring of orchestrator.loadgen.metrics, "The
measurement window", "Achieved rate", "Output (and total) token throughput"). Over records, or over
the same requests as columns (the simulator's)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from orchestrator.loadgen.columns import RequestColumns
from orchestrator.loadgen.records import RequestRecord


def span_rate(times: Any) -> float | None:
    if len(times) < 2:
        return None
    span = float(np.max(times) - np.min(times))
    return (len(times) - 1) / span if span > 0 else math.inf


def end_of(r: RequestRecord) -> float:
    return r.done_s if r.done_s is not None else r.sent_s


@dataclass(frozen=True)
class Window:
    """The measurement window (module docstring): [start_s, end_s), by the sends, or to the last end
    when the schedule has no span (every request at once, or one request)."""

    start_s: float
    end_s: float
    by_sends: bool  # False: every send at one instant or a single request, so up to the last end

    @property
    def length_s(self) -> float:
        return max(self.end_s - self.start_s, 0.0)

    def contains(self, sent_s: Any, end_s: Any) -> Any:
        """Which requests (sent at `sent_s`, ended at `end_s`: scalars or arrays) are the window's."""
        if self.by_sends:
            return (self.start_s <= sent_s) & (sent_s < self.end_s)
        return (sent_s >= self.start_s) & (end_s <= self.end_s)

    def holds(self, r: RequestRecord) -> bool:
        """Is `r` one of the window's requests?"""
        return bool(self.contains(r.sent_s, end_of(r)))

    def covers(self, t: Any) -> Any:
        """Is time `t` (a chunk's arrival; a scalar or an array, NaN never) inside the window?"""
        if self.by_sends:
            return (self.start_s <= t) & (t < self.end_s)
        return (self.start_s <= t) & (t <= self.end_s)


def window_of(scheduled_s: Any, sent_s: Any, end_s: Any, warmup_s: float = 0.0,
              cooldown_s: float = 0.0) -> Window:
    """The measurement window of requests given as arrays (module docstring); `end_s` is each
    request's end (its send when it has none)."""
    if not len(sent_s):
        return Window(0.0, 0.0, True)
    start = float(np.min(scheduled_s)) + warmup_s
    end = past_last(sent_s) - cooldown_s
    if past_last(scheduled_s) - cooldown_s > start and end > start:
        return Window(start, end, True)
    return Window(start, max(float(np.max(end_s)) - cooldown_s, start), False)


def measurement_window(
    records: Sequence[RequestRecord], warmup_s: float = 0.0, cooldown_s: float = 0.0
) -> Window:
    n = len(records)
    return window_of(np.fromiter((r.scheduled_s for r in records), np.float64, n),
                     np.fromiter((r.sent_s for r in records), np.float64, n),
                     np.fromiter((end_of(r) for r in records), np.float64, n), warmup_s, cooldown_s)


def in_window(
    records: Sequence[RequestRecord], warmup_s: float = 0.0, cooldown_s: float = 0.0
) -> tuple[float, list[RequestRecord]]:
    """The measurement window's length and its requests (module docstring)."""
    w = measurement_window(records, warmup_s, cooldown_s)
    return w.length_s, [r for r in records if w.holds(r)]


def tokens_streamed_by(first_s: Any, done_s: Any, n: Any, times: Any) -> Any:
    """Output tokens streamed by `times`, of requests whose first content chunk came at `first_s`, that
    ended at `done_s` with `n` output tokens (0 for a failed request; NaN times: none streamed). Its
    first token at its first chunk, the other N - 1 evenly from there to its end (its TPOT, as loadgen
    defines it), so a window's count moves smoothly as the request moves and needs only the request's
    first chunk, end and N. numpy broadcasting: one request at many times, or many at one time."""
    first, done, count, t = (np.asarray(x, dtype=np.float64) for x in (first_s, done_s, n, times))
    span = done - first
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(span > 0, np.clip((t - first) / span, 0.0, 1.0), 1.0)
    streaming = ~np.isnan(first) & ~np.isnan(done) & (count > 0) & (t >= first)
    return np.where(streaming, 1.0 + (count - 1) * share, 0.0)


def streamed_until(r: RequestRecord, times: np.ndarray) -> np.ndarray:
    """Output tokens request `r` had streamed by each of `times` (tokens_streamed_by)."""
    first = r.chunk_times_s[0] if r.chunk_times_s else math.nan
    done = r.done_s if r.done_s is not None else math.nan
    out: np.ndarray = tokens_streamed_by(first, done, r.n_output_tokens if r.ok else 0, times)
    return out


def streamed_in(cols: RequestColumns, w: Window) -> tuple[float, float]:
    """(output tokens, prompt tokens) the requests of `cols` streamed inside window `w`
    (tokens_streamed_by); a prompt counts at its request's first chunk."""
    n = np.where(cols.ok, cols.output_tokens, 0)
    out = tokens_streamed_by(cols.first_s, cols.done_s, n, w.end_s) - \
        tokens_streamed_by(cols.first_s, cols.done_s, n, w.start_s)
    prompt = cols.prompt_tokens[cols.ok & w.covers(cols.first_s)]
    return float(out.sum()), float(prompt.sum())


def past_last(times: Any) -> float:
    """One mean gap past the last of `times`: n sends own n gaps, so n / (span + gap) is the familiar
    (n - 1) / span and the last send is inside the window (with one time, or all at one instant, the
    last time itself)."""
    first, last = float(np.min(times)), float(np.max(times))
    return last + (last - first) / (len(times) - 1) if len(times) > 1 else last


def rate_in(times: Any, start: float, end: float) -> float | None:
    if end <= start:
        return span_rate(times)
    return int(np.count_nonzero((times >= start) & (times < end))) / (end - start)


def closed_loop_warmup_s(records: Sequence[RequestRecord] | RequestColumns, concurrency: int) -> float:
    """The default warm-up of a closed loop: until every client's first request has ended. Clients that
    start together queue their first prompts behind each other (a cold queue no steady state has);
    benchmark tools that publish closed-loop numbers ramp up and measure after it. Only when there
    are at least three requests per client (else there is no steady state to keep). Of records, or of
    the same requests as columns (the simulator's)."""
    if concurrency <= 1 or len(records) < 3 * concurrency:
        return 0.0
    if isinstance(records, RequestColumns):
        scheduled, sent = records.scheduled_s, records.sent_s
        ends = np.where(np.isnan(records.done_s), sent, records.done_s)
    else:
        n = len(records)
        scheduled = np.fromiter((r.scheduled_s for r in records), np.float64, n)
        sent = np.fromiter((r.sent_s for r in records), np.float64, n)
        ends = np.fromiter((r.sent_s if r.done_s is None else r.done_s for r in records), np.float64, n)
    first = np.argsort(sent, kind="stable")[:concurrency]  # the clients' first requests
    return float(np.max(ends[first]) - np.min(scheduled))


def point_warmup_s(records: Sequence[RequestRecord] | RequestColumns, configured_s: float,
                   concurrency: int | None) -> float:
    """The warm-up a point is measured after: the configured one, else a closed loop's default
    (closed_loop_warmup_s). The metrics, their intervals and pooled repeats all use this one window."""
    if configured_s or not concurrency:
        return configured_s
    return closed_loop_warmup_s(records, concurrency)
