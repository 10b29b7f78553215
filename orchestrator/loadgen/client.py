"""Async streaming client for OpenAI-compatible servers, and the open- and closed-loop runners.

The wire is orchestrator.loadgen.http1 (keep-alive HTTP/1.1 on asyncio protocols). Timestamps are
taken with time.perf_counter() as soon as a read returns bytes, before parsing.
Failures never raise: they end up as RequestRecord.error kinds ("http_<status>", "timeout",
"truncated" = stream ended cleanly without [DONE], "malformed" = an event that is not valid JSON,
an `{"error": {"code": C}}` event inside a 200 stream = "http_C",
"connection" = connect failure or the connection dropped mid-stream, "protocol" = not HTTP/1.1
framing, "too_large" = the body passed ClientConfig.max_response_bytes, "stalled" = no head or whole
event for ClientConfig.idle_timeout_s; see records.ERROR_KINDS).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from orchestrator.loadgen.balance import Balance, Balancer
from orchestrator.loadgen.content import Content
from orchestrator.loadgen.decode import Backlog, RecordSink, Sent, to_record
from orchestrator.loadgen.framing import DEFAULT_MAX_RESPONSE_BYTES
from orchestrator.loadgen.http1 import Http1Client, Origin
from orchestrator.loadgen.records import RequestRecord

Endpoint = Literal["completions", "chat"]
Arrival = Literal["poisson", "gamma", "constant"]
API_KEY_ENV = "OPENAI_API_KEY"
#: The event loop's timers fire up to ~1 ms late (epoll waits in whole milliseconds), so the last
#: SPIN_S before a scheduled send is spent yielding to the loop (it keeps serving I/O) and re-checking.
SPIN_S = 0.0015
DEFAULT_IDLE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ClientConfig:
    base_url: str  # e.g. http://127.0.0.1:8000 (with or without /v1)
    model: str
    endpoint: Endpoint = "completions"
    timeout_s: float = 600.0
    ignore_eos: bool = False
    api_key_env: str = API_KEY_ENV
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES  # body cap per response ("too_large" beyond)
    # Longest silence allowed: no response head, or no whole streamed event, for this long fails the
    # request as "stalled". A streamed token is milliseconds apart; 60 s leaves room for a long queue
    # before the first token, and ends a server that dribbles bytes or hangs within a minute.
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S

    @property
    def url(self) -> str:
        base = self.base_url.rstrip("/")
        if not base.endswith("/v1"):
            base += "/v1"
        return base + ("/chat/completions" if self.endpoint == "chat" else "/completions")

    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            h["Authorization"] = f"Bearer {key}"
        return h

    def __repr__(self) -> str:  # never shows the key: it is not stored here at all
        return f"ClientConfig(url={self.url!r}, model={self.model!r}, endpoint={self.endpoint!r})"


@dataclass(frozen=True)
class RequestSpec:
    request_id: str
    prompt: str
    max_tokens: int
    prompt_tokens: int | None = None  # known input length (from a tokenizer), else from usage
    extra_body: dict[str, Any] = field(default_factory=dict)
    content: Content | None = None  # what the prompt shares with others: prefix-aware routing, the sim


def build_body(cfg: ClientConfig, spec: RequestSpec) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": cfg.model,
        "max_tokens": spec.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if cfg.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": spec.prompt}]
    else:
        body["prompt"] = spec.prompt
    if cfg.ignore_eos:
        body["ignore_eos"] = True
    body.update(spec.extra_body)
    return body


def new_transport() -> Http1Client:
    """The load path's HTTP client. ORCH_LOADGEN_TRANSPORT=aiohttp selects the aiohttp one (for the
    side-by-side in bench/loadgen_ceiling.py)."""
    if os.environ.get("ORCH_LOADGEN_TRANSPORT") == "aiohttp":
        from orchestrator.loadgen.aio import AiohttpClient

        return AiohttpClient()  # type: ignore[return-value]
    return Http1Client()


@functools.lru_cache(maxsize=64)
def _wire(cfg: ClientConfig) -> tuple[Origin, bytes]:
    """The origin and the fixed request head of an endpoint, built once, not per request."""
    origin = Origin.parse(cfg.url)
    return origin, origin.head(cfg.headers())


async def exchange(
    http: Http1Client,
    cfg: ClientConfig,
    spec: RequestSpec,
    scheduled_s: float | None = None,
    queued_s: float = 0.0,
    endpoint: str | None = None,
) -> Sent:
    """Send one streaming request and wait for its end: the hot path, no decoding."""
    origin, head = _wire(cfg)
    payload = json.dumps(build_body(cfg, spec)).encode()
    sent = time.perf_counter()
    ex = await http.post(origin, head, payload, cfg.timeout_s, cfg.max_response_bytes, cfg.idle_timeout_s)
    failed_s = time.perf_counter() if ex.error is not None else None
    return Sent(spec.request_id, ex, sent, sent if scheduled_s is None else scheduled_s, queued_s,
                spec.prompt_tokens, failed_s, endpoint)


async def send_request(
    http: Http1Client,
    cfg: ClientConfig,
    spec: RequestSpec,
    scheduled_s: float | None = None,
    queued_s: float = 0.0,
) -> RequestRecord:
    """Send one streaming request; always returns a record, never raises on server faults."""
    return to_record(await exchange(http, cfg, spec, scheduled_s, queued_s))


def arrival_offsets(
    n: int | None,
    rate: float,
    kind: Arrival = "poisson",
    burstiness: float = 1.0,
    seed: int = 0,
    duration_s: float | None = None,
) -> list[float]:
    """Send offsets in seconds from the start (first at 0). rate=inf sends everything at once.

    gamma: shape = burstiness, mean gap 1/rate (burstiness 1 is Poisson; < 1 burstier).
    duration_s: only offsets below it are kept; n may then be None (as many as fit).
    """
    if n is None and duration_s is None:
        raise ValueError("give n or duration_s")
    if rate <= 0:
        raise ValueError("rate must be > 0")
    if kind not in ("constant", "poisson", "gamma"):
        raise ValueError(f"unknown arrival kind {kind!r}")
    if kind == "gamma" and burstiness <= 0:
        raise ValueError("burstiness must be > 0")
    if np.isinf(rate):
        if n is None:
            raise ValueError("an infinite rate needs a request count")
        return [0.0] * n
    rng = np.random.default_rng(seed)

    def gaps(k: int) -> Any:
        if kind == "constant":
            return np.full(k, 1.0 / rate)
        if kind == "poisson":
            return rng.exponential(1.0 / rate, k)
        return rng.gamma(burstiness, 1.0 / (rate * burstiness), k)

    if duration_s is None:
        assert n is not None
        return [] if n <= 0 else [0.0, *np.cumsum(gaps(n - 1)).tolist()]
    out: list[float] = [0.0]
    block = max(16, int(rate * duration_s * 1.2) + 1)
    while out[-1] < duration_s and (n is None or len(out) < n):
        out.extend((out[-1] + np.cumsum(gaps(block))).tolist())
    return [t for t in out if t < duration_s - 1e-9][: n if n is not None else None]


Targets = ClientConfig | Sequence[ClientConfig]


def _targets(cfg: Targets) -> list[ClientConfig]:
    out = [cfg] if isinstance(cfg, ClientConfig) else list(cfg)
    if not out:
        raise ValueError("need at least one endpoint")
    return out


async def send_balanced(
    sess: Http1Client,
    cfgs: list[ClientConfig],
    bal: Balancer,
    spec: RequestSpec,
    scheduled_s: float,
    queued_s: float = 0.0,
) -> Sent:
    i = bal.acquire(spec.content.route() if spec.content is not None else None)
    try:
        endpoint = cfgs[i].base_url if len(cfgs) > 1 else None
        return await exchange(sess, cfgs[i], spec, scheduled_s, queued_s, endpoint)
    finally:
        bal.release(i)


#: Decoding in the gaps between sends stops this long before the next one (one decode is ~50-100 us).
DECODE_MARGIN_S = 0.0005


async def run_open_loop(
    cfg: Targets,
    specs: Sequence[RequestSpec],
    offsets: Sequence[float],
    max_concurrency: int | None = None,
    session: Http1Client | None = None,
    sink: RecordSink | None = None,
    balance: Balance = "round_robin",
    start_s: float | None = None,
) -> list[RequestRecord]:
    """Send specs[i] at absolute time start + offsets[i]; returns records in spec order.

    start is now, or `start_s` (a time.perf_counter() value; CLOCK_MONOTONIC, so it can be shared
    by several worker processes).

    `cfg` is one endpoint or several (replicas), spread by `balance`. `sink`, when given, receives
    each record once decoded, so an interrupted run (Ctrl-C, cancellation) keeps what was measured.
    Ended exchanges are decoded in the sender's spare time before each scheduled send (see decode).

    With max_concurrency, a request waits for a slot after its scheduled time; that wait is
    RequestRecord.queued_s, kept apart from the client's own scheduling lag.
    """
    if len(specs) != len(offsets):
        raise ValueError("specs and offsets must have the same length")
    cfgs = _targets(cfg)
    bal = Balancer(len(cfgs), balance)
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    own = session is None
    sess = session if session is not None else new_transport()
    backlog = Backlog(sink)

    async def one(k: int, spec: RequestSpec, at: float) -> None:
        if sem is None:
            sent = await send_balanced(sess, cfgs, bal, spec, at)
        else:
            wait0 = time.perf_counter()
            async with sem:
                queued = time.perf_counter() - wait0
                sent = await send_balanced(sess, cfgs, bal, spec, at, queued)
        backlog.add(k, sent)

    tasks: list[asyncio.Task[None]] = []
    try:
        start = time.perf_counter() if start_s is None else start_s
        for k, (spec, off) in enumerate(zip(specs, offsets, strict=True)):
            at = start + off
            if backlog and at - time.perf_counter() > SPIN_S + DECODE_MARGIN_S:
                backlog.drain(until_s=at - SPIN_S - DECODE_MARGIN_S)
            delay = at - time.perf_counter()
            if delay > SPIN_S:
                await asyncio.sleep(delay - SPIN_S)
            while time.perf_counter() < at:  # the last stretch: yield to the loop instead of a timer
                await asyncio.sleep(0)
            tasks.append(asyncio.create_task(one(k, spec, at)))
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        backlog.drain()  # also when interrupted: what ended is kept
        if own:
            await sess.close()
    return [backlog.records[k] for k in range(len(specs))]


async def run_closed_loop(
    cfg: Targets,
    specs: Sequence[RequestSpec],
    concurrency: int,
    session: Http1Client | None = None,
    sink: RecordSink | None = None,
    balance: Balance = "round_robin",
    duration_s: float | None = None,
) -> list[RequestRecord]:
    """Closed loop: `concurrency` workers, each sending its next request when the previous ends.

    Each request is scheduled when a worker becomes free, so its scheduling lag is the client's own.
    With duration_s, no request starts after it, and specs are reused in order (ids suffixed
    "#k") until then; without, each spec is sent once. Returns records in send order. Exchanges are
    decoded after the run (or once the backlog passes its memory bound): a closed loop has no gaps.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if not specs:
        return []
    cfgs = _targets(cfg)
    bal = Balancer(len(cfgs), balance)
    own = session is None
    sess = session if session is not None else new_transport()
    backlog = Backlog(sink)
    counter = itertools.count()
    start = time.perf_counter()

    def next_spec() -> tuple[int, RequestSpec] | None:
        k = next(counter)
        if duration_s is None:
            return (k, specs[k]) if k < len(specs) else None
        if time.perf_counter() - start >= duration_s:
            return None
        spec = specs[k % len(specs)]
        return k, spec if k < len(specs) else replace(spec, request_id=f"{spec.request_id}#{k // len(specs)}")

    async def worker() -> None:
        while (item := next_spec()) is not None:
            k, spec = item
            backlog.add(k, await send_balanced(sess, cfgs, bal, spec, time.perf_counter()))

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        backlog.drain()
        if own:
            await sess.close()
    return [backlog.records[k] for k in sorted(backlog.records)]
