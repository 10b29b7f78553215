"""The serve step, one piece for every caller (a lone sweep layout, each layout of a side-by-side wave,
consistency, and the nightly sweep in the cluster): deploy a candidate's launch plan on its target,
wait until healthy, warm it up, yield its endpoints, and always tear it down.

Deploying and tearing down run with SIGINT/SIGTERM deferred (a second Ctrl-C must not abandon engines
half stopped). A `Cancel` lets another thread stop the step: the deployment is torn down there, at
once, and the step raises Cancelled in its own thread; teardown happens exactly once, whoever gets
there first. `launch_for` compiles a sweep candidate on free ports (avoiding a wave mate's) with its
target, through compile.prepare (compile/launch.py), the one launch plan.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.candidate import AnyCandidate, Candidate, DisaggCandidate
from orchestrator.compile import Compiled, placement, prepare
from orchestrator.deploy.base import Deployment, Endpoint, Target, free_base_port, signals_deferred
from orchestrator.deploy.targets import make_target, probe_host
from orchestrator.engines import PORT_STRIDE
from orchestrator.engines.pd_flags import SIDE_PORT_OFFSET
from orchestrator.errors import DeployError
from orchestrator.loadgen.client import ClientConfig, RequestSpec, run_open_loop
from orchestrator.pipeline.context import SweepContext
from orchestrator.spec.load import spec_hash

WARMUP_MAX_TOKENS = 8


class Cancelled(Exception):
    """The step was stopped from another thread (Ctrl-C, or a failure that ends a wave)."""


class Cancel:
    """Stops a serve step from another thread: `cancel()` tears its deployment down right there."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._teardown: Callable[[], None] | None = None

    def is_set(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        self._event.set()
        with self._lock:
            teardown, self._teardown = self._teardown, None
        if teardown is not None:
            teardown()

    def hold(self, teardown: Callable[[], None]) -> None:
        """The step has something to tear down; if it was cancelled meanwhile, tear it down now."""
        with self._lock:
            self._teardown = teardown
        if self.is_set():
            self.cancel()
            raise Cancelled

    def release(self) -> None:
        with self._lock:
            self._teardown = None


class _Once:
    """A deployment's teardown, run once whichever thread asks first."""

    def __init__(self, target: Target[Any], deployment: Deployment[Any]) -> None:
        self.target, self.deployment = target, deployment
        self._lock = threading.Lock()
        self._done = False

    def __call__(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
        with signals_deferred():
            self.target.teardown(self.deployment)


@dataclass(frozen=True)
class Served:
    """A healthy, warmed-up deployment and the clients its load generator uses."""

    deployment: Deployment[Any]
    target: Target[Any]
    clients: tuple[ClientConfig, ...]

    def check_alive(self) -> None:
        """Raise EngineDied when an engine ended since it was healthy (between load points)."""
        self.target.check_alive(self.deployment)

    @property
    def engines(self) -> tuple[tuple[str, str], ...]:
        """(OpenAI base URL, role) of the servers whose /metrics to scrape: a pair's pool servers
        behind its router, else none (the clients' own endpoints are scraped)."""
        return tuple((ep.openai_base_url, ep.role) for ep in self.deployment.backends)


def clients_of(endpoints: Sequence[Endpoint], model_name: str) -> tuple[ClientConfig, ...]:
    return tuple(ClientConfig(ep.openai_base_url, model_name, ignore_eos=True) for ep in endpoints)


async def warm_up(clients: Sequence[ClientConfig]) -> None:
    """One short request per endpoint: first requests after start are slow on real engines."""
    specs = [RequestSpec(f"warmup-{i}", "warm up " * 8, WARMUP_MAX_TOKENS) for i in range(len(clients))]
    recs = await run_open_loop(list(clients), specs, [0.0] * len(specs), balance="round_robin")
    bad = [r.error for r in recs if r.error]
    if bad:
        raise DeployError(f"warm-up request failed: {bad[0]} (the engine is up but does not serve)")


@contextmanager
def serve(
    target: Target[Any],
    compiled: Compiled,
    ready_timeout_s: float,
    *,
    phase: Callable[[str], None] = lambda _: None,
    cancel: Cancel | None = None,
) -> Iterator[Served]:
    """Deploy, wait healthy, warm up, yield; tear down on success, failure, Ctrl-C and cancel alike."""
    cancel = cancel or Cancel()
    teardown: _Once | None = None
    try:
        phase("deploy")
        with signals_deferred():
            deployment = target.deploy(compiled.plan)
            teardown = _Once(target, deployment)
        cancel.hold(teardown)
        target.wait_ready(deployment, ready_timeout_s)
        clients = clients_of(deployment.endpoints, compiled.model_name)
        phase("warm-up")
        asyncio.run(warm_up(clients))
        if cancel.is_set():
            raise Cancelled
        yield Served(deployment, target, clients)
        phase("teardown")
    finally:
        cancel.release()
        if teardown is not None:
            teardown()


@dataclass(frozen=True)
class Launch:
    """A sweep candidate compiled on free ports, and the target it deploys on."""

    compiled: Compiled
    target: Target[Any]


def launch_for(
    ctx: SweepContext,
    candidate: AnyCandidate,
    usable_gpus: tuple[tuple[int, ...], ...] = (),
    avoid_ports: frozenset[int] = frozenset(),
) -> Launch:
    """The candidate's launch plan on free ports (none of `avoid_ports`, which wave mates hold) and its
    deploy target; `usable_gpus` confines it to its share of the cluster (side by side)."""
    spec = ctx.spec
    where = replace(placement(spec), usable_gpus=usable_gpus)
    if isinstance(candidate, Candidate):
        reasons = ctx.engine.unsupported(candidate.layout, where)
        if reasons:
            raise DeployError(f"{ctx.engine.name} cannot run {candidate}: " + "; ".join(reasons))
    # (a pair's pools are checked one by one when its plan is compiled to serve)
    slots, host = port_slots(candidate), probe_host(spec.target, where)
    # a pair's pool servers also bind a side port (NIXL side channel, SGLang bootstrap)
    side = SIDE_PORT_OFFSET + 1 if isinstance(candidate, DisaggCandidate) else 3
    base_port = free_base_port(slots, host, side_ports=side)
    for _ in range(100):  # ports are only checked free, not held, until the engines bind them
        if not avoid_ports & set(range(base_port, base_port + PORT_STRIDE * slots)):
            break
        base_port = free_base_port(slots, host, side_ports=side, start=base_port + PORT_STRIDE * slots)
    workdir = ctx.workdir / candidate.name
    kv_dir = str((workdir / "kv").absolute()) if isinstance(candidate, DisaggCandidate) else None
    compiled = prepare(spec, candidate, replace(where, base_port=base_port), to_serve=True, kv_dir=kv_dir)
    target = make_target(
        spec.target, workdir, compiled.placement, run_id=ctx.run_id,
        spec_hash=spec_hash(spec),
    )
    return Launch(compiled, target)


def port_slots(candidate: AnyCandidate) -> int:
    """Port blocks a candidate's servers take: one per replica (a pair: of both pools, and the router's)."""
    if isinstance(candidate, Candidate):
        return max(candidate.layout.replicas, 1)
    return candidate.prefill.layout.replicas + candidate.decode.layout.replicas + 1


def port_block(launch: Launch) -> set[int]:
    """Every port of the launch's replica slots (http and side ports), which wave mates must avoid."""
    base, slots = launch.compiled.placement.base_port, port_slots(launch.compiled.candidate)
    return set(range(base, base + PORT_STRIDE * slots))


__all__ = [
    "Cancel", "Cancelled", "Launch", "Served", "clients_of", "launch_for", "port_block", "serve", "warm_up",
]
