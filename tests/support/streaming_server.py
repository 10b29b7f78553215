"""A small deterministic OpenAI-style streaming server for tests (aiohttp.web on 127.0.0.1:0).

Each request may override the defaults in its JSON body: `ttft_ms`, `itl_ms`, `tokens`
(output tokens; else max_tokens), `tokens_per_chunk`, and `fault`, one of
"http_500", "drop" (connection closed mid-stream), "truncated" (clean end without [DONE]),
"malformed" (an event that is not JSON),
"error_event" (an OpenAI error object inside the stream, code 400), "hang" (never answers).
With `ServerConfig.slots`, at most that many requests stream at once; the others wait for a slot
before their TTFT clock starts (a server with a capacity, so latency grows with load).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web


@dataclass
class ServerConfig:
    ttft_ms: float = 50.0
    itl_ms: float = 10.0
    tokens_per_chunk: int = 1
    prompt_tokens: int = 7
    slots: int | None = None


def _chunk(chat: bool, text: str, usage: dict[str, int] | None) -> bytes:
    choice: dict[str, Any] = {"index": 0, "finish_reason": None}
    if chat:
        choice["delta"] = {"content": text}
    else:
        choice["text"] = text
    obj: dict[str, Any] = {"id": "x", "object": "chunk", "choices": [choice] if text else []}
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def make_app(cfg: ServerConfig | None = None) -> web.Application:
    conf = cfg or ServerConfig()
    slots = asyncio.Semaphore(conf.slots) if conf.slots else None

    async def handle(request: web.Request) -> web.StreamResponse:
        if slots is None:
            return await _handle(request)
        async with slots:
            return await _handle(request)

    async def _handle(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        chat = request.path.endswith("/chat/completions")
        fault = body.get("fault")
        if fault == "http_500":
            return web.json_response({"error": "boom"}, status=500)
        n = int(body.get("tokens", body.get("max_tokens", 16)))
        per = int(body.get("tokens_per_chunk", conf.tokens_per_chunk))
        ttft = float(body.get("ttft_ms", conf.ttft_ms)) / 1e3
        itl = float(body.get("itl_ms", conf.itl_ms)) / 1e3
        continuous = bool((body.get("stream_options") or {}).get("continuous_usage_stats"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if fault == "hang":
            await asyncio.sleep(3600)
        loop = asyncio.get_running_loop()
        start = loop.time()
        sent, i = 0, 0
        while sent < n:
            target = start + ttft + i * itl
            delay = target - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            k = min(per, n - sent)
            sent += k
            usage = None
            if continuous:
                usage = {
                    "prompt_tokens": conf.prompt_tokens,
                    "completion_tokens": sent,
                    "total_tokens": conf.prompt_tokens + sent,
                }
            await resp.write(_chunk(chat, " tok" * k, usage))
            i += 1
            if i == 2 and fault == "drop":
                assert request.transport is not None
                request.transport.close()
                return resp
            if i == 2 and fault == "error_event":
                await resp.write(b'data: {"error": {"code": 400, "message": "bad"}}\n\n')
            if i == 2 and fault == "malformed":
                await resp.write(b"data: {not json\n\n")
        if fault == "truncated":
            await resp.write_eof()
            return resp
        final = {
            "prompt_tokens": conf.prompt_tokens,
            "completion_tokens": n,
            "total_tokens": conf.prompt_tokens + n,
        }
        await resp.write(_chunk(chat, "", final))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/completions", handle)
    app.router.add_post("/v1/chat/completions", handle)
    return app


async def start_server(cfg: ServerConfig | None = None) -> tuple[web.AppRunner, str]:
    """Start on a free port; returns the runner (call .cleanup()) and the base URL."""
    runner = web.AppRunner(make_app(cfg), shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = int(runner.addresses[0][1])
    return runner, f"http://127.0.0.1:{port}"


@contextmanager
def serve_in_thread(cfg: ServerConfig | None = None) -> Iterator[str]:
    """The server on its own event loop in a thread; yields the base URL.

    A server on the test's own loop shares it with the client under test: when the client is busy
    (or the machine is), the server's timers and writes wait too, and the two measure each other.
    """
    loop = asyncio.new_event_loop()
    box: list[Any] = []
    started = threading.Event()
    stop = asyncio.Event()

    async def boot() -> None:
        try:
            box.append(await start_server(cfg))
        finally:
            started.set()
        await stop.wait()
        await box[0][0].cleanup()

    t = threading.Thread(target=lambda: loop.run_until_complete(boot()), daemon=True)
    t.start()
    if not started.wait(30) or not box:
        raise RuntimeError("the test streaming server did not start")
    try:
        yield str(box[0][1])
    finally:
        loop.call_soon_threadsafe(stop.set)
        t.join(10)
        loop.close()


def _main() -> None:
    """`python tests/support/streaming_server.py [--ttft-ms 50 --itl-ms 10 --slots N]`: serve until killed."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--slots", type=int, default=None)
    a = ap.parse_args()

    async def serve() -> None:
        _, url = await start_server(ServerConfig(a.ttft_ms, a.itl_ms, a.tokens_per_chunk, slots=a.slots))
        print(url, flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    _main()
