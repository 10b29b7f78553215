"""Async streaming client (aiohttp) for OpenAI-compatible servers, and an open-loop runner.

Timestamps are taken with time.perf_counter() as soon as a read returns bytes, before parsing.
Failures never raise: they end up as RequestRecord.error kinds ("http_<status>", "timeout",
"truncated" = stream ended cleanly without [DONE], "malformed" = an event that is not valid JSON,
an `{"error": {"code": C}}` event inside a 200 stream = "http_C",
"connection" = connect failure or the connection dropped mid-stream).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import numpy as np

from orchestrator.loadgen.records import ErrorKind, RequestRecord
from orchestrator.loadgen.sse import SSEParser

Endpoint = Literal["completions", "chat"]
Arrival = Literal["poisson", "gamma", "constant"]
API_KEY_ENV = "OPENAI_API_KEY"


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
                            obj = json.loads(ev.data)
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
    n: int, rate: float, kind: Arrival = "poisson", burstiness: float = 1.0, seed: int = 0
) -> list[float]:
    """Send offsets in seconds from the start (first at 0). rate=inf sends everything at once.

    gamma: shape = burstiness, mean gap 1/rate (burstiness 1 is Poisson; < 1 burstier).
    """
    if n <= 0:
        return []
    if rate <= 0:
        raise ValueError("rate must be > 0")
    if np.isinf(rate):
        return [0.0] * n
    rng = np.random.default_rng(seed)
    if kind == "constant":
        gaps = np.full(n - 1, 1.0 / rate)
    elif kind == "poisson":
        gaps = rng.exponential(1.0 / rate, n - 1)
    elif kind == "gamma":
        if burstiness <= 0:
            raise ValueError("burstiness must be > 0")
        gaps = rng.gamma(burstiness, 1.0 / (rate * burstiness), n - 1)
    else:
        raise ValueError(f"unknown arrival kind {kind!r}")
    return [0.0, *np.cumsum(gaps).tolist()]


async def run_open_loop(
    cfg: ClientConfig,
    specs: Sequence[RequestSpec],
    offsets: Sequence[float],
    max_concurrency: int | None = None,
    session: aiohttp.ClientSession | None = None,
    sink: list[RequestRecord] | None = None,
) -> list[RequestRecord]:
    """Send specs[i] at absolute time start + offsets[i]; returns records in spec order.

    `sink`, when given, receives each record as it completes, so an interrupted run (Ctrl-C,
    cancellation) keeps what was measured so far.

    With max_concurrency, a request waits for a slot after its scheduled time; that wait is both
    in its scheduling lag and in RequestRecord.queued_s.
    """
    if len(specs) != len(offsets):
        raise ValueError("specs and offsets must have the same length")
    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    own = session is None
    if session is None:
        connector = aiohttp.TCPConnector(limit=max_concurrency or 0, ttl_dns_cache=300)
        session = aiohttp.ClientSession(connector=connector)
    sess = session

    async def one(spec: RequestSpec, at: float) -> RequestRecord:
        if sem is None:
            rec = await send_request(sess, cfg, spec, scheduled_s=at)
        else:
            async with sem:
                rec = await send_request(sess, cfg, spec, scheduled_s=at, queued_s=time.perf_counter() - at)
        if sink is not None:
            sink.append(rec)
        return rec

    tasks: list[asyncio.Task[RequestRecord]] = []
    try:
        start = time.perf_counter()
        for spec, off in zip(specs, offsets, strict=True):
            at = start + off
            delay = at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(spec, at)))
        return list(await asyncio.gather(*tasks))
    finally:
        for t in tasks:
            t.cancel()
        if own:
            await sess.close()


async def run_closed_loop(
    cfg: ClientConfig,
    specs: Sequence[RequestSpec],
    concurrency: int,
    session: aiohttp.ClientSession | None = None,
    sink: list[RequestRecord] | None = None,
) -> list[RequestRecord]:
    """Closed loop: `concurrency` workers, each sending its next request when the previous ends.

    Each request is scheduled when a worker becomes free, so its scheduling lag is the client's own.
    Returns records in spec order.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    own = session is None
    sess = session or aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))
    out: list[RequestRecord | None] = [None] * len(specs)
    it = iter(enumerate(specs))

    async def worker() -> None:
        for i, spec in it:
            rec = await send_request(sess, cfg, spec, scheduled_s=time.perf_counter())
            out[i] = rec
            if sink is not None:
                sink.append(rec)

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        if own:
            await sess.close()
    return [r for r in out if r is not None]
