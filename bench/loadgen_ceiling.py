"""Load-generator ceiling: the highest constant request rate each client sustains, side by side.

Server: Debian's nginx (when `nginx` is on PATH; `apt-get install -y nginx`) answering every POST with
a fixed 32-chunk SSE body, one worker pinned to the last core; otherwise a minimal raw-asyncio HTTP
server in a separate process. Every client runs pinned to core 0.
Ceiling = highest target rate with every request completed, none failed and achieved send rate
>= 99% of target, found by orchestrator.loadgen.search (bracket by doubling, then bisect to 5%). For
our client (which records each send time) it is also found with the issue's extra bound, send lag
p99 < 1 ms. Clients: ours (run_open_loop, what `orch bench` runs); a plain asyncio + aiohttp loop that
reads each body whole and parses nothing (a reference for the HTTP stack alone); with --workers, ours
over 2 sender processes; and the peer tools that bench/peers.py finds (`vllm bench serve`, guidellm,
AIPerf), judged on what they report themselves (they need the tiny tokenizer at .cache/tiny-llama:
scripts/build-tiny-model.sh).
Run: .venv/bin/python bench/loadgen_ceiling.py [--duration-s 2] [--repeats 1] [--workers] [--no-peers]
Prints a table and the ratios; asserts nothing.
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
from typing import Any

import aiohttp

from orchestrator.loadgen.client import ClientConfig, RequestSpec, arrival_offsets, run_open_loop
from orchestrator.loadgen.metrics import Metrics, compute_metrics
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.search import search_rate
from orchestrator.loadgen.workers import run_open_loop_workers

CHUNKS = 32
TOKENIZER = str(Path(__file__).resolve().parents[1] / ".cache" / "tiny-llama")  # peers need one
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


MAX_LAG_P99_MS = 1.0
#: RETRY_NOTE: every client's failing point is run a second time and judged on that run. On the shared
#: machine whole-process stalls of 7-10 s (waiting, not computing: CPU time well under wall time) hit
#: any client at any rate now and then; one such stall would otherwise end a search far below the
#: client's real ceiling. The rule is the same for every client.


def keeps_up(rate: float, m: Metrics) -> str:
    """The issue's bar: every request completed, none failed, achieved >= 99%, send lag p99 < 1 ms."""
    if m.n_failed:
        return f"{m.n_failed} failed"
    if m.n_completed < m.n_requests:
        return "not all completed"
    achieved = m.achieved_rate or 0.0
    if achieved < 0.99 * rate:
        return f"achieved {achieved:.0f}/s"
    lag = m.sched_lag_ms.p99 if m.sched_lag_ms else None
    return "" if lag is not None and lag < MAX_LAG_P99_MS else f"lag p99 {lag or 0:.2f} ms"


def keeps_up_rate_only(rate: float, m: Metrics) -> str:
    """The same without the lag bound (what a client that does not report its send times can show)."""
    return keeps_up(rate, m) if not keeps_up(rate, m).startswith("lag") else ""


async def ceiling(
    client: Client, url: str, duration_s: float, start: float, check: Callable[[float, Metrics], str]
) -> tuple[float | None, Metrics | None]:
    await client(url, 50.0, 0.5)  # warm-up: connections, caches

    async def run(rate: float) -> Metrics:
        m = await client(url, rate, duration_s)
        if check(rate, m):  # failed: once more, see RETRY_NOTE
            m = await client(url, rate, duration_s)
        return m

    res = await search_rate(run, {}, start_rate=start, min_rate=start / 16, max_rate=64000.0,
                            rel_tol=0.05, max_runs=14, check=check)
    for p in res.points:
        print(f"  {p.rate:8.0f}/s  achieved {p.metrics.achieved_rate or 0:8.0f}/s  "
              f"lag p99 {(p.metrics.sched_lag_ms.p99 if p.metrics.sched_lag_ms else 0) or 0:7.2f} ms  "
              f"{'ok' if p.passed else p.reason}", file=sys.stderr)
    best = res.best
    return res.best_rate, best.metrics if best else None


async def peer_ceiling(tool: str, exe: str, url: str, duration_s: float, start: float) -> float | None:
    """A peer tool's ceiling: the same search, judged on what the tool itself reports (peers.py)."""
    from peers import run_peer  # bench/peers.py, beside this script

    async def run(rate: float) -> Any:
        p = await asyncio.to_thread(run_peer, tool, exe, url, rate, duration_s, CAP, TOKENIZER, _pin(0))
        if check(rate, p):  # failed: once more, see RETRY_NOTE
            p = await asyncio.to_thread(run_peer, tool, exe, url, rate, duration_s, CAP, TOKENIZER, _pin(0))
        return p

    def check(rate: float, p: Any) -> str:
        if p.n_failed or p.n_completed < p.n_sent:
            return f"{p.n_failed} failed, {p.n_completed}/{p.n_sent} completed"
        return "" if p.achieved_rate >= 0.99 * rate else f"achieved {p.achieved_rate:.0f}/s"

    # search_rate only hands each run's result to `check`, so a peer's own point type works here.
    res = await search_rate(run, {}, start_rate=start, min_rate=start / 16, max_rate=64000.0,
                            rel_tol=0.05, max_runs=12, check=check)
    for p in res.points:
        m: Any = p.metrics
        print(f"  {p.rate:8.0f}/s  achieved {m.achieved_rate:8.0f}/s  {'ok' if p.passed else p.reason}"
              f"  ({m.note})", file=sys.stderr)
    return res.best_rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--duration-s", type=float, default=2.0, help="seconds per load point")
    ap.add_argument("--start-rate", type=float, default=500.0)
    ap.add_argument("--repeats", type=int, default=1, help="rounds per client; the best is kept")
    ap.add_argument("--workers", action="store_true", help="also measure our client with 2 sender processes")
    ap.add_argument("--no-peers", action="store_true", help="skip vllm bench serve / guidellm / aiperf")
    ap.add_argument("--only", default="", help="client name prefixes to run, e.g. guidellm,aiperf")
    ap.add_argument("--raw", action="store_true", help="use the raw asyncio server even if nginx exists")
    ap.add_argument("--serve-raw", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve_raw:
        serve_raw(a.serve_raw)
        return
    _pin(0)()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so nginx is stopped too
    clients: list[tuple[str, Client]] = [
        ("orch bench client", ours), ("plain asyncio+aiohttp loop", plain_aiohttp)
    ]
    if a.workers:
        clients.append(("orch bench client, 2 workers", ours_2_workers))
    peers: dict[str, str] = {}
    if not a.no_peers:
        from peers import find_peers

        peers = find_peers()
        if not Path(TOKENIZER).is_dir():
            print(f"peers skipped: they need a tokenizer at {TOKENIZER} (scripts/build-tiny-model.sh)")
            peers = {}
    if a.only:
        wanted = [w.strip() for w in a.only.split(",") if w.strip()]
        keep = lambda name: any(name.startswith(w) for w in wanted)  # noqa: E731
        clients = [c for c in clients if keep(c[0])]
        peers = {t: e for t, e in peers.items() if keep(t)}
    rate_only: dict[str, tuple[float, float | None]] = {}
    with_lag: dict[str, float] = {}
    load_before = os.getloadavg()[0]
    with server(a.raw) as (url, desc):
        print(f"server: {desc} at {url}; {os.cpu_count()} cores; clients pinned to core 0", file=sys.stderr)
        for rep in range(a.repeats):  # alternate clients, keep each one's best: the machine may be shared
            for name, client in clients:
                # The lag bound only for our client: the others sleep on the loop's timers, whose ~1 ms
                # granularity alone keeps their lag p99 above 1 ms at any rate.
                bounds = [("rate only", keeps_up_rate_only)]
                if name.startswith("orch"):
                    bounds.append(("lag p99 < 1 ms", keeps_up))
                for bound, check in bounds:
                    print(f"{name}, {bound} (round {rep + 1}):", file=sys.stderr)
                    rate, m = asyncio.run(ceiling(client, url, a.duration_s, a.start_rate, check))
                    lag = m.sched_lag_ms.p99 if m and m.sched_lag_ms else None
                    if check is keeps_up:
                        with_lag[name] = max(with_lag.get(name, 0.0), rate or 0.0)
                    elif rate is not None and rate > rate_only.get(name, (0.0, None))[0]:
                        rate_only[name] = (rate, lag)
            for tool, exe in peers.items():
                print(f"{tool} (round {rep + 1}):", file=sys.stderr)
                rate = asyncio.run(peer_ceiling(tool, exe, url, a.duration_s, a.start_rate))
                if rate is not None and rate > rate_only.get(tool, (0.0, None))[0]:
                    rate_only[tool] = (rate, None)
    ours_rate = rate_only.get("orch bench client", (0.0, None))[0]
    print(f"\nserver: {desc}; constant arrivals, {a.duration_s:g} s per point, cap {CAP} in flight; "
          f"best of {a.repeats}; load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    print("ceiling = highest target rate with every request completed, none failed, achieved >= 99%; "
          "the last column adds the issue's send-lag bound (only clients that report send times)")
    print(f"{'client':<32} {'ceiling req/s':>14} {'chunks/s':>10} {'lag p99 ms':>11} {'ours / this':>12}"
          f" {'with lag p99 < 1 ms':>20}")
    for name in [n for n, _ in clients] + list(peers):
        rate, lag = rate_only.get(name, (0.0, None))
        ratio = f"{ours_rate / rate:.2f}" if rate and ours_rate else "-"
        lag_s = f"{lag:.2f}" if lag is not None else "-"
        bound = f"{with_lag[name]:,.0f}" if name in with_lag else "-"
        print(f"{name:<32} {rate:>14,.0f} {rate * CHUNKS:>10,.0f} {lag_s:>11} {ratio:>12} {bound:>20}")
    missing = [t for t in ("vllm bench serve", "guidellm", "aiperf") if t not in peers]
    if missing and not a.no_peers:
        print(f"not run (not found): {', '.join(missing)}; bench/peers.py names the variables for them")


if __name__ == "__main__":
    main()
