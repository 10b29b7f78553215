"""Load-generator ceiling: the highest constant request rate our client sustains, beside a peer.

Server: Debian's nginx (when `nginx` is on PATH; `apt-get install -y nginx`) answering every POST with
a fixed 32-chunk SSE body, one worker pinned to the last core; otherwise a minimal raw-asyncio HTTP
server in a separate process. The client under test runs in this process, pinned to core 0.
Ceiling = highest target rate with achieved send rate >= 99% of target, every request completed and
no failure, found by orchestrator.loadgen.search (bracket by doubling, then bisect to 5%).
Peers, on the same server and the same search: a plain asyncio + aiohttp loop (no parsing, no records
beyond send/end times); and, when ORCH_VLLM_PYTHON names a python with vLLM, nothing more is run yet
(its `bench serve` needs a tokenizer directory; see docs/bench.md).
Also, with --workers, our client over 2 sender processes (`orch bench --workers 2`; not pinned).
Run: .venv/bin/python bench/loadgen_ceiling.py [--duration-s 2] [--repeats 2] [--workers] [--raw]
Prints a table and the ratio; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp

from orchestrator.loadgen.client import ClientConfig, RequestSpec, arrival_offsets, run_open_loop
from orchestrator.loadgen.metrics import Metrics, compute_metrics
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.search import search_rate
from orchestrator.loadgen.workers import run_open_loop_workers

CHUNKS = 32
CAP = 256  # max requests in flight, for both clients (past a ceiling, uncapped clients open 16k sockets)


def sse_body() -> bytes:
    parts = []
    for i in range(1, CHUNKS + 1):
        obj = {"id": "x", "object": "text_completion",
               "choices": [{"index": 0, "text": " tok", "finish_reason": None}],
               "usage": {"prompt_tokens": 8, "completion_tokens": i, "total_tokens": 8 + i}}
        parts.append(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")
    return b"".join(parts) + b"data: [DONE]\n\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout_s: float = 10.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"server on port {port} did not start")


def _pin(cpu: int) -> Callable[[], None]:
    def pin() -> None:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {cpu})
    return pin


NGINX_CONF = """worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 16384; }}
http {{
  access_log off;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  client_body_temp_path {d}/body;
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    location / {{ error_page 405 =200 /sse.txt; return 405; }}
    location = /sse.txt {{ root {d}; default_type text/event-stream; }}
  }}
}}
"""


@contextmanager
def server(raw: bool) -> Iterator[tuple[str, str]]:
    """(base URL, description) of a server answering every POST with the fixed SSE body."""
    port, last_cpu = free_port(), (os.cpu_count() or 1) - 1
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o755)  # nginx workers run as an unprivileged user
        if nginx and not raw:
            Path(d, "sse.txt").write_bytes(sse_body())
            Path(d, "nginx.conf").write_text(NGINX_CONF.format(d=d, port=port))
            argv = [nginx, "-c", f"{d}/nginx.conf", "-p", d]
            desc = "nginx (1 worker), fixed 32-chunk SSE body"
        else:
            argv = [sys.executable, __file__, "--serve-raw", str(port)]
            desc = "raw asyncio server (separate process), fixed 32-chunk SSE body"
        proc = subprocess.Popen(argv, preexec_fn=_pin(last_cpu), stdout=subprocess.DEVNULL)
        try:
            wait_port(port)
            yield f"http://127.0.0.1:{port}", desc
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)


def serve_raw(port: int) -> None:
    """Minimal HTTP/1.1 keep-alive server: read headers and Content-Length body, write the fixed body."""
    body = sse_body()
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                headers = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in headers.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                writer.write(head + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        srv = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
        async with srv:
            await srv.serve_forever()

    asyncio.run(main())


def _spec(i: int) -> RequestSpec:
    return RequestSpec(f"r{i}", "hello world", CHUNKS)


async def ours(url: str, rate: float, duration_s: float) -> Metrics:
    offsets = arrival_offsets(None, rate, "constant", duration_s=duration_s)
    recs = await run_open_loop(ClientConfig(url, "m"), [_spec(i) for i in range(len(offsets))], offsets,
                               max_concurrency=CAP)
    return compute_metrics(recs)


async def ours_2_workers(url: str, rate: float, duration_s: float) -> Metrics:
    """Our client over 2 sender processes (orch bench --workers 2), free to use every core."""
    offsets = arrival_offsets(None, rate, "constant", duration_s=duration_s)
    specs = [_spec(i) for i in range(len(offsets))]
    mine = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if mine is not None:
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))  # the workers inherit it at spawn
    try:
        cfgs = [ClientConfig(url, "m")]
        recs = await asyncio.to_thread(run_open_loop_workers, cfgs, specs, offsets, 2, CAP)
    finally:
        if mine is not None:
            os.sched_setaffinity(0, mine)
    return compute_metrics(recs)


async def plain_aiohttp(url: str, rate: float, duration_s: float) -> Metrics:
    """The peer: schedule on absolute times, POST, read the whole body; nothing else."""
    offsets = arrival_offsets(None, rate, "constant", duration_s=duration_s)
    payload = json.dumps({"model": "m", "prompt": "hello world", "max_tokens": CHUNKS, "stream": True})
    sem = asyncio.Semaphore(CAP)
    recs: list[RequestRecord] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CAP)) as sess:

        async def one(i: int, at: float) -> None:
            async with sem:
                sent = time.perf_counter()
                err: str | None = None
                try:
                    async with sess.post(url + "/v1/completions", data=payload,
                                         headers={"Content-Type": "application/json"}) as r:
                        await r.read()
                        err = None if r.status == 200 else f"http_{r.status}"
                except (aiohttp.ClientError, OSError):
                    err = "connection"
                recs.append(RequestRecord(str(i), at, sent, done_s=time.perf_counter(), error=err))

        start = time.perf_counter()
        tasks = []
        for i, off in enumerate(offsets):
            delay = start + off - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, start + off)))
        await asyncio.gather(*tasks)
    return compute_metrics(recs)


Client = Callable[[str, float, float], Awaitable[Metrics]]


def keeps_up(rate: float, m: Metrics) -> str:
    if m.n_failed:
        return f"{m.n_failed} failed"
    if m.n_completed < m.n_requests:
        return "not all completed"
    achieved = m.achieved_rate or 0.0
    return "" if achieved >= 0.99 * rate else f"achieved {achieved:.0f}/s"


async def ceiling(
    client: Client, url: str, duration_s: float, start: float
) -> tuple[float | None, Metrics | None]:
    await client(url, 50.0, 0.5)  # warm-up: connections, caches
    res = await search_rate(lambda r: client(url, r, duration_s), {}, start_rate=start, max_rate=64000.0,
                            rel_tol=0.05, max_runs=14, check=keeps_up)
    best = res.best
    for p in res.points:
        print(f"  {p.rate:8.0f}/s  achieved {p.metrics.achieved_rate or 0:8.0f}/s  "
              f"lag p99 {(p.metrics.sched_lag_ms.p99 if p.metrics.sched_lag_ms else 0) or 0:7.2f} ms  "
              f"{'ok' if p.passed else p.reason}", file=sys.stderr)
    return res.best_rate, best.metrics if best else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--duration-s", type=float, default=2.0, help="seconds per load point")
    ap.add_argument("--start-rate", type=float, default=400.0)
    ap.add_argument("--repeats", type=int, default=2, help="rounds per client; the best is kept")
    ap.add_argument("--workers", action="store_true", help="also measure our client with 2 sender processes")
    ap.add_argument("--raw", action="store_true", help="use the raw asyncio server even if nginx exists")
    ap.add_argument("--serve-raw", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve_raw:
        serve_raw(a.serve_raw)
        return
    _pin(0)()
    clients: list[tuple[str, Client]] = [
        ("orch bench client", ours), ("plain asyncio+aiohttp loop (peer)", plain_aiohttp)
    ]
    if a.workers:
        clients.append(("orch bench client, 2 workers", ours_2_workers))
    best: dict[str, tuple[float, float | None]] = {}
    load_before = os.getloadavg()[0]
    with server(a.raw) as (url, desc):
        print(f"server: {desc} at {url}; {os.cpu_count()} cores; client pinned to core 0", file=sys.stderr)
        for rep in range(a.repeats):  # alternate clients, keep each one's best: the machine may be shared
            for name, client in clients:
                print(f"{name} (round {rep + 1}):", file=sys.stderr)
                rate, m = asyncio.run(ceiling(client, url, a.duration_s, a.start_rate))
                lag = m.sched_lag_ms.p99 if m and m.sched_lag_ms else None
                if rate is not None and rate > best.get(name, (0.0, None))[0]:
                    best[name] = (rate, lag)
    ours_rate = best.get(clients[0][0], (0.0, None))[0]
    print(f"\nserver: {desc}; constant arrivals, {a.duration_s:g} s per point, cap {CAP} in flight; "
          f"best of {a.repeats}; load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    print(f"{'client':<36} {'ceiling req/s':>14} {'chunks/s':>10} {'lag p99 ms':>11} {'ours / this':>12}")
    for name, _ in clients:
        rate, lag = best.get(name, (0.0, None))
        ratio = f"{ours_rate / rate:.2f}" if rate else "-"
        lag_s = f"{lag:.2f}" if lag is not None else "-"
        print(f"{name:<36} {rate:>14,.0f} {rate * CHUNKS:>10,.0f} {lag_s:>11} {ratio:>12}")
    if os.environ.get("ORCH_VLLM_PYTHON"):
        print("ORCH_VLLM_PYTHON is set, but the vLLM `bench serve` peer is not wired in yet.")


if __name__ == "__main__":
    main()
