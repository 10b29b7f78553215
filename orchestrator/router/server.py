"""`python -m orchestrator.router`: the prefill/decode router, OpenAI-compatible, with a balancing policy.

POST /v1/completions and /v1/chat/completions go to one prefill server and one decode server chosen by
the policy (round robin, or the fewest requests in flight), as the engine's protocol wants them
(router/protocol.py); the decode server's answer streams back byte for byte, so a client measures the
three-role deployment exactly as it measures one engine. GET /health is 200 only when every backend's
/health is; /v1/models is the first decode server's; /metrics holds the router's own counters (requests,
failures, seconds spent waiting for prefill answers, requests in flight per backend).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import aiohttp
from aiohttp import web

from orchestrator.loadgen.balance import BALANCE_KINDS, Balance, Balancer
from orchestrator.router.protocol import (
    PROTOCOLS,
    SGLANG_BOOTSTRAP_PORT,
    Protocol,
    sglang_bodies,
    vllm_decode_body,
    vllm_prefill_body,
)

HEALTH_TIMEOUT_S = 5.0  # SGLang's /health waits at least 1 s before answering
HEALTH_CACHE_S = 0.5


@dataclass
class Router:
    prefill: tuple[str, ...]  # base URLs, http://host:port
    decode: tuple[str, ...]
    policy: Balance = "least_outstanding"
    protocol: Protocol = "vllm"
    bootstrap_ports: tuple[int, ...] = ()  # sglang: one per prefill server
    session: aiohttp.ClientSession | None = None
    p_balance: Balancer = field(init=False)
    d_balance: Balancer = field(init=False)
    requests_total: int = 0
    failures_total: int = 0
    prefill_s_sum: float = 0.0
    in_flight: int = 0
    health_at: float = -1.0
    health_ok: tuple[bool, str] = (False, "")

    def __post_init__(self) -> None:
        if not self.prefill or not self.decode:
            raise ValueError("the router needs at least one prefill and one decode server")
        self.p_balance = Balancer(len(self.prefill), self.policy)
        self.d_balance = Balancer(len(self.decode), self.policy)
        if self.protocol == "sglang" and not self.bootstrap_ports:
            self.bootstrap_ports = (SGLANG_BOOTSTRAP_PORT,) * len(self.prefill)
        if self.protocol == "sglang" and len(self.bootstrap_ports) != len(self.prefill):
            raise ValueError("give one bootstrap port per prefill server")

    def client(self) -> aiohttp.ClientSession:
        if self.session is None:
            self.session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None),
                connector=aiohttp.TCPConnector(limit=0, force_close=False))
        return self.session

    # -- requests ----------------------------------------------------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._route(request, "/v1/completions")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._route(request, "/v1/chat/completions")

    async def _route(self, request: web.Request, path: str) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "request body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        self.requests_total += 1
        self.in_flight += 1
        headers = {"X-Request-Id": request.headers.get("X-Request-Id") or uuid.uuid4().hex}
        if "Authorization" in request.headers:
            headers["Authorization"] = request.headers["Authorization"]
        p = self.p_balance.acquire()
        d = -1
        try:
            if self.protocol == "vllm":
                started = time.perf_counter()
                answer = await self._prefill_vllm(p, path, body, headers)
                self.prefill_s_sum += time.perf_counter() - started
                if isinstance(answer, web.Response):
                    self.failures_total += 1
                    return answer
                self.p_balance.release(p)
                p = -1
                d = self.d_balance.acquire()
                decode_body = vllm_decode_body(body, answer)
                return await self._relay(request, self.decode[d] + path, decode_body, headers)
            d = self.d_balance.acquire()
            host = self.prefill[p].split("://", 1)[-1].rsplit(":", 1)[0]
            p_body, d_body = sglang_bodies(body, host, self.bootstrap_ports[p])
            prefill_task = asyncio.create_task(self._drain(self.prefill[p] + path, p_body, headers))
            try:
                return await self._relay(request, self.decode[d] + path, d_body, headers)
            finally:
                await prefill_task
        except aiohttp.ClientError as exc:
            self.failures_total += 1
            return _error(502, f"backend unreachable: {exc}")
        finally:
            self.in_flight -= 1
            if p >= 0:
                self.p_balance.release(p)
            if d >= 0:
                self.d_balance.release(d)

    async def _prefill_vllm(self, p: int, path: str, body: dict[str, Any],
                            headers: dict[str, str]) -> dict[str, Any] | web.Response:
        async with self.client().post(self.prefill[p] + path, json=vllm_prefill_body(body),
                                      headers=headers) as resp:
            raw = await resp.read()
            if resp.status != 200:
                return web.Response(status=resp.status, body=raw, content_type="application/json")
            try:
                answer = await resp.json(content_type=None)
            except ValueError:
                return _error(502, f"prefill server {self.prefill[p]} answered something that is not JSON")
        return answer if isinstance(answer, dict) else {}

    async def _drain(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> None:
        """SGLang's prefill half: its answer is read and dropped (the decode half carries the output)."""
        try:
            async with self.client().post(url, json=body, headers=headers) as resp:
                await resp.read()
        except aiohttp.ClientError:
            self.failures_total += 1

    async def _relay(self, request: web.Request, url: str, body: dict[str, Any],
                     headers: dict[str, str]) -> web.StreamResponse:
        async with self.client().post(url, json=body, headers=headers) as resp:
            if resp.status != 200:
                self.failures_total += 1
            out = web.StreamResponse(status=resp.status, headers={
                "Content-Type": resp.headers.get("Content-Type", "application/json"),
                "Cache-Control": "no-cache"})
            await out.prepare(request)
            async for chunk in resp.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    # -- the rest of the API -----------------------------------------------------------------------
    async def health(self, _: web.Request) -> web.Response:
        now = time.monotonic()
        if now - self.health_at > HEALTH_CACHE_S:
            self.health_ok = await self._check_backends()
            self.health_at = now
        ok, why = self.health_ok
        return web.Response(text="ok") if ok else web.Response(status=503, text=why)

    async def _check_backends(self) -> tuple[bool, str]:
        urls = [*(("prefill", u) for u in self.prefill), *(("decode", u) for u in self.decode)]

        async def one(url: str) -> int:
            try:
                async with self.client().get(url + "/health",
                                             timeout=aiohttp.ClientTimeout(total=HEALTH_TIMEOUT_S)) as resp:
                    return resp.status
            except (TimeoutError, aiohttp.ClientError):
                return -1

        codes = await asyncio.gather(*(one(u) for _, u in urls))
        down = [f"{role} {u} ({'no answer' if c < 0 else c})"
                for (role, u), c in zip(urls, codes, strict=True) if c != 200]
        return (not down, "not ready: " + ", ".join(down) if down else "")

    async def models(self, _: web.Request) -> web.Response:
        try:
            async with self.client().get(self.decode[0] + "/v1/models") as resp:
                raw = await resp.read()
                return web.Response(status=resp.status, body=raw, content_type="application/json")
        except aiohttp.ClientError as exc:
            return _error(502, f"decode server unreachable: {exc}")

    async def metrics(self, _: web.Request) -> web.Response:
        lines = [
            "# TYPE orch_router_requests_total counter", f"orch_router_requests_total {self.requests_total}",
            "# TYPE orch_router_failures_total counter", f"orch_router_failures_total {self.failures_total}",
            "# TYPE orch_router_prefill_seconds_sum counter",
            f"orch_router_prefill_seconds_sum {self.prefill_s_sum:.6f}",
            "# TYPE orch_router_in_flight gauge", f"orch_router_in_flight {self.in_flight}",
            "# TYPE orch_router_backend_in_flight gauge",
        ]
        pools = (("prefill", self.prefill, self.p_balance), ("decode", self.decode, self.d_balance))
        for role, urls, bal in pools:
            for url, n in zip(urls, bal.outstanding, strict=True):
                lines.append(f'orch_router_backend_in_flight{{role="{role}",backend="{url}"}} {n}')
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "router_error", "code": status}},
                             status=status)


def build_app(router: Router) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/completions", router.completions)
    app.router.add_post("/v1/chat/completions", router.chat)
    app.router.add_get("/health", router.health)
    app.router.add_get("/v1/models", router.models)
    app.router.add_get("/metrics", router.metrics)

    async def close(_: web.Application) -> None:
        await router.close()

    app.on_cleanup.append(close)
    return app


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message}; see {self.prog} --help\n")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = _OneLineParser(prog="orch router", description=__doc__.split("\n")[0])
    p.add_argument("--prefill", action="append", required=True, metavar="URL",
                   help="a prefill server's base URL (repeat for each)")
    p.add_argument("--decode", action="append", required=True, metavar="URL",
                   help="a decode server's base URL (repeat for each)")
    p.add_argument("--policy", choices=BALANCE_KINDS, default="least_outstanding")
    p.add_argument("--protocol", choices=PROTOCOLS, default="vllm", help="the engines' PD protocol")
    p.add_argument("--bootstrap-port", action="append", type=int, default=[], metavar="PORT",
                   help=f"sglang: each prefill server's KV bootstrap port (default {SGLANG_BOOTSTRAP_PORT})")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args(argv)
    for url in (*args.prefill, *args.decode):
        if not url.startswith(("http://", "https://")):
            p.error(f"{url!r} is not a base URL such as http://127.0.0.1:8100")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        router = Router(tuple(u.rstrip("/") for u in args.prefill),
                        tuple(u.rstrip("/") for u in args.decode), policy=args.policy,
                        protocol=args.protocol, bootstrap_ports=tuple(args.bootstrap_port))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    ready = (f"orch router: {len(args.prefill)} prefill + {len(args.decode)} decode ({args.protocol}, "
             f"{args.policy}), OpenAI API at http://{args.host}:{args.port}/v1")
    web.run_app(build_app(router), host=args.host, port=args.port, access_log=None, handle_signals=True,
                print=lambda _: print(ready, file=sys.stderr, flush=True))
