"""The serve step on the Target seam (a FakeTarget whose endpoint is a real local streaming server):
it deploys, waits, warms up and yields the clients, and tears the deployment down exactly once on
success, on a failure at any step, on an error in the caller's block, and when another thread
cancels it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from orchestrator.compile import prepare
from orchestrator.deploy.fake import FakeTarget
from orchestrator.errors import DeployError, EngineDied
from orchestrator.layout import parse_layout
from orchestrator.pipeline.serving import Cancel, Cancelled, serve
from orchestrator.spec import parse_spec
from tests.support.streaming_server import ServerConfig, serve_in_thread

SPEC = parse_spec("""
model: {name: qwen2.5-7b}
hardware: {gpu: h100-sxm}
engine: {name: vllm}
workload: {rates_per_s: [1], num_requests: 4}
layouts: [tp1]
""")
COMPILED = prepare(SPEC, parse_layout("tp1"))


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    with serve_in_thread(ServerConfig(ttft_ms=1, itl_ms=1)) as base:
        yield base + "/v1"


def test_it_yields_warm_clients_and_tears_down_once(endpoint: str) -> None:
    target = FakeTarget([endpoint])
    phases: list[str] = []
    with serve(target, COMPILED, 30, phase=phases.append) as served:
        assert [c.base_url for c in served.clients] == [endpoint]
        assert served.clients[0].model == COMPILED.model_name
        served.check_alive()
        assert target.live  # deployed, not yet torn down
    assert [s for s, _ in target.calls] == ["deploy", "wait_ready", "check_alive", "teardown"]
    assert phases == ["deploy", "warm-up", "teardown"]
    assert not target.live


@pytest.mark.parametrize("step", ["wait_ready", "check_alive"])
def test_a_failure_at_any_step_still_tears_down(endpoint: str, step: str) -> None:
    error = DeployError("not healthy") if step == "wait_ready" else EngineDied("exited with code 1")
    target = FakeTarget([endpoint], fail={step: error})
    with pytest.raises(type(error)), serve(target, COMPILED, 30) as served:
        served.check_alive()
    assert target.count("teardown") == 1 and not target.live


def test_a_failed_deploy_has_nothing_to_tear_down() -> None:
    target = FakeTarget(fail={"deploy": DeployError("no GPUs")})
    with pytest.raises(DeployError, match="no GPUs"), serve(target, COMPILED, 30):
        pass
    assert target.count("teardown") == 0


def test_a_warm_up_that_fails_tears_down() -> None:
    target = FakeTarget(["http://127.0.0.1:9/v1"])  # nothing listens there: the warm-up request fails
    with pytest.raises(DeployError, match="warm-up request failed"), serve(target, COMPILED, 30):
        pass
    assert target.count("teardown") == 1 and not target.live


def test_an_error_in_the_callers_block_tears_down(endpoint: str) -> None:
    target = FakeTarget([endpoint])
    with pytest.raises(RuntimeError, match="a bug"), serve(target, COMPILED, 30):
        raise RuntimeError("a bug")
    assert target.count("teardown") == 1


def test_another_thread_cancels_it_and_the_teardown_happens_once(endpoint: str) -> None:
    target = FakeTarget([endpoint])
    cancel, inside, outcome = Cancel(), threading.Event(), []

    def step() -> None:
        try:
            with serve(target, COMPILED, 30, cancel=cancel):
                inside.set()
                while not cancel.is_set():
                    time.sleep(0.01)
                raise Cancelled  # what a measurement does when it sees the cancel
        except Cancelled:
            outcome.append("cancelled")

    t = threading.Thread(target=step)
    t.start()
    assert inside.wait(30)
    cancel.cancel()  # from this thread: the deployment goes down here, at once
    assert not target.live
    t.join(30)
    assert outcome == ["cancelled"] and target.count("teardown") == 1


def test_a_step_cancelled_before_it_deployed_tears_down_what_it_then_deploys(endpoint: str) -> None:
    target, cancel = FakeTarget([endpoint]), Cancel()
    cancel.cancel()
    with pytest.raises(Cancelled), serve(target, COMPILED, 30, cancel=cancel):
        pass
    assert [s for s, _ in target.calls] == ["deploy", "teardown"] and not target.live
