"""The Ray target on a real local Ray cluster with fake GPUs: placement groups per replica, GPU pinning
from Ray's assignment, endpoints, health, teardown (also on failure) leaving no actors or groups."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.deploy.base import deployed, free_base_port, port_is_free
from orchestrator.deploy.ray import RayReplica, RayTarget
from orchestrator.engines import SimOptions
from orchestrator.engines.base import EngineOptions, LaunchPlan, Placement, ProcessSpec, ReplicaPlan
from orchestrator.engines.sim import ENGINE as SIM
from orchestrator.errors import DeployError, EngineDied
from orchestrator.layout import parse_layout
from tests.support.engines import candidate
from tests.support.ray_cluster import free_gpus, leftovers, ray_or_skip

pytestmark = pytest.mark.ray

SIM_OPTIONS = SimOptions("qwen2.5-7b", "h100-sxm", startup_s=0.5)


@pytest.fixture(scope="module")
def ray() -> Iterator[Any]:
    ray = ray_or_skip()
    ray.init(
        address="local", num_gpus=8, num_cpus=16, include_dashboard=False, _node_ip_address="127.0.0.1",
        logging_level="WARNING", log_to_driver=False,
    )  # fmt: skip
    yield ray
    ray.shutdown()



def _sim_plan(layout: str) -> LaunchPlan:
    where = Placement(base_port=free_base_port(parse_layout(layout).replicas), bind_host="127.0.0.1")
    options = EngineOptions(model="qwen2.5-7b", sim=SIM_OPTIONS)
    return SIM.launch_plan(candidate(layout, "sim"), options, where)


def _replicas(dep: Any) -> list[RayReplica]:
    return [h for h in dep.handles if isinstance(h, RayReplica)]


def test_tp4x2_packs_each_replica_on_disjoint_gpus(ray: Any, tmp_path: Path) -> None:
    plan = _sim_plan("tp4x2")
    target = RayTarget(tmp_path, address="auto", gpus_per_node=8)
    with deployed(target, plan, timeout_s=90) as dep:
        reps = _replicas(dep)
        assert [r.strategy for r in reps] == ["PACK", "PACK"]
        assert [r.bundles for r in reps] == [({"CPU": 1.0, "GPU": 4.0},)] * 2
        devices = [r.actors[0].info["cuda_visible_devices"].split(",") for r in reps]
        assert [len(d) for d in devices] == [4, 4]
        assert not set(devices[0]) & set(devices[1])  # disjoint GPUs per replica
        assert ray.available_resources().get("GPU", 0) == 0  # all 8 reserved by the two groups
        assert [ep.health_url for ep in dep.endpoints] == [r.health_url for r in plan.replicas]
        ports = [int(ep.health_url.rsplit(":", 1)[1].split("/")[0]) for ep in dep.endpoints]
        assert not any(port_is_free(p) for p in ports)  # the engines serve
    assert leftovers(ray) == ([], [])
    assert free_gpus(ray, 8) == 8
    assert all(port_is_free(p) for p in ports)


def test_too_big_a_layout_fails_before_anything_is_placed(ray: Any, tmp_path: Path) -> None:
    plan = _sim_plan("tp8x2")
    with pytest.raises(DeployError, match=r"needs 16 GPUs.*has 8"):
        RayTarget(tmp_path, gpus_per_node=8).deploy(plan)
    assert leftovers(ray) == ([], [])


def test_an_engine_that_dies_is_reported_with_its_log_and_cleaned_up(ray: Any, tmp_path: Path) -> None:
    port = free_base_port(1)
    code = "import sys; print('engine: out of memory'); sys.exit(7)"
    proc = ProcessSpec(argv=("python", "-c", code), ports=(port,))
    replica = ReplicaPlan((proc,), f"http://127.0.0.1:{port}/health", "x")
    plan = LaunchPlan("sim", candidate("tp2", "sim"), (replica,))
    target = RayTarget(tmp_path, gpus_per_node=8)
    with pytest.raises(EngineDied, match=r"(?s)code 7.*out of memory"), deployed(target, plan, 60):
        pass
    assert leftovers(ray) == ([], [])
    assert free_gpus(ray, 8) == 8


def test_killing_the_actor_takes_its_engine_process_with_it(ray: Any, tmp_path: Path) -> None:
    import time

    plan = _sim_plan("tp1")
    target = RayTarget(tmp_path, gpus_per_node=8)
    dep = target.deploy(plan)
    try:
        target.wait_ready(dep, 60)
        actor = _replicas(dep)[0].actors[0]
        ray.kill(actor.handle, no_restart=True)  # as if the worker crashed: no stop() call
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _alive(actor.info["pid"]):
            time.sleep(0.1)
        assert not _alive(actor.info["pid"])
        with pytest.raises(EngineDied, match="actor is gone"):
            target.check_alive(dep)
    finally:
        target.teardown(dep)
    assert leftovers(ray) == ([], [])


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
