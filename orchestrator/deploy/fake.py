"""A Target that starts nothing, on the same seam as the real ones, for tests of whatever deploys:
the serve step, the sweep, side-by-side waves, consistency.

Its endpoints are the plan's own URLs (or ones the test names, e.g. simulated servers it started), every
call is recorded in order, and a failure can be made to happen at any step, so a test can check that
whatever was deployed is torn down exactly once, whichever step fails.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.deploy.base import Deployment, Endpoint
from orchestrator.engines import LaunchPlan
from orchestrator.errors import DeployError

STEPS = ("deploy", "wait_ready", "check_alive", "teardown")


@dataclass(frozen=True)
class FakeHandle:
    """What a fake deployment holds: the number of the deployment (1, 2, ... per target)."""

    serial: int


@dataclass
class FakeTarget:
    """`fail`: step -> the error that step raises (a DeployError in wait_ready, an EngineDied in
    check_alive, ...). `endpoints`: OpenAI base URLs to hand out instead of the plan's, one per replica."""

    endpoints: Sequence[str] = ()
    fail: Mapping[str, BaseException] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)  # (step, candidate name), in order
    live: set[int] = field(default_factory=set)  # serials deployed and not torn down yet

    def __post_init__(self) -> None:
        unknown = set(self.fail) - set(STEPS)
        if unknown:
            raise ValueError(f"FakeTarget: no step {sorted(unknown)}; steps are {', '.join(STEPS)}")
        self._lock = threading.Lock()
        self._serial = 0

    def _step(self, step: str, name: str) -> None:
        with self._lock:
            self.calls.append((step, name))
        error = self.fail.get(step)
        if error is not None:
            raise error

    def deploy(self, plan: LaunchPlan) -> Deployment[FakeHandle]:
        self._step("deploy", plan.name)
        with self._lock:
            self._serial += 1
            serial = self._serial
            self.live.add(serial)
        urls = list(self.endpoints) or [r.openai_base_url for r in plan.replicas]
        if len(urls) != len(plan.replicas):
            raise DeployError(f"FakeTarget: {len(urls)} endpoints for {len(plan.replicas)} replicas")
        endpoints = tuple(
            Endpoint(i, url, url.removesuffix("/v1") + "/health") for i, url in enumerate(urls)
        )
        return Deployment(plan, endpoints, "", (FakeHandle(serial),))

    def wait_ready(self, deployment: Deployment[FakeHandle], timeout_s: float) -> None:
        self._step("wait_ready", deployment.name)

    def check_alive(self, deployment: Deployment[FakeHandle]) -> None:
        self._step("check_alive", deployment.name)

    def teardown(self, deployment: Deployment[FakeHandle]) -> None:
        self._step("teardown", deployment.name)
        with self._lock:
            for handle in deployment.handles:
                self.live.discard(handle.serial)

    def count(self, step: str) -> int:
        return sum(1 for s, _ in self.calls if s == step)

