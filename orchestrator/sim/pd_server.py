"""`python -m orchestrator.sim.pd_server --role prefill|decode ...`: the simulated server in one PD role.

It speaks vLLM's disaggregated protocol (the NIXL connector's, as vLLM's toy proxy drives it):
- prefill role: a request whose `kv_transfer_params` has `do_remote_decode` runs its prompt (the
  router sends max_tokens 1), and the answer carries `kv_transfer_params` naming this engine, the
  request and the prompt's length (`remote_engine_id`, `remote_request_id`, `remote_host`,
  `remote_port`, `tp_size`, `pp_size`, `remote_num_tokens`, as vLLM 0.33's
  nixl/pull_scheduler.py `request_finished` returns them). The prompt's KV stays allocated until a
  decode server pulls it, or until its lease (`kv_lease_duration`, vLLM's default 30 s, renewed by the
  decode side's heartbeats) runs out;
- decode role: a request whose `kv_transfer_params` has `do_remote_prefill` waits for KV room and a
  sequence slot on an engine, then pulls the KV from the prefill server (POST /orch/kv on it: the
  simulated stand-in for NIXL's RDMA read and its completion notification), which takes the transfer
  time of plan/kv_transfer.py on this server's link (`--kv-link`), one transfer at a time per engine
  on each side; then the engine's next step emits the first token.
SGLang's protocol works too: both servers get the request with `bootstrap_host`/`bootstrap_port`/
`bootstrap_room` (the port being the prefill server's HTTP port here); the prefill role computes the
prompt and one token, the decode role reserves KV, waits until the prefill holds the room's KV, pulls it.
A request with neither is served whole, as a vLLM kv_producer or kv_consumer serves it.
All other flags are those of `orchestrator.sim.server` (sim/server_flags.py). /metrics adds
`orch_sim_kv_*` counters.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from orchestrator.errors import OrchError, SpecError
from orchestrator.layout import Layout
from orchestrator.plan.dtypes import kv_bytes_per_value
from orchestrator.plan.kv_transfer import transfer_time_fn
from orchestrator.sim.engine import EngineCore, Seq
from orchestrator.sim.pd_engines import DecodeCore, PrefillCore
from orchestrator.sim.server_flags import parse_args, server_from_args
from orchestrator.sim.serving import SimServer, build_app

KV_LEASE_S = 30.0  # vLLM 0.33 NixlConnector kv_lease_duration default (nixl/base_scheduler.py)
KV_PATH = "/orch/kv"


def _with_metrics(base: web.Response, extra: list[tuple[str, str, float]]) -> web.Response:
    """The simulated server's /metrics page with this role's metrics appended (Prometheus text)."""
    lines = [line for kind, name, value in extra for line in (f"# TYPE {name} {kind}", f"{name} {value:g}")]
    return web.Response(text=(base.text or "") + "\n".join(lines) + "\n", content_type="text/plain")


def _params(body: dict[str, Any]) -> dict[str, Any]:
    params = body.get("kv_transfer_params")
    return params if isinstance(params, dict) else {}


@dataclass(frozen=True)
class _Source:
    """Where a decode request's KV waits: the prefill server and the key it knows the request by."""

    host: str
    port: int
    key: dict[str, Any]
    tp: int | None = None  # the prefill engine's layout, when the request says (vLLM's tp_size, pp_size)
    pp: int | None = None


def _source(body: dict[str, Any]) -> _Source | None:
    """vLLM: `kv_transfer_params` with `do_remote_prefill`; SGLang: `bootstrap_host/port/room` (here the
    prefill server's HTTP port serves the bootstrap, as SGLang's Rust server does); else None."""
    params = _params(body)
    if params.get("do_remote_prefill"):
        return _Source(str(params.get("remote_host")), int(params.get("remote_port") or 0),
                       {"remote_request_id": params.get("remote_request_id")},
                       int(params.get("tp_size") or 1), int(params.get("pp_size") or 1))
    if body.get("bootstrap_room") is not None and body.get("bootstrap_host"):
        return _Source(str(body["bootstrap_host"]), int(body.get("bootstrap_port") or 0),
                       {"bootstrap_room": body["bootstrap_room"]})
    return None


class PrefillRole(SimServer):
    """Prefill role: holds each handed-over prompt's KV until it is pulled or its lease ends."""

    def __init__(self, engines: list[EngineCore], *, host: str, port: int, engine_id: str,
                 lease_s: float = KV_LEASE_S, **kw: Any) -> None:
        super().__init__(engines, **kw)
        self.host, self.port, self.engine_id, self.lease_s = host, port, engine_id, lease_s
        self.remote: dict[str, int] = {}  # request id -> engine, for requests a decode server will pull
        # request id -> (engine, KV tokens, lease timer)
        self.held: dict[str, tuple[int, int, asyncio.TimerHandle | None]] = {}
        self.send_free = [0.0] * len(engines)  # loop time each engine's send link is free again
        self.pulled_total = self.expired_total = 0
        self.rooms: dict[str, str] = {}  # SGLang bootstrap room -> request id
        self.room_ready: dict[str, asyncio.Event] = {}  # set once the room's KV is held

    async def enqueue(self, e: int, seq: Seq, body: dict[str, Any], arrived: float) -> None:
        room = body.get("bootstrap_room")
        if _params(body).get("do_remote_decode") or room is not None:
            self.remote[seq.request_id] = e
        if room is not None:
            # SGLang's prefill server computes the prompt and its first token only; the router drops
            # its answer and the decode server, sent the same request, streams the rest.
            seq.max_tokens = 1
            self.rooms[str(room)] = seq.request_id
        await super().enqueue(e, seq, body, arrived)

    def after_step(self, e: int, finished: list[Seq]) -> None:
        eng = self.engines[e]
        assert isinstance(eng, PrefillCore)
        for seq in finished:
            if self.remote.get(seq.request_id) == e:
                eng.hold(seq.prompt_tokens)
                self.held[seq.request_id] = (e, seq.prompt_tokens, self._lease(seq.request_id))
                self.wake[e].set()
                for room, rid in self.rooms.items():
                    if rid == seq.request_id:
                        self.room_ready.setdefault(room, asyncio.Event()).set()

    def _lease(self, rid: str) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(self.lease_s * self.time_scale, self._expire, rid)

    def _expire(self, rid: str) -> None:
        if rid in self.held:
            self.expired_total += 1
            self._release(rid)

    def _release(self, rid: str) -> None:
        e, tokens, lease = self.held.pop(rid)
        self.remote.pop(rid, None)
        if lease is not None:
            lease.cancel()
        eng = self.engines[e]
        assert isinstance(eng, PrefillCore)
        eng.release(tokens)
        self.wake[e].set()  # a prompt waiting for KV may fit now
        for room in [room for room, r in self.rooms.items() if r == rid]:
            del self.rooms[room]
            self.room_ready.pop(room, None)

    def response_fields(self, seq: Seq) -> dict[str, Any]:
        e = self.remote.get(seq.request_id)
        if e is None:
            return {}
        shape = self.engines[e].cost.layout
        return {"kv_transfer_params": {
            "do_remote_prefill": True, "do_remote_decode": False,
            "remote_engine_id": f"{self.engine_id}-dp{e}", "remote_request_id": seq.request_id,
            "remote_host": self.host, "remote_port": self.port,
            "remote_block_ids": list(range(-(-seq.prompt_tokens // self.engines[e].config.block_tokens))),
            "tp_size": shape.tp, "pp_size": shape.pp, "remote_num_tokens": seq.prompt_tokens}}

    async def kv(self, request: web.Request) -> web.Response:
        """POST /orch/kv {"remote_request_id" | "bootstrap_room", "action", "seconds"}; action "wait"
        (SGLang: the decode side asks before the prefill is done) answers once the KV is held, with
        this engine's TP and PP; "heartbeat" renews the lease; "pull" takes the transfer time."""
        body = await request.json()
        rid = body.get("remote_request_id")
        if "bootstrap_room" in body:
            room = str(body["bootstrap_room"])
            if body.get("action") == "wait":
                ready = self.room_ready.setdefault(room, asyncio.Event())
                try:
                    await asyncio.wait_for(ready.wait(), self.lease_s * self.time_scale)
                except TimeoutError:
                    return web.json_response({"error": f"bootstrap room {room} never arrived"}, status=404)
            rid = self.rooms.get(room)
            if rid is None and body.get("action") == "heartbeat":
                return web.json_response({"ok": True})  # the prefill is still to come
        if body.get("action") == "wait" and rid in self.held:
            shape = self.engines[self.held[rid][0]].cost.layout
            return web.json_response({"tp_size": shape.tp, "pp_size": shape.pp,
                                      "remote_num_tokens": self.held[rid][1]})
        if rid not in self.held:
            return web.json_response({"error": f"no KV held for {rid!r} (pulled, or its lease expired)"},
                                     status=404)
        e, tokens, lease = self.held[rid]
        if lease is not None:
            lease.cancel()
        if body.get("action") != "pull":
            self.held[rid] = (e, tokens, self._lease(rid))
            return web.json_response({"ok": True})
        self.held[rid] = (e, tokens, None)  # being read: no lease while the transfer runs
        loop = asyncio.get_running_loop()
        start = max(loop.time(), self.send_free[e])
        end = start + float(body.get("seconds", 0.0)) * self.time_scale
        self.send_free[e] = end
        await asyncio.sleep(max(0.0, end - loop.time()))
        self.pulled_total += 1
        self._release(rid)
        return web.json_response({"ok": True})

    async def metrics(self, request: web.Request) -> web.Response:
        base = await super().metrics(request)
        held = sum(t for _, t, _ in self.held.values())
        return _with_metrics(base, [("gauge", "orch_sim_kv_held_tokens", held),
                                    ("counter", "orch_sim_kv_pulled_total", self.pulled_total),
                                    ("counter", "orch_sim_kv_expired_total", self.expired_total)])


class DecodeRole(SimServer):
    """Decode role: reserves KV, pulls it from the prefill server named in the request, then decodes."""

    def __init__(self, engines: list[EngineCore], *, transfer_s: Callable[[int, int, int], float],
                 lease_s: float = KV_LEASE_S, **kw: Any) -> None:
        super().__init__(engines, **kw)
        self.transfer_s = transfer_s  # (prompt tokens, prefill TP, prefill PP) -> simulated seconds
        self.lease_s = lease_s
        self.room: list[deque[tuple[int, asyncio.Future[None]]]] = [deque() for _ in engines]
        self.recv = [asyncio.Lock() for _ in engines]
        self.session: aiohttp.ClientSession | None = None
        self.transfers_total = 0
        self.transfer_s_sum = self.wait_s_sum = 0.0  # simulated seconds

    def _pick(self) -> int:
        return min(range(len(self.engines)), key=lambda i: self.engines[i].outstanding + len(self.room[i]))

    async def enqueue(self, e: int, seq: Seq, body: dict[str, Any], arrived: float) -> None:
        source = _source(body)
        if source is None:
            await super().enqueue(e, seq, body, arrived)
            return
        eng = self.engines[e]
        assert isinstance(eng, DecodeCore)
        loop = asyncio.get_running_loop()
        waited_from = loop.time()
        if self.room[e] or not eng.has_room(seq.prompt_tokens):
            fut: asyncio.Future[None] = loop.create_future()
            self.room[e].append((seq.prompt_tokens, fut))
            beat = asyncio.create_task(self._heartbeats(source))
            try:
                await fut  # _admit reserves the KV before it wakes this request
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    eng.cancel_reservation(seq.prompt_tokens)
                else:
                    self.room[e] = deque(x for x in self.room[e] if x[1] is not fut)
                raise
            finally:
                beat.cancel()
        else:
            eng.reserve(seq.prompt_tokens)
        try:
            tp, pp = source.tp, source.pp
            if tp is None or pp is None:  # SGLang: learn the prefill's layout once its KV is there
                info = await self._call(source, {"action": "wait"})
                tp, pp = int(info.get("tp_size") or 1), int(info.get("pp_size") or 1)
            seconds = self.transfer_s(seq.prompt_tokens, tp, pp)
            async with self.recv[e]:
                self.wait_s_sum += (loop.time() - waited_from) / self.time_scale
                await self._call(source, {"action": "pull", "seconds": seconds})
            self.transfer_s_sum += seconds
            self.transfers_total += 1
        except BaseException:
            eng.cancel_reservation(seq.prompt_tokens)
            self._admit(e)
            raise
        if not eng.has_work():
            self.arrived[e] = loop.time()
        eng.arrive(seq)
        self.wake[e].set()

    async def _heartbeats(self, source: _Source) -> None:
        """Keep the prefill side's lease while this request waits for room (vLLM's decode heartbeats)."""
        while True:
            await asyncio.sleep(self.lease_s * self.time_scale / 6)
            try:
                await self._call(source, {"action": "heartbeat"})
            except (aiohttp.ClientError, web.HTTPException):
                return  # the pull reports the failure

    async def _call(self, source: _Source, body: dict[str, Any]) -> dict[str, Any]:
        if self.session is None:
            self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        url = f"http://{source.host}:{source.port}{KV_PATH}"
        async with self.session.post(url, json={**source.key, **body}) as resp:
            if resp.status != 200:
                raise web.HTTPInternalServerError(text=f"KV transfer from {url} failed: {await resp.text()}")
            answer = await resp.json()
        return answer if isinstance(answer, dict) else {}

    def after_step(self, e: int, finished: list[Seq]) -> None:
        if finished:
            self._admit(e)

    def _admit(self, e: int) -> None:
        eng, room = self.engines[e], self.room[e]
        assert isinstance(eng, DecodeCore)
        while room and eng.has_room(room[0][0]):
            tokens, fut = room.popleft()
            if fut.done():
                continue
            eng.reserve(tokens)
            fut.set_result(None)

    async def metrics(self, request: web.Request) -> web.Response:
        base = await super().metrics(request)
        return _with_metrics(base, [("counter", "orch_sim_kv_transfers_total", self.transfers_total),
                                    ("counter", "orch_sim_kv_transfer_seconds_sum", self.transfer_s_sum),
                                    ("counter", "orch_sim_kv_wait_seconds_sum", self.wait_s_sum),
                                    ("gauge", "orch_sim_kv_waiting", sum(len(r) for r in self.room))])

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


def _role_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="orch sim pd-serve", add_help=False)
    p.add_argument("--role", choices=("prefill", "decode"), required=True)
    p.add_argument("--kv-link", choices=("intra_node", "inter_node"), default="intra_node",
                   help="decode: the link KV arrives over (NVLink in one node, the network otherwise)")
    p.add_argument("--kv-lease-s", type=float, default=KV_LEASE_S,
                   help="prefill: simulated seconds a handed-over prompt's KV waits to be pulled")
    return p


def role_server(argv: Sequence[str] | None = None) -> tuple[SimServer, argparse.Namespace]:
    role_args, rest = _role_parser().parse_known_args(argv)
    args = parse_args(rest)
    base = server_from_args(args)
    kw: dict[str, Any] = {"model_name": base.model_name, "time_scale": base.time_scale,
                          "startup_s": max(0.0, base.ready_at - time.monotonic()),
                          "max_model_len": base.max_model_len}
    if role_args.kv_lease_s <= 0:
        raise SpecError("--kv-lease-s must be > 0")
    if role_args.role == "prefill":
        engines: list[EngineCore] = [PrefillCore(e.cost, e.config) for e in base.engines]
        server: SimServer = PrefillRole(engines, host=args.host, port=args.port,
                                        engine_id=f"orch-sim-{args.host}-{args.port}",
                                        lease_s=role_args.kv_lease_s, **kw)
    else:
        engines = [DecodeCore(e.cost, e.config) for e in base.engines]
        cost = engines[0].cost
        link = getattr(cost.gpu, role_args.kv_link)
        per_value = kv_bytes_per_value("bf16" if args.kv_cache_dtype == "auto" else args.kv_cache_dtype)
        fns: dict[tuple[int, int], Callable[[int], float]] = {}

        def transfer_s(tokens: int, tp: int, pp: int) -> float:
            if (tp, pp) not in fns:
                fns[tp, pp] = transfer_time_fn(cost.cfg, per_value, Layout(tp=tp, pp=pp), cost.layout, link)
            return fns[tp, pp](tokens)

        server = DecodeRole(engines, transfer_s=transfer_s, lease_s=role_args.kv_lease_s, **kw)
    server.exit_after = base.exit_after
    return server, args


def build_role_app(server: SimServer) -> web.Application:
    app = build_app(server)
    if isinstance(server, PrefillRole):
        app.router.add_post(KV_PATH, server.kv)
    if isinstance(server, DecodeRole):
        async def close(_: web.Application) -> None:
            await server.close()

        app.on_cleanup.append(close)
    return app


def main(argv: Sequence[str] | None = None) -> None:
    try:
        server, args = role_server(argv)
    except OrchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    role = "prefill" if isinstance(server, PrefillRole) else "decode"
    ready = (f"orch sim pd-serve: {role} {args.model} {args.layout} on {args.gpu}, OpenAI API at "
             f"http://{args.host}:{args.port}/v1")
    web.run_app(build_role_app(server), host=args.host, port=args.port, access_log=None, handle_signals=True,
                print=lambda _: print(ready, file=sys.stderr, flush=True))


if __name__ == "__main__":
    main()
