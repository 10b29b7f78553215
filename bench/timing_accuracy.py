"""Timing accuracy: how late each client timestamps chunks, against the server's own write times.

The server (a separate process) streams 16 tokens with TTFT 50 ms and ITL 10 ms and notes, with
time.perf_counter(), when each chunk's write returned (the bytes are in the kernel then). On Linux
perf_counter is CLOCK_MONOTONIC, shared by all processes, so client time - server time is the
client's own delay: kernel wake-up, event loop, HTTP parsing. Reported: median and p99 of that
delay for the first chunk (the TTFT error) and for all chunks, and the client's TTFT median beside
the server's (server write - client send). Clients: ours (orch's run_open_loop) on its HTTP/1.1 client
and on the aiohttp transport (loadgen/aio.py), and a plain aiohttp loop. A packet capture
(`tcpdump -i lo`) would add the kernel's part; this does not need root.
Run: .venv/bin/python bench/timing_accuracy.py [--requests 200 --rate 20] [--busy]
`--busy` keeps the other core busy with a spinning process meanwhile. Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
import numpy as np
from aiohttp import web

from orchestrator.loadgen.client import ClientConfig, RequestSpec, arrival_offsets, run_open_loop

TTFT_S, ITL_S, TOKENS = 0.050, 0.010, 16


def serve(port: int) -> None:
    writes: dict[str, list[float]] = {}

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        rid = str(body["rid"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        start = time.perf_counter()
        times = writes.setdefault(rid, [])
        for i in range(TOKENS):
            delay = start + TTFT_S + i * ITL_S - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            usage = {"prompt_tokens": 4, "completion_tokens": i + 1, "total_tokens": 5 + i}
            chunk = {"choices": [{"index": 0, "text": " tok"}], "usage": usage}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            times.append(time.perf_counter())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def dump(request: web.Request) -> web.Response:
        return web.json_response(writes)

    app = web.Application()
    app.router.add_post("/v1/completions", handle)
    app.router.add_get("/writes", dump)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


Timings = dict[str, tuple[float, list[float]]]  # request id -> (send time, content chunk times)
ClientRun = Callable[[str, int, float], Coroutine[Any, Any, Timings]]


async def ours(url: str, n: int, rate: float, prefix: str = "o") -> dict[str, tuple[float, list[float]]]:
    specs = [RequestSpec(f"{prefix}{i}", "hi", TOKENS, extra_body={"rid": f"{prefix}{i}"}) for i in range(n)]
    recs = await run_open_loop(ClientConfig(url, "m"), specs, arrival_offsets(n, rate, "constant"))
    return {r.request_id: (r.sent_s, list(r.chunk_times_s)) for r in recs if r.ok}


async def ours_on_aiohttp(url: str, n: int, rate: float) -> dict[str, tuple[float, list[float]]]:
    """The same client code on the aiohttp transport (loadgen/aio.py): the wire alone differs."""
    os.environ["ORCH_LOADGEN_TRANSPORT"] = "aiohttp"
    try:
        return await ours(url, n, rate, prefix="a")
    finally:
        del os.environ["ORCH_LOADGEN_TRANSPORT"]


async def plain(url: str, n: int, rate: float) -> dict[str, tuple[float, list[float]]]:
    """Plain aiohttp: timestamp each read that holds a content event (no parsing beyond a split)."""
    out: dict[str, tuple[float, list[float]]] = {}
    async with aiohttp.ClientSession() as sess:

        async def one(i: int) -> None:
            rid = f"p{i}"
            payload = {"model": "m", "prompt": "hi", "max_tokens": TOKENS, "stream": True, "rid": rid}
            sent = time.perf_counter()
            times: list[float] = []
            async with sess.post(url + "/v1/completions", json=payload) as r:
                async for data in r.content.iter_any():
                    now = time.perf_counter()
                    times.extend([now] * data.count(b'"text"'))
            out[rid] = (sent, times)

        start, tasks = time.perf_counter(), []
        for i, off in enumerate(arrival_offsets(n, rate, "constant")):
            delay = start + off - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    return out


def compare(client: Timings, server: dict[str, list[float]]) -> dict[str, float]:
    first: list[float] = []
    every: list[float] = []
    ttft_c: list[float] = []
    ttft_s: list[float] = []
    for rid, (sent, times) in client.items():
        srv = server.get(rid, [])
        if len(srv) != len(times) or not times:
            continue
        first.append((times[0] - srv[0]) * 1e3)
        every.extend((c - s) * 1e3 for c, s in zip(times, srv, strict=True))
        ttft_c.append((times[0] - sent) * 1e3)
        ttft_s.append((srv[0] - sent) * 1e3)
    return {
        "n": len(first),
        "first_p50": float(np.percentile(first, 50)), "first_p99": float(np.percentile(first, 99)),
        "all_p50": float(np.percentile(every, 50)), "all_p99": float(np.percentile(every, 99)),
        "ttft_client_p50": float(np.percentile(ttft_c, 50)),
        "ttft_server_p50": float(np.percentile(ttft_s, 50)),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--busy", action="store_true", help="spin a process on the other core meanwhile")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(a.serve)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    procs = [subprocess.Popen([sys.executable, __file__, "--serve", str(port)])]
    if a.busy:
        procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        clients: list[tuple[str, ClientRun]] = [
            ("orch bench client (http1)", ours), ("orch bench client (aiohttp)", ours_on_aiohttp),
            ("plain aiohttp loop (peer)", plain),
        ]
        results = [(name, asyncio.run(fn(url, a.requests, a.rate))) for name, fn in clients]

        async def fetch() -> dict[str, list[float]]:
            async with aiohttp.ClientSession() as sess, sess.get(url + "/writes") as r:
                data: dict[str, list[float]] = await r.json()
                return data

        server = asyncio.run(fetch())
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
    load = os.getloadavg()[0]
    print(f"server TTFT {TTFT_S * 1e3:.0f} ms, ITL {ITL_S * 1e3:.0f} ms, {TOKENS} tokens; "
          f"{a.requests} requests at {a.rate:g}/s each; other core {'busy' if a.busy else 'idle'}; "
          f"load average {load:.2f}")
    print(f"{'client':<28} {'n':>5} {'1st chunk late p50/p99 ms':>26} {'all chunks p50/p99 ms':>22} "
          f"{'TTFT p50 client/server ms':>26}")
    for name, data in results:
        c = compare(data, server)
        print(f"{name:<28} {c['n']:>5} {c['first_p50']:>12.3f} / {c['first_p99']:<11.3f} "
              f"{c['all_p50']:>9.3f} / {c['all_p99']:<10.3f} "
              f"{c['ttft_client_p50']:>12.2f} / {c['ttft_server_p50']:.2f}")


if __name__ == "__main__":
    main()
