"""Async streaming client (aiohttp) for OpenAI-compatible servers, and an open-loop runner.

Timestamps are taken with time.perf_counter() as soon as a read returns bytes, before parsing.
Failures never raise: they end up as RequestRecord.error kinds ("http_<status>", "timeout",
"truncated" = stream ended cleanly without [DONE], "malformed" = an event that is not valid JSON,
an `{"error": {"code": C}}` event inside a 200 stream = "http_C",
"connection" = connect failure or the connection dropped mid-stream).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import aiohttp
import numpy as np

from orchestrator.loadgen.balance import Balance, Balancer
from orchestrator.loadgen.records import ErrorKind, RequestRecord
from orchestrator.loadgen.sse import SSEParser

Endpoint = Literal["completions", "chat"]
Arrival = Literal["poisson", "gamma", "constant"]
API_KEY_ENV = "OPENAI_API_KEY"
#: The event loop's timers fire up to ~1 ms late (epoll waits in whole milliseconds), so the last
#: SPIN_S before a scheduled send is spent yielding to the loop (it keeps serving I/O) and re-checking.
SPIN_S = 0.0015


@dataclass(frozen=True)
class ClientConfig:
    base_url: str  # e.g. http://127.0.0.1:8000 (with or without /v1)
    model: str
    endpoint: Endpoint = "completions"
    timeout_s: float = 600.0
    ignore_eos: bool = False
    api_key_env: str = API_KEY_ENV

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


_RAW_DECODE = json.JSONDecoder().raw_decode


def _parse_json(data: str) -> Any:
    """json.loads without its whitespace passes in the common case (an event is one JSON object)."""
    try:
        obj, end = _RAW_DECODE(data)
    except ValueError:
        return json.loads(data)  # leading whitespace and the like; raises when really malformed
    if end != len(data) and data[end:].strip():
        raise ValueError("data after the JSON value")
    return obj


def _content(obj: dict[str, Any]) -> str:
    choices = obj.get("choices") or []
    if not choices:
        return ""
    c = choices[0]
    if "text" in c:
        return str(c.get("text") or "")
    delta = c.get("delta") or {}
    return str(delta.get("content") or delta.get("reasoning_content") or "")


async def send_request(
    session: aiohttp.ClientSession,
    cfg: ClientConfig,
    spec: RequestSpec,
    scheduled_s: float | None = None,
    queued_s: float = 0.0,
) -> RequestRecord:
    """Send one streaming request; always returns a record, never raises on server faults."""
    payload = json.dumps(build_body(cfg, spec)).encode()
    times: list[float] = []
    tokens: list[int] = []
    usage_out: int | None = None
    usage_in: int | None = spec.prompt_tokens
    error: ErrorKind = None
    got_done = False
    parser = SSEParser()
    sent = time.perf_counter()
    last = sent
    try:
        timeout = aiohttp.ClientTimeout(total=cfg.timeout_s)
        async with session.post(cfg.url, data=payload, headers=cfg.headers(), timeout=timeout) as resp:
            if resp.status != 200:
                await resp.read()
                error = f"http_{resp.status}"
            else:
                async for data in resp.content.iter_any():
                    now = time.perf_counter()
                    last = now
                    for ev in parser.feed(data):
                        if ev.done:
                            got_done = True
                            continue
                        try:
                            obj = _parse_json(ev.data)
                        except ValueError:
                            error = "malformed"
                            break
                        if not isinstance(obj, dict):
                            error = "malformed"
                            break
                        if isinstance(obj.get("error"), dict):  # error event inside a 200 stream
                            code = obj["error"].get("code")
                            error = f"http_{code}" if isinstance(code, int) else "malformed"
                            break
                        usage = obj.get("usage")
                        n_chunk: int | None = None
                        if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
                            total = int(usage["completion_tokens"])
                            n_chunk = total - (usage_out or 0)
                            usage_out = total
                            if usage.get("prompt_tokens") is not None:
                                usage_in = int(usage["prompt_tokens"])
                        if _content(obj):
                            times.append(now)
                            tokens.append(n_chunk if n_chunk is not None and n_chunk > 0 else 1)
                    if error is not None:
                        break
                if error is None and not got_done:
                    error = "truncated"
    except TimeoutError:
        error = "timeout"
        last = time.perf_counter()
    except (aiohttp.ClientError, OSError):
        error = "connection"
        last = time.perf_counter()
    return RequestRecord(
        request_id=spec.request_id,
        scheduled_s=sent if scheduled_s is None else scheduled_s,
        sent_s=sent,
        done_s=last,
        chunk_times_s=tuple(times),
        chunk_tokens=tuple(tokens),
        output_tokens=usage_out,
        prompt_tokens=usage_in,
        output_tokens_source="usage" if usage_out is not None else "fallback",
        error=error,
        queued_s=queued_s,
    )


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


class RecordSink(Protocol):
    """Receives each record as it completes (a list works; the CLI's progress bar is one too)."""

    def append(self, rec: RequestRecord, /) -> None: ...


Targets = ClientConfig | Sequence[ClientConfig]


def _targets(cfg: Targets) -> list[ClientConfig]:
    out = [cfg] if isinstance(cfg, ClientConfig) else list(cfg)
    if not out:
        raise ValueError("need at least one endpoint")
    return out


def _session(limit: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit, ttl_dns_cache=300))


async def _send_balanced(
    sess: aiohttp.ClientSession,
    cfgs: list[ClientConfig],
    bal: Balancer,
    spec: RequestSpec,
    scheduled_s: float,
    queued_s: float = 0.0,
) -> RequestRecord:
    i = bal.acquire()
    try:
        rec = await send_request(sess, cfgs[i], spec, scheduled_s=scheduled_s, queued_s=queued_s)
    finally:
        bal.release(i)
    return replace(rec, extra={"endpoint": cfgs[i].base_url}) if len(cfgs) > 1 else rec


async def run_open_loop(
    cfg: Targets,
    specs: Sequence[RequestSpec],
    offsets: Sequence[float],
    max_concurrency: int | None = None,
    session: aiohttp.ClientSession | None = None,
    sink: RecordSink | None = None,
    balance: Balance = "round_robin",
    start_s: float | None = None,
) -> list[RequestRecord]:
    """Send specs[i] at absolute time start + offsets[i]; returns records in spec order.

    start is now, or `start_s` (a time.perf_counter() value; CLOCK_MONOTONIC, so it can be shared
    by several worker processes).

    `cfg` is one endpoint or several (replicas), spread by `balance`. `sink`, when given, receives
    each record as it completes, so an interrupted run (Ctrl-C, cancellation) keeps what was measured.

    With max_concurrency, a request waits for a slot after its scheduled time; that wait is
    RequestRecord.queued_s, kept apart from the client's own scheduling lag.
    """
    if len(specs) != len(offsets):
        raise ValueError("specs and offsets must have the same length")
    cfgs = _targets(cfg)
    bal = Balancer(len(cfgs), balance)
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    own = session is None
    sess = session if session is not None else _session(max_concurrency or 0)

    async def one(spec: RequestSpec, at: float) -> RequestRecord:
        if sem is None:
            rec = await _send_balanced(sess, cfgs, bal, spec, at)
        else:
            wait0 = time.perf_counter()
            async with sem:
                queued = time.perf_counter() - wait0
                rec = await _send_balanced(sess, cfgs, bal, spec, at, queued)
        if sink is not None:
            sink.append(rec)
        return rec

    tasks: list[asyncio.Task[RequestRecord]] = []
    try:
        start = time.perf_counter() if start_s is None else start_s
        for spec, off in zip(specs, offsets, strict=True):
            at = start + off
            delay = at - time.perf_counter()
            if delay > SPIN_S:
                await asyncio.sleep(delay - SPIN_S)
            while time.perf_counter() < at:  # the last stretch: yield to the loop instead of a timer
                await asyncio.sleep(0)
            tasks.append(asyncio.create_task(one(spec, at)))
        return list(await asyncio.gather(*tasks))
    finally:
        for t in tasks:
            t.cancel()
        if own:
            await sess.close()


async def run_closed_loop(
    cfg: Targets,
    specs: Sequence[RequestSpec],
    concurrency: int,
    session: aiohttp.ClientSession | None = None,
    sink: RecordSink | None = None,
    balance: Balance = "round_robin",
    duration_s: float | None = None,
) -> list[RequestRecord]:
    """Closed loop: `concurrency` workers, each sending its next request when the previous ends.

    Each request is scheduled when a worker becomes free, so its scheduling lag is the client's own.
    With duration_s, no request starts after it, and specs are reused in order (ids suffixed
    "#k") until then; without, each spec is sent once. Returns records in send order.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if not specs:
        return []
    cfgs = _targets(cfg)
    bal = Balancer(len(cfgs), balance)
    own = session is None
    sess = session if session is not None else _session(concurrency)
    out: list[RequestRecord | None] = []
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
            out.append(None)
            rec = await _send_balanced(sess, cfgs, bal, spec, time.perf_counter())
            out[k] = rec
            if sink is not None:
                sink.append(rec)

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        if own:
            await sess.close()
    return [r for r in out if r is not None]
