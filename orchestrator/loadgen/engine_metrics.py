"""The engines' own Prometheus metrics, scraped at a fixed interval while a load point runs.

They explain a verdict: a layout whose TTFT p99 blows up with `waiting` climbing and KV usage at 100 %
ran out of cache, one with preemptions recomputed sequences. vLLM and SGLang name the same gauges
differently; each engine maps its own names to our fields (`metrics` of orchestrator/engines/vllm.py,
sglang.py; the simulated server speaks vLLM's): running, waiting, kv_usage (0-1), preemptions (a
counter), prefix_hit_rate (vLLM: prefix-cache hits / queries, both counters; SGLang: its cache_hit_rate
gauge), and prefix_hits / prefix_queries, vLLM's two counters themselves (tokens), kept so that a load
point's hit rate is what its own requests found: the counters' growth over the point, not their totals
since the engine started (which include the warm-up).

Several series of one name (vLLM's data-parallel ranks carry an `engine` label) are summed, except
the usage and hit-rate fractions, where the fullest rank counts (max).

The scrape is a plain asyncio GET on the load generator's own event loop, not aiohttp and not a thread:
parsing a page costs tens of microseconds between events, whereas a thread holding the GIL can delay
the loop by a whole switch interval (5 ms) and shift the very timestamps being measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from orchestrator.engines import METRIC_FIELDS

DEFAULT_INTERVAL_S = 0.5
SCRAPE_TIMEOUT_S = 2.0
MAX_BODY_BYTES = 4 * 1024 * 1024
# kv_transfers / kv_transfer_s: a prefill/decode pair's KV handovers and their seconds on the link
# (counters: NIXL's transfer histogram on vLLM, orch_sim_kv_* on the simulated roles)
FIELDS = ("running", "waiting", "kv_usage", "preemptions", "prefix_hit_rate", "prefix_hits", "prefix_queries",
          "kv_transfers", "kv_transfer_s")

_NAMES = METRIC_FIELDS  # each engine names its own metrics (orchestrator/engines/)
_FRACTIONS = ("kv_usage", "prefix_hit_rate")

T = TypeVar("T")


@dataclass(frozen=True)
class EngineSample:
    """One scrape of one endpoint; t_s from the start of the load point. None: the engine has no such
    metric."""

    t_s: float
    endpoint: int
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # fraction of the KV cache in use, 0-1
    preemptions: float | None = None  # counter since the engine started
    prefix_hit_rate: float | None = None  # fraction, 0-1
    prefix_hits: float | None = None  # counter: prompt tokens found cached
    prefix_queries: float | None = None  # counter: prompt tokens looked up
    kv_transfers: float | None = None  # counter: KV handovers completed (a pair's pool servers)
    kv_transfer_s: float | None = None  # counter: seconds those handovers spent on the link


def parse_prometheus(text: str) -> dict[str, float]:
    """Our fields from a Prometheus text page (unknown names ignored)."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        if brace >= 0:  # label values may hold spaces: the value follows the closing brace
            name, rest = line[:brace], line[line.rfind("}") + 1 :]
        else:
            name, _, rest = line.partition(" ")
        field = _NAMES.get(name.strip())
        if field is None:
            continue
        try:
            value = float(rest.split()[0])
        except (ValueError, IndexError):
            continue
        if math.isnan(value):
            continue
        if field in _FRACTIONS:
            sums[field] = max(sums.get(field, value), value)
        else:
            sums[field] = sums.get(field, 0.0) + value
    hits, queries = sums.get("prefix_hits"), sums.get("prefix_queries")
    if hits is not None and queries and "prefix_hit_rate" not in sums:
        sums["prefix_hit_rate"] = hits / queries
    return sums


def metrics_url(openai_base_url: str) -> str:
    base = openai_base_url.rstrip("/")
    return (base[: -len("/v1")] if base.endswith("/v1") else base) + "/metrics"


async def fetch_text(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> str:
    """GET url over plain HTTP/1.1 (Connection: close); the body as text. OSError on any failure.
    The body ends by its Content-Length, its last chunk or the close, whichever the server uses, so a
    server that keeps the connection open anyway does not stall the scrape."""
    u = urlsplit(url)
    if u.scheme != "http" or not u.hostname:
        raise OSError(f"engine metrics: only http:// URLs are scraped, not {url!r}")
    port = u.port or 80
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(u.hostname, port)
            try:
                host = u.hostname if port == 80 else f"{u.hostname}:{port}"
                writer.write(
                    f"GET {u.path or '/'} HTTP/1.1\r\nHost: {host}\r\nAccept: text/plain\r\n"
                    "Connection: close\r\n\r\n".encode("latin-1")
                )
                head = await reader.readuntil(b"\r\n\r\n")
                body = await _read_body(reader, head.lower())
            finally:
                writer.close()
    except TimeoutError:
        raise OSError(f"{url}: no answer within {timeout_s:g} s") from None
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
        raise OSError(f"{url}: malformed HTTP answer ({type(exc).__name__})") from None
    if not head.startswith(b"HTTP/1.") or head.split(b" ", 2)[1:2] != [b"200"]:
        raise OSError(f"{url}: not an HTTP 200 answer")
    return body.decode("utf-8", "replace")


async def _read_body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip() == b"content-length":
            size = int(value.strip())
            if size > MAX_BODY_BYTES:
                raise ValueError("body too large")
            return await reader.readexactly(size)
    if b"transfer-encoding: chunked" in head:
        out = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                return bytes(out)
            if len(out) + size > MAX_BODY_BYTES:
                raise ValueError("body too large")
            out += await reader.readexactly(size)
            await reader.readexactly(2)
    return await reader.read(MAX_BODY_BYTES)


class EnginePoller:
    """Scrapes every endpoint each `interval_s` until stopped; scrapes that fail are skipped (the
    engine may be busy or have none), so the series can have gaps but never made-up values."""

    def __init__(self, openai_base_urls: Sequence[str], interval_s: float = DEFAULT_INTERVAL_S) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.urls = [metrics_url(u) for u in openai_base_urls]
        self.interval_s = interval_s
        self.samples: list[EngineSample] = []
        self.failed_scrapes = 0

    async def _scrape(self, i: int, t0: float) -> None:
        try:
            text = await fetch_text(self.urls[i])
        except (OSError, ValueError):
            self.failed_scrapes += 1
            return
        fields = parse_prometheus(text)
        if fields:
            self.samples.append(EngineSample(t_s=time.monotonic() - t0, endpoint=i, **fields))

    async def run(self) -> None:
        t0 = time.monotonic()
        tick = 0
        while True:
            await asyncio.gather(*(self._scrape(i, t0) for i in range(len(self.urls))))
            tick += 1
            # absolute schedule: a slow scrape does not stretch the interval
            await asyncio.sleep(max(0.0, t0 + tick * self.interval_s - time.monotonic()))


async def with_engine_metrics(
    work: Awaitable[T], openai_base_urls: Sequence[str], interval_s: float = DEFAULT_INTERVAL_S
) -> tuple[T, EnginePoller]:
    """Await `work` while polling the endpoints' /metrics; returns its result and the poller."""
    poller = EnginePoller(openai_base_urls, interval_s)
    task = asyncio.ensure_future(poller.run())
    try:
        result = await work
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return result, poller


def series_to_dict(
    samples: Sequence[EngineSample], interval_s: float, time_scale: float = 1.0,
    roles: Sequence[str] = (),
) -> dict[str, Any]:
    """The stored form: times divided by the simulator's time scale, like every other measured time.
    `roles`: per endpoint index, the pool it serves in (a prefill/decode deployment), if any."""
    rows = []
    for s in samples:
        d = asdict(s)
        d["t_s"] = s.t_s / time_scale
        rows.append({k: v for k, v in d.items() if v is not None})
    out: dict[str, Any] = {"interval_s": interval_s / time_scale, "samples": rows}
    if roles:
        out["roles"] = list(roles)
    return out


def summarize_pools(series: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """summarize_series per pool, for a series whose endpoints have roles (prefill, decode); {} else."""
    roles: list[str] = series.get("roles") or []
    out: dict[str, dict[str, Any]] = {}
    for role in dict.fromkeys(roles):
        mine = {i for i, r in enumerate(roles) if r == role}
        part = {**series, "samples": [s for s in series.get("samples") or [] if s.get("endpoint") in mine]}
        out[role] = summarize_series(part)
    return out


def _point_hit_rate(hits: float | None, queries: float | None, samples: list[dict[str, Any]]) -> float | None:
    """Over the point's own lookups (vLLM's counters); without counters, the mean of the engine's own
    gauge (SGLang's cache_hit_rate); None where it has neither."""
    if hits is not None:
        return hits / queries if queries else None
    vals = [s["prefix_hit_rate"] for s in samples if s.get("prefix_hit_rate") is not None]
    return sum(vals) / len(vals) if vals else None


def summarize_series(series: dict[str, Any]) -> dict[str, Any]:
    """Peak KV usage, mean running and waiting (summed over endpoints per scrape), preemptions during
    the point; None where no endpoint reported the metric."""
    samples: list[dict[str, Any]] = series.get("samples") or []
    by_tick: dict[int, list[dict[str, Any]]] = {}
    step = series.get("interval_s") or 1.0
    for s in samples:
        by_tick.setdefault(round(s["t_s"] / step), []).append(s)

    def total(name: str) -> list[float]:
        out = []
        for group in by_tick.values():
            vals = [s[name] for s in group if s.get(name) is not None]
            if vals:
                out.append(sum(vals))
        return out

    def peak(name: str) -> float | None:
        vals = [s[name] for s in samples if s.get(name) is not None]
        return max(vals) if vals else None

    def growth(name: str) -> float | None:
        """How much a counter grew during the point, summed over the endpoints that report it."""
        out: float | None = None
        for ep in {s["endpoint"] for s in samples}:
            counts = [s[name] for s in samples if s["endpoint"] == ep and name in s]
            if counts:
                out = (out or 0.0) + max(counts) - min(counts)
        return out

    preempted = growth("preemptions")
    hits, queries = growth("prefix_hits"), growth("prefix_queries")
    transfers, transfer_s = growth("kv_transfers"), growth("kv_transfer_s")
    running, waiting = total("running"), total("waiting")
    return {
        "samples": len(samples),
        "kv_usage_peak": peak("kv_usage"),
        "running_mean": sum(running) / len(running) if running else None,
        "running_peak": max(running) if running else None,
        "waiting_mean": sum(waiting) / len(waiting) if waiting else None,
        "waiting_peak": max(waiting) if waiting else None,
        "preemptions": preempted,
        "prefix_hit_rate_peak": peak("prefix_hit_rate"),
        "prefix_hit_rate": _point_hit_rate(hits, queries, samples),
        "prefix_queries": queries,
        "kv_transfers": transfers,
        "kv_transfer_ms_mean": 1e3 * transfer_s / transfers if transfers and transfer_s is not None else None,
    }
