"""The Target seam: what a target returns once healthy (typed handles), the protocol every target
(local processes, Ray, Kubernetes, and the fake for tests) implements, and the deferral of signals
that keeps a teardown from being abandoned half way.

The serve step (pipeline/serving.py) is the one caller that deploys, waits, warms up and always tears
down; `deployed` is its deploy-and-wait core, for callers that need no warm-up."""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from orchestrator.engines import PORT_STRIDE, LaunchPlan, ReplicaPlan
from orchestrator.engines.base import ReplicaRole

# Ray uses 10002-19999 for workers; stay clear of it and of the well-known range.
PORT_RANGE = (20000, 60000)

H = TypeVar("H")


@dataclass(frozen=True)
class Endpoint:
    replica: int
    openai_base_url: str
    health_url: str
    role: ReplicaRole = "serve"  # a pair's pool servers: prefill / decode; its router: router


@dataclass(frozen=True)
class Deployment(Generic[H]):
    """A deployed launch plan: its endpoints and the target's own handles (processes, Ray replicas,
    Kubernetes objects), typed by the target that made them. `endpoints` are what clients talk to (the
    engines, or a prefill/decode pair's router); `backends` are a pair's pool servers behind its
    router, health-checked and scraped for metrics like the endpoints, never sent requests directly."""

    plan: LaunchPlan
    endpoints: tuple[Endpoint, ...]
    workdir: str
    handles: tuple[H, ...] = ()
    backends: tuple[Endpoint, ...] = ()

    @property
    def name(self) -> str:
        """The candidate's name, as logs and errors call it."""
        return self.plan.name

    @property
    def servers(self) -> tuple[Endpoint, ...]:
        """Every server that must be healthy: the endpoints and the backends behind them."""
        return self.endpoints + self.backends

    @property
    def engines(self) -> tuple[Endpoint, ...]:
        """The engines whose /metrics tell what they did: the pools' servers behind a router, else the
        endpoints themselves."""
        return self.backends or self.endpoints


def split_endpoints(plan: LaunchPlan, endpoint: Callable[[int, ReplicaPlan], Endpoint],
                    ) -> tuple[tuple[Endpoint, ...], tuple[Endpoint, ...]]:
    """(endpoints, backends) of a plan: each replica's Endpoint (made by `endpoint(index, replica)`,
    the target's addresses) split by whether clients talk to it."""
    front: list[Endpoint] = []
    back: list[Endpoint] = []
    for i, rep in enumerate(plan.replicas):
        ep = endpoint(i, rep)
        ep = ep if ep.role == rep.role else Endpoint(ep.replica, ep.openai_base_url, ep.health_url, rep.role)
        (front if rep.serves_clients else back).append(ep)
    return tuple(front), tuple(back)


class Target(Protocol[H]):
    """Where launch plans run. `deploy` starts what the plan says and returns at once; `wait_ready`
    waits for every endpoint's health; `check_alive` raises EngineDied when something ended between
    load points; `teardown` stops everything `deploy` started and may be called more than once."""

    def deploy(self, plan: LaunchPlan) -> Deployment[H]: ...

    def wait_ready(self, deployment: Deployment[H], timeout_s: float) -> None: ...

    def check_alive(self, deployment: Deployment[H]) -> None: ...

    def teardown(self, deployment: Deployment[H]) -> None: ...


@contextmanager
def deployed(target: Target[Any], plan: LaunchPlan, timeout_s: float) -> Iterator[Deployment[Any]]:
    """Deploy and wait; teardown runs on success, failure, timeout and Ctrl-C alike.

    Starting and tearing down run with SIGINT/SIGTERM deferred: a second Ctrl-C (or a SIGTERM) while
    engines are being stopped must not abandon the rest of them. The signal takes effect after."""
    deployment: Deployment[Any] | None = None
    try:
        with signals_deferred():
            deployment = target.deploy(plan)
        target.wait_ready(deployment, timeout_s)
        yield deployment
    finally:
        if deployment is not None:
            with signals_deferred():
                target.teardown(deployment)


DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM while the block runs, then deliver each one that came (once), to the
    handlers that were in place: KeyboardInterrupt for Ctrl-C, the CLI's handler for SIGTERM.

    Only the main thread receives Python signals; elsewhere this is a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def hold(signum: int, frame: object) -> None:
        if signum not in arrived:
            arrived.append(signum)

    previous = {sig: signal.signal(sig, hold) for sig in DEFERRED_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: a handler set outside Python, which cannot be put back
                signal.signal(sig, handler)
        for signum in arrived:
            signal.raise_signal(signum)


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # Servers bind with SO_REUSEADDR, so connections left in TIME_WAIT do not make a port busy.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_base_port(
    replica_slots: int, host: str = "127.0.0.1", *, side_ports: int = 3, start: int | None = None
) -> int:
    """A base port whose whole block (every replica slot's http and side ports) is free now.

    Start from an OS-chosen ephemeral port so that concurrent sweeps do not collide, then walk up.
    """
    if start is None:
        with socket.socket() as s:
            s.bind((host, 0))
            start = int(s.getsockname()[1])
    lo, hi = PORT_RANGE
    span = PORT_STRIDE * replica_slots
    candidate = lo + (start - lo) % (hi - lo - span)
    for _ in range(2000):
        ports = [candidate + PORT_STRIDE * r + k for r in range(replica_slots) for k in range(side_ports)]
        if all(port_is_free(p, host) for p in ports):
            return candidate
        candidate = lo + (candidate + span - lo) % (hi - lo - span)
    raise OSError(f"no free block of {span} ports in {lo}-{hi} on {host}")
