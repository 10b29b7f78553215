"""Load-generator ceiling: the highest constant request rate each client holds over a steady-state point,
confirmed by the server's own access log, side by side and repeated.

Server: Debian's nginx (`apt-get install nginx`; .ci/setup.d/10-nginx.sh), one worker pinned to the
last core, answering every POST with a fixed 32-chunk SSE body and logging each request's arrival
(`$msec - $request_time`) and status. Each client runs as its own process pinned to core 0, at most
CAP requests in flight, constant arrivals, 8-token prompts, 32 output tokens:
- `orch bench` (the real command, its own records saved with --save), on its HTTP/1.1 client (http1);
- `orch bench` on the aiohttp transport (ORCH_LOADGEN_TRANSPORT=aiohttp): the same code but the wire;
- a bare asyncio + aiohttp loop that schedules, POSTs and reads each body whole, parsing nothing;
- vLLM's `bench serve` client, and guidellm and AIPerf where found (bench/peers.py runs each and reads
  its own result files; found through ORCH_VLLM_PYTHON, ORCH_GUIDELLM, ORCH_AIPERF; they need the
  tiny tokenizer at .cache/tiny-llama: scripts/build-tiny-model.sh).
Each load point has its own URL prefix (/p<N>/v1/completions), so its lines in the access log are its own.

A point at target rate R over D seconds (default 10) HOLDS when all of:
- every request completed, none failed (the client's own count);
- delivered: the client's send rate (sends - 1) / (last send - first send) >= 99% of R;
- the server agrees: its log holds every request sent, all 200, and its arrival rate >= 99% of R;
- bounded send lag: p99 of how late each arrival is against a constant schedule at R from the first,
  by the server's log (every client) and by the client's own send times (those that record them),
  at most LAG_P99_MS.
Ceiling = the highest R that holds: bracket by doubling from --start-rate, bisect to 5%; a point that
fails is run once more and judged on that run (the machine may be shared: whole-process stalls of
several seconds hit any client now and then). Repeated --rounds times, clients interleaved.
CPU per request: the client process's CPU seconds (user + system, from getrusage of children) at the
highest holding point, less a start-up probe of the same client with 2 requests, over the requests.
Also per round, before each search: every client at one rate all of them hold (--cpu-rate, default
200/s), for the CPU it spends per request and its send lag there, side by side (--no-ceiling: only that).
Run: .venv/bin/python bench/loadgen_ceiling.py [--duration-s 10] [--rounds 3] [--only orch,aiohttp]
Prints each search, a table per round and the medians; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from orchestrator.loadgen.search import next_rate

CHUNKS = 32
PROMPT = "hello world how are you doing"
CAP = 256  # requests in flight, every client (past a ceiling, uncapped clients open 16k sockets)
# The send-lag bound of a holding point: a client that keeps up shows scheduler noise (a few ms here,
# more on a busy machine); one that falls behind accumulates lag (1% behind over 10 s is 100 ms).
LAG_P99_MS = 25.0
DELIVERED = 0.99  # the share of the target rate that must be delivered (client and server)
ROOT = Path(__file__).resolve().parents[1]
TOKENIZER = str(ROOT / ".cache" / "tiny-llama")
ORCH = [sys.executable, "-c", "from orchestrator.cli import main; main()"]


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
  log_format arrivals '$msec $request_time $status $request_uri';
  access_log {d}/access.log arrivals buffer=512k flush=1s;
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


@dataclass
class Nginx:
    url: str
    log: Path

    def arrivals(self, prefix: str) -> tuple[list[float], int]:
        """Arrival times (s) of the requests logged under `prefix`, and how many were not 200."""
        times, bad = [], 0
        with self.log.open() as f:
            for line in f:
                parts = line.split()
                if len(parts) == 4 and parts[3].startswith(prefix):
                    times.append(float(parts[0]) - float(parts[1]))
                    bad += parts[2] != "200"
        return sorted(times), bad


@contextmanager
def nginx_server() -> Iterator[Nginx]:
    exe = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if exe is None:
        sys.exit("nginx not found: apt-get install nginx (.ci/setup.d/10-nginx.sh)")
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o755)  # nginx workers run as an unprivileged user
        Path(d, "sse.txt").write_bytes(sse_body())
        Path(d, "nginx.conf").write_text(NGINX_CONF.format(d=d, port=port))
        proc = subprocess.Popen([exe, "-c", f"{d}/nginx.conf", "-p", d],
                                preexec_fn=_pin((os.cpu_count() or 1) - 1), stdout=subprocess.DEVNULL)
        try:
            end = time.monotonic() + 10
            while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
                if time.monotonic() > end:
                    raise RuntimeError("nginx did not start")
                time.sleep(0.05)
            yield Nginx(f"http://127.0.0.1:{port}", Path(d, "access.log"))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)


@dataclass
class Point:
    """One client's run at one target rate, judged on its own report and the server's log."""

    client: str
    rate: float
    duration_s: float
    n_sent: int = 0
    n_ok: int = 0
    n_failed: int = 0
    client_rate: float = 0.0
    client_lag_p99_ms: float | None = None
    server_n: int = 0
    server_bad: int = 0
    server_rate: float = 0.0
    server_lag_p99_ms: float = 0.0
    cpu_s: float = 0.0
    note: str = ""
    why: str = field(default="")

    def judge(self) -> str:
        need = DELIVERED * self.rate
        lag = max(self.server_lag_p99_ms, self.client_lag_p99_ms or 0.0)
        if self.note:
            self.why = self.note
        elif self.n_failed or self.n_ok < self.n_sent or self.n_sent < 2:
            self.why = f"{self.n_failed} failed, {self.n_ok}/{self.n_sent} completed"
        elif self.client_rate < need:
            self.why = f"delivered {self.client_rate:.0f}/s"
        elif self.server_n < self.n_sent or self.server_bad:
            self.why = f"server logged {self.server_n}/{self.n_sent} ({self.server_bad} not 200)"
        elif self.server_rate < need:
            self.why = f"server saw {self.server_rate:.0f}/s"
        elif lag > LAG_P99_MS:
            self.why = f"lag p99 {lag:.1f} ms"
        else:
            self.why = ""
        return self.why


def span_rate(times: list[float]) -> float:
    if len(times) < 2:
        return 0.0
    span = max(times) - min(times)
    return (len(times) - 1) / span if span > 0 else float("inf")


def lag_p99_ms(times: list[float], rate: float) -> float:
    """p99 of how late each of the sorted times is against a constant schedule at `rate` from the one
    that is earliest relative to it (so a client that starts late is not charged, one that drifts is)."""
    if len(times) < 2:
        return 0.0
    t = np.sort(np.asarray(times, dtype=np.float64))
    late = t - np.arange(len(t)) / rate
    return float(np.percentile(late - late.min(), 99) * 1e3)


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _run_child(argv: list[str], env: dict[str, str] | None, timeout_s: float, cwd: str | None = None
               ) -> tuple[int | None, float, str]:
    """(exit code or None on timeout, CPU seconds it used, the tail of its output)."""
    cpu0 = _children_cpu()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, preexec_fn=_pin(0), start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = None
    except BaseException:  # interrupted: the client (its own session) must not outlive the benchmark
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return code, _children_cpu() - cpu0, out.decode(errors="replace")[-2000:]


def orch_client(transport: str) -> Callable[[str, float, float, int | None, str], Point]:
    """`orch bench` with one transport; n_requests=2 is the start-up probe."""

    def run(url: str, rate: float, duration_s: float, n: int | None, d: str) -> Point:
        save = Path(d, "records.jsonl")
        argv = [*ORCH, "bench", "--base-url", url, "--model", "m", "--rate", f"{rate:g}", "--arrival",
                "constant", "--max-concurrency", str(CAP), "--input-len", "8", "--output-len", str(CHUNKS),
                "--json", "--save", str(save), "--max-error-rate", "1"]
        argv += ["--num-requests", str(n)] if n else ["--duration-s", f"{duration_s:g}"]
        env = dict(os.environ)
        env.pop("ORCH_LOADGEN_TRANSPORT", None)
        if transport != "http1":
            env["ORCH_LOADGEN_TRANSPORT"] = transport
        name = f"orch bench ({transport})"
        code, cpu, tail = _run_child(argv, env, duration_s * 6 + 120)
        p = Point(name, rate, duration_s, cpu_s=cpu)
        if code is None or not save.is_file():
            p.note = f"exit {code}: {tail[-300:]}"
            return p
        recs = [json.loads(line) for line in save.read_text().splitlines()]
        sent = [r["sent_s"] for r in recs]
        p.n_sent, p.n_ok = len(recs), sum(1 for r in recs if r["error"] is None)
        p.n_failed = p.n_sent - p.n_ok
        p.client_rate = span_rate(sent)
        lags = [r["sent_s"] - r["scheduled_s"] - r["queued_s"] for r in recs]
        p.client_lag_p99_ms = float(np.percentile(lags, 99) * 1e3) if lags else None
        return p

    return run


def bare_aiohttp(url: str, rate: float, duration_s: float, n: int | None, d: str) -> Point:
    out = Path(d, "bare.json")
    count = n or max(2, round(rate * duration_s))
    argv = [sys.executable, __file__, "--bare-client", url, f"{rate:g}", str(count), str(out)]
    code, cpu, tail = _run_child(argv, None, duration_s * 6 + 120)
    p = Point("bare aiohttp loop", rate, duration_s, cpu_s=cpu)
    if code != 0 or not out.is_file():
        p.note = f"exit {code}: {tail[-300:]}"
        return p
    recs = json.loads(out.read_text())
    p.n_sent, p.n_ok = len(recs), sum(1 for r in recs if r[3])
    p.n_failed = p.n_sent - p.n_ok
    p.client_rate = span_rate([r[1] for r in recs])
    p.client_lag_p99_ms = float(np.percentile([r[1] - r[0] for r in recs], 99) * 1e3)
    return p


def bare_client_main(url: str, rate: float, n: int, out: str) -> None:
    """The bare peer: schedule on absolute times, POST, read the whole body, parse nothing."""
    import aiohttp

    payload = json.dumps({"model": "m", "prompt": PROMPT, "max_tokens": CHUNKS, "stream": True})
    recs: list[tuple[float, float, float, bool]] = []

    async def main() -> None:
        sem = asyncio.Semaphore(CAP)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CAP)) as sess:

            async def one(at: float) -> None:
                async with sem:
                    sent = time.perf_counter()
                    ok = False
                    try:
                        async with sess.post(url + "/v1/completions", data=payload,
                                             headers={"Content-Type": "application/json"}) as r:
                            await r.read()
                            ok = r.status == 200
                    except (aiohttp.ClientError, OSError):
                        pass
                    recs.append((at, sent, time.perf_counter(), ok))

            start = time.perf_counter() + 0.05
            tasks = []
            for i in range(n):
                at = start + i / rate
                delay = at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(at)))
            await asyncio.gather(*tasks)

    asyncio.run(main())
    Path(out).write_text(json.dumps(recs))


def peer_client(tool: str, exe: str) -> Callable[[str, float, float, int | None, str], Point]:
    """A peer tool (bench/peers.py runs it and reads its own result files), pinned to core 0."""
    from peers import run_peer  # bench/peers.py, beside this script

    def run(url: str, rate: float, duration_s: float, n: int | None, d: str) -> Point:
        cpu0 = _children_cpu()
        p = Point(tool, rate, duration_s)
        try:
            # n given (the start-up probe): a point short enough for about n requests
            peer = run_peer(tool, exe, url, rate, n / rate if n else duration_s, CAP, TOKENIZER, _pin(0),
                            timeout_s=duration_s * 6 + 300)
        except RuntimeError as exc:
            p.note = str(exc)[-300:]
            return p
        finally:
            p.cpu_s = _children_cpu() - cpu0
        p.n_sent, p.n_ok, p.n_failed = peer.n_sent, peer.n_completed, peer.n_failed
        p.client_rate = peer.achieved_rate
        # A peer records no schedule: its lag is judged by the server's log alone.
        return p

    return run


Client = Callable[[str, float, float, int | None, str], Point]
_counter = iter(range(1, 1 << 30))


def measure(srv: Nginx, client: Client, rate: float, duration_s: float, n: int | None = None) -> Point:
    prefix = f"/p{next(_counter)}"
    with tempfile.TemporaryDirectory(prefix="orch-ceiling-") as d:
        p = client(srv.url + prefix, rate, duration_s, n, d)
    time.sleep(1.2)  # nginx flushes its log buffer every second
    arrivals, p.server_bad = srv.arrivals(prefix + "/")
    p.server_n = len(arrivals)
    if p.server_n > p.n_sent > 0:  # a tool's own probe requests before its run (vLLM sends some)
        arrivals = arrivals[-p.n_sent:]
    p.server_rate = span_rate(arrivals)
    p.server_lag_p99_ms = lag_p99_ms(arrivals, rate)
    p.judge()
    return p


def ceiling(srv: Nginx, name: str, client: Client, duration_s: float, start: float
            ) -> tuple[float | None, Point | None, float]:
    """(highest holding rate, its point, start-up CPU seconds of the client)."""
    probe = measure(srv, client, 50.0, 1.0, n=2)  # start-up cost (and a warm page cache)
    tried: list[tuple[float, bool]] = []
    best: Point | None = None
    while True:
        rate, _ = next_rate(tried, start_rate=start, min_rate=start / 32, max_rate=64000.0, rel_tol=0.05,
                            max_runs=14)
        if rate is None:
            break
        p = measure(srv, client, rate, duration_s)
        if p.why:
            p = measure(srv, client, rate, duration_s)  # once more: see the module docstring
        tried.append((rate, not p.why))
        lag = f"{p.client_lag_p99_ms:6.1f}" if p.client_lag_p99_ms is not None else "     -"
        print(f"  {name:<24} {rate:8.0f}/s  sent {p.n_sent:7d}  delivered {p.client_rate:8.0f}/s  "
              f"server {p.server_n:7d} at {p.server_rate:8.0f}/s  lag p99 client {lag} server "
              f"{p.server_lag_p99_ms:6.1f} ms  {'holds' if not p.why else p.why}", file=sys.stderr)
        if not p.why and (best is None or rate > best.rate):
            best = p
    return (best.rate if best else None), best, probe.cpu_s


def cpu_at(srv: Nginx, client: Client, rate: float, duration_s: float) -> tuple[float, Point]:
    """CPU microseconds per request of `client` at a rate every client holds (start-up subtracted),
    with the point itself (its lag and delivery)."""
    probe = measure(srv, client, 50.0, 1.0, n=2)
    p = measure(srv, client, rate, duration_s)
    return ((p.cpu_s - probe.cpu_s) / p.n_sent * 1e6 if p.n_sent else float("nan")), p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--duration-s", type=float, default=10.0, help="seconds per load point (>= 10 counts)")
    ap.add_argument("--rounds", type=int, default=3, help="searches per client, interleaved")
    ap.add_argument("--start-rate", type=float, default=800.0)
    ap.add_argument("--only", default="", help="client name prefixes, e.g. 'orch bench,bare'")
    ap.add_argument("--cpu-rate", type=float, default=200.0,
                    help="the rate of the CPU-per-request comparison (one every client holds)")
    ap.add_argument("--no-ceiling", action="store_true", help="only the CPU-per-request comparison")
    ap.add_argument("--bare-client", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.bare_client:
        url, rate, n, out = a.bare_client
        bare_client_main(url, float(rate), int(n), out)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so nginx is stopped too
    clients: list[tuple[str, Client]] = [
        ("orch bench (http1)", orch_client("http1")), ("orch bench (aiohttp)", orch_client("aiohttp")),
        ("bare aiohttp loop", bare_aiohttp),
    ]
    from peers import find_peers  # bench/peers.py: vllm bench serve (ORCH_VLLM_PYTHON), guidellm, aiperf

    peers = find_peers() if Path(TOKENIZER).is_dir() else {}
    clients += [(tool, peer_client(tool, exe)) for tool, exe in peers.items()]
    if "vllm bench serve" not in peers:
        print("vllm bench serve: not run (needs ORCH_VLLM_PYTHON and .cache/tiny-llama)", file=sys.stderr)
    if a.only:
        wanted = [w.strip() for w in a.only.split(",") if w.strip()]
        clients = [c for c in clients if any(c[0].startswith(w) for w in wanted)]
    load0 = os.getloadavg()
    results: dict[str, list[tuple[float | None, Point | None, float]]] = {n: [] for n, _ in clients}
    cpu: dict[str, list[tuple[float, Point]]] = {n: [] for n, _ in clients}
    with nginx_server() as srv:
        print(f"nginx (1 worker, core {(os.cpu_count() or 1) - 1}) at {srv.url}; clients on core 0; "
              f"{a.duration_s:g} s points", file=sys.stderr)
        for rnd in range(a.rounds):
            for name, client in clients:
                us, p = cpu_at(srv, client, a.cpu_rate, a.duration_s)
                cpu[name].append((us, p))
                print(f"round {rnd + 1}: {name} at {a.cpu_rate:g}/s: {us:.0f} us CPU a request, "
                      f"{p.why or 'holds'}", file=sys.stderr)
                if not a.no_ceiling:
                    print(f"round {rnd + 1}: {name}", file=sys.stderr)
                    results[name].append(ceiling(srv, name, client, a.duration_s, a.start_rate))
    load1 = os.getloadavg()
    print(f"\nCPU per request at {a.cpu_rate:g} req/s ({a.duration_s:g}-s points, start-up subtracted), "
          f"median of {a.rounds}; send lag against a constant schedule, median p50/p99 of the rounds")
    print(f"{'client':<24} {'CPU us/req by round':>26} {'median':>7} {'lag p99 ms client/server':>25} "
          f"{'held':>6}")
    for name, rows in cpu.items():
        uss = [us for us, _ in rows]
        lags_c = [p.client_lag_p99_ms for _, p in rows if p.client_lag_p99_ms is not None]
        lags_s = [p.server_lag_p99_ms for _, p in rows]
        lag = (f"{statistics.median(lags_c):.1f}" if lags_c else "-") + f" / {statistics.median(lags_s):.1f}"
        held = sum(1 for _, p in rows if not p.why)
        print(f"{name:<24} {', '.join(f'{u:.0f}' for u in uss):>26} {statistics.median(uss):>7.0f} "
              f"{lag:>25} {held:>3}/{len(rows)}")
    if a.no_ceiling:
        return
    print(f"\nceiling = highest constant rate held over {a.duration_s:g}-s points: all completed, >= "
          f"{DELIVERED:.0%} delivered by the client's send times and in nginx's access log, send lag p99 "
          f"<= {LAG_P99_MS:g} ms (server log; and client records where kept); {a.rounds} round(s); "
          f"{os.cpu_count()} cores; load average {load0[0]:.2f} before, {load1[0]:.2f} after")
    print(f"{'client':<24} {'ceilings by round (req/s)':>30} {'median':>8} {'CPU us/req':>11} "
          f"{'lag p99 ms client/server':>25}")
    medians: dict[str, float] = {}
    for name, rows in results.items():
        rates = [r or 0.0 for r, _, _ in rows]
        medians[name] = statistics.median(rates) if rates else 0.0
        cpus = [(p.cpu_s - startup) / p.n_sent * 1e6 for _, p, startup in rows if p is not None and p.n_sent]
        lags = [p for _, p, _ in rows if p is not None]
        lag = (f"{statistics.median(p.client_lag_p99_ms or 0.0 for p in lags):.1f} / "
               f"{statistics.median(p.server_lag_p99_ms for p in lags):.1f}") if lags else "-"
        cpu = f"{statistics.median(cpus):.0f}" if cpus else "-"
        by_round = ", ".join(f"{r:,.0f}" for r in rates)
        print(f"{name:<24} {by_round:>30} {medians[name]:>8,.0f} {cpu:>11} {lag:>25}")
    ours = medians.get("orch bench (http1)")
    if ours:
        print("ratios of medians, orch bench (http1) / each: " + ", ".join(
            f"{n} {ours / m:.2f}" for n, m in medians.items() if m and n != "orch bench (http1)"))


if __name__ == "__main__":
    main()
