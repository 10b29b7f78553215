"""The simulated server's core: one loop per engine on the wall clock, and the OpenAI HTTP API on top.

Tokens are released at the simulated step times, stretched by `time_scale` (wall seconds per
virtual second; 0.1 runs ten times faster than real time, and whoever measures divides by it).
`/health` answers 503 until `startup_s` wall seconds have passed (model loading). `/metrics`
exposes vLLM-named gauges and counters. Every completion is exactly `max_tokens` long (as vLLM with
`ignore_eos`): a performance model has no text to end early. Its text is " tok" per token.

Prefix caching: the engine tokenizes a prompt one token per word (openai_format.prompt_tokens), hashes
it per block, and reuses what it has cached (sim/prefix_cache.py); its counters are vLLM's
`vllm:prefix_cache_queries_total` and `vllm:prefix_cache_hits_total`. Under guaranteed-no-evict the
server reuses whole blocks only (it sees words, not the segments a partial match is found in).
The command line that builds one is sim/server_flags.py; the process, sim/server.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from orchestrator.sim.engine import EngineCore, Seq
from orchestrator.sim.openai_format import block_hashes, error, prompt_tokens, sse, token_text, usage
from orchestrator.sim.speculative import SpecDecodeCounters

DEFAULT_MAX_TOKENS = 16  # vLLM's default for /v1/completions
RESYNC_S = 0.05  # wall seconds behind the simulated clock after which the engine loop restarts it


@dataclass
class _Stream:
    seq: Seq
    queue: asyncio.Queue[int] = field(default_factory=asyncio.Queue)  # tokens emitted; -1 = finished


class SimServer:
    def __init__(self, engines: list[EngineCore], *, model_name: str, time_scale: float, startup_s: float,
                 max_model_len: int) -> None:
        self.engines = engines
        self.model_name = model_name
        self.time_scale = time_scale
        self.ready_at = time.monotonic() + startup_s
        self.max_model_len = max_model_len
        self.streams: dict[str, _Stream] = {}
        self.wake = [asyncio.Event() for _ in engines]
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_total = 0
        self.tasks: list[asyncio.Task[None]] = []
        self.exit_after: int | None = None
        spec = engines[0].spec if engines else None
        self.spec_counters = SpecDecodeCounters(spec.k) if spec is not None else None
        self.arrived = [0.0] * len(engines)  # when the request that woke an idle engine arrived
        self.accepted = 0
        self.behind_s_sum = 0.0  # wall seconds the engine loops started steps late, summed
        self.steps_total = 0
        self.lost_s_sum = 0.0  # wall seconds lost to clock restarts after falling too far behind
        self.step_s_sum = 0.0  # simulated seconds of all steps

    # -- engine loops ------------------------------------------------------------------------------
    async def run_engine(self, e: int) -> None:
        eng, wake, loop = self.engines[e], self.wake[e], asyncio.get_running_loop()
        step_end, was_idle = 0.0, True
        while True:
            if not eng.has_work():
                wake.clear()
                await wake.wait()
                was_idle = True
                continue
            # A busy engine starts each step when the last one ended on the simulated clock, not when
            # this loop got round to it: epoll wakes sleeps up to 1 ms late, and handing out tokens takes
            # time; neither may stretch the steps. Only after idling (or falling far behind) does the
            # clock restart from now.
            now = loop.time()
            if was_idle:
                # An idle engine starts when the request arrived, not when this loop woke up.
                start = min(now, self.arrived[e]) if self.arrived[e] else now
            else:
                start = now if now - step_end > RESYNC_S else step_end
            if not was_idle:
                # How late this step's tokens go out (jitter), and the time lost when the loop gave up
                # catching up (drift): the harness's own error, reported on /metrics.
                late = max(0.0, now - step_end)
                self.steps_total += 1
                if late > RESYNC_S:
                    self.lost_s_sum += late
                else:
                    self.behind_s_sum += late
            was_idle = False
            plan = eng.schedule()
            if plan.tokens == 0:
                # Work is queued but nothing can run (a prefill role's KV is held for transfers): wait
                # for whatever frees room to wake the loop, instead of spinning on empty steps.
                wake.clear()
                await wake.wait()
                was_idle = True
                continue
            # The step's wall time is fixed when it starts; new arrivals join the next step.
            step_s = eng.step_time_s(plan)
            self.step_s_sum += step_s
            step_end = start + step_s * self.time_scale
            await _sleep_until(loop, step_end)
            if eng.spec is None:
                for rid in eng.decoding:
                    self._emit(rid, 1)
            else:  # speculative decoding: a burst of tokens per sequence
                counters = self.spec_counters
                assert counters is not None
                for rid, seq in eng.decoding.items():
                    burst = eng.tokens_in_step(seq, plan.index)
                    counters.add(burst)
                    self._emit(rid, burst)
            started, finished = eng.complete(plan)
            for seq in started:
                self._emit(seq.request_id, 1)
            for seq in finished:
                stream = self.streams.get(seq.request_id)
                if stream is not None:
                    stream.queue.put_nowait(-1)
            self.after_step(e, finished)

    # -- hooks for the prefill and decode roles (sim/pd_server.py) ---------------------------------
    async def enqueue(self, e: int, seq: Seq, body: dict[str, Any], arrived: float) -> None:
        """Hand `seq` to engine `e` (a decode role first waits for KV room and the transfer)."""
        if not self.engines[e].has_work():
            self.arrived[e] = arrived
        self.engines[e].add(seq)
        self.wake[e].set()

    def after_step(self, e: int, finished: list[Seq]) -> None:
        """Engine `e` completed a step in which `finished` ended (a prefill role holds their KV)."""

    def response_fields(self, seq: Seq) -> dict[str, Any]:
        """Fields added to a whole response and to a stream's last chunk (kv_transfer_params)."""
        return {}

    def _emit(self, rid: str, n: int) -> None:
        self.generation_tokens_total += n
        stream = self.streams.get(rid)
        if stream is not None:
            stream.queue.put_nowait(n)

    def _pick(self) -> int:
        return min(range(len(self.engines)), key=lambda i: self.engines[i].outstanding)

    # -- HTTP ------------------------------------------------------------------------------------
    async def health(self, _: web.Request) -> web.Response:
        if time.monotonic() < self.ready_at:
            return web.Response(status=503, text="loading")
        return web.Response(text="ok")

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.model_name, "object": "model", "owned_by": "orch-sim",
             "max_model_len": self.max_model_len}]})

    async def metrics(self, _: web.Request) -> web.Response:
        running = sum(len(e.running) for e in self.engines)
        waiting = sum(len(e.waiting) for e in self.engines)
        usage = sum(e.kv_usage for e in self.engines) / len(self.engines)
        preempt = sum(e.preemptions for e in self.engines)
        caches = [e.cache.stats() for e in self.engines if e.cache is not None]
        label = f'{{model_name="{self.model_name}"}}'
        lines = [
            "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{label} {running}",
            "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{label} {waiting}",
            "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{label} {usage:.6f}",
            "# TYPE vllm:num_preemptions_total counter", f"vllm:num_preemptions_total{label} {preempt}",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{label} {self.prompt_tokens_total}",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{label} {self.generation_tokens_total}",
            "# TYPE vllm:request_success_total counter",
            f"vllm:request_success_total{label} {self.requests_total}",
            *([] if not caches else [
                "# TYPE vllm:prefix_cache_queries_total counter",
                f"vllm:prefix_cache_queries_total{label} {sum(c.queries for c in caches)}",
                "# TYPE vllm:prefix_cache_hits_total counter",
                f"vllm:prefix_cache_hits_total{label} {sum(c.hits for c in caches)}",
            ]),
            "# TYPE orch_sim_time_scale gauge", f"orch_sim_time_scale {self.time_scale}",
            "# TYPE orch_sim_behind_seconds_sum counter",
            f"orch_sim_behind_seconds_sum {self.behind_s_sum:.6f}",
            "# TYPE orch_sim_steps_total counter", f"orch_sim_steps_total {self.steps_total}",
            "# TYPE orch_sim_lost_seconds_sum counter", f"orch_sim_lost_seconds_sum {self.lost_s_sum:.6f}",
            "# TYPE orch_sim_step_seconds_sum counter", f"orch_sim_step_seconds_sum {self.step_s_sum:.6f}",
        ]
        if self.spec_counters is not None:
            lines += self.spec_counters.lines(label)
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        arrived = asyncio.get_running_loop().time()
        if time.monotonic() < self.ready_at:
            return error(503, "the model is still loading")
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return error(400, "request body is not JSON")
        if not isinstance(body, dict):
            return error(400, "request body must be a JSON object")
        tokens = prompt_tokens(body, chat)
        if tokens is None:
            return error(400, "give 'messages' (chat) or 'prompt' (completions)")
        n_prompt = max(len(tokens), 1)
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or DEFAULT_MAX_TOKENS
        if not isinstance(max_tokens, int) or max_tokens < 1:
            return error(400, "max_tokens must be a positive integer")
        if n_prompt + max_tokens > self.max_model_len:
            return error(400, f"This model's maximum context length is {self.max_model_len} tokens; "
                               f"the request has {n_prompt} prompt + {max_tokens} output tokens")
        self.accepted += 1
        if self.exit_after is not None and self.accepted > self.exit_after:
            os._exit(1)  # a crash, not a shutdown: no response, connections drop (fault injection)
        front_s = self.engines[0].request_overhead_s * self.time_scale
        if front_s > 0:
            # The API server's own work (tokenisation ...) before the request reaches an engine,
            # as the virtual-time run charges it.
            arrived += front_s
            await _sleep_until(asyncio.get_running_loop(), arrived)
        e = self._pick()
        eng = self.engines[e]
        if not eng.fits(n_prompt, max_tokens):
            return error(400, "the request does not fit the KV cache")
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        seq = Seq(rid, n_prompt, max_tokens, time.monotonic())
        if eng.cache is not None:  # the prompt's blocks and the answer's (" tok" per token) it will write
            seq.hashes = block_hashes([*tokens, *token_text(max_tokens).split()], eng.cache_block)
        stream = _Stream(seq)
        self.streams[rid] = stream
        self.prompt_tokens_total += n_prompt
        try:
            await self.enqueue(e, seq, body, arrived)
            if body.get("stream"):
                return await self._stream(request, stream, body, chat, n_prompt)
            return await self._whole(stream, chat, n_prompt)
        finally:
            self.streams.pop(rid, None)

    async def _whole(self, stream: _Stream, chat: bool, prompt_tokens: int) -> web.Response:
        n = 0
        while (tok := await stream.queue.get()) != -1:
            n += tok
        self.requests_total += 1
        text = token_text(n)
        choice: dict[str, Any] = ({"index": 0, "message": {"role": "assistant", "content": text},
                                   "finish_reason": "length"} if chat else
                                  {"index": 0, "text": text, "finish_reason": "length"})
        return web.json_response({
            "id": stream.seq.request_id, "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()), "model": self.model_name, "choices": [choice],
            "usage": usage(prompt_tokens, n), **self.response_fields(stream.seq)})

    async def _stream(self, request: web.Request, stream: _Stream, body: dict[str, Any], chat: bool,
                      prompt_tokens: int) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        opts = body.get("stream_options") or {}
        include_usage = bool(opts.get("include_usage"))
        continuous = bool(opts.get("continuous_usage_stats"))
        obj = "chat.completion.chunk" if chat else "text_completion"
        base = {"id": stream.seq.request_id, "object": obj, "created": int(time.time()),
                "model": self.model_name}
        n = 0
        if chat:
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
            await resp.write(sse({**base, "choices": [role]}))
        while (tok := await stream.queue.get()) != -1:
            n += tok
            last = n >= stream.seq.max_tokens
            text = token_text(tok)
            choice: dict[str, Any] = ({"index": 0, "delta": {"content": text}} if chat
                                      else {"index": 0, "text": text})
            choice["finish_reason"] = "length" if last else None
            chunk: dict[str, Any] = {**base, "choices": [choice]}
            if last:
                chunk.update(self.response_fields(stream.seq))
            if include_usage and continuous:
                chunk["usage"] = usage(prompt_tokens, n)
            await resp.write(sse(chunk))
        if include_usage:
            await resp.write(sse({**base, "choices": [], "usage": usage(prompt_tokens, n)}))
        await resp.write(b"data: [DONE]\n\n")
        self.requests_total += 1
        await resp.write_eof()
        return resp


SPIN_S = 0.0015  # epoll wakes timers up to 1 ms late: the last stretch is spent yielding instead


async def _sleep_until(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    """Sleep until `deadline` on the loop's clock, to within a fraction of a millisecond."""
    remaining = deadline - loop.time()
    if remaining > SPIN_S:
        await asyncio.sleep(remaining - SPIN_S)
    while loop.time() < deadline:
        await asyncio.sleep(0)  # other tasks (streams, new requests) still run meanwhile


def build_app(server: SimServer) -> web.Application:
    app = web.Application()
    app.router.add_get("/health", server.health)
    # SGLang's health URL (engines/sglang.py probes it), so the simulator can stand in for an SGLang pod
    app.router.add_get("/health_generate", server.health)
    app.router.add_get("/v1/models", server.models)
    app.router.add_get("/metrics", server.metrics)
    app.router.add_post("/v1/completions", server.completions)
    app.router.add_post("/v1/chat/completions", server.chat)

    async def start_loops(_: web.Application) -> None:
        server.tasks = [asyncio.create_task(server.run_engine(e)) for e in range(len(server.engines))]

    async def stop_loops(_: web.Application) -> None:
        for task in server.tasks:
            task.cancel()

    app.on_startup.append(start_loops)
    app.on_cleanup.append(stop_loops)
    return app
