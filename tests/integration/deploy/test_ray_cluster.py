"""A multi-node replica on a real two-node Ray cluster (ray.cluster_utils.Cluster, 8 fake GPUs a node):
tp8pp2 gets one placement group with one 8-GPU bundle per node (STRICT_SPREAD), one actor per node,
placeholder node names in argv/env replaced by the nodes' addresses; teardown leaves nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.deploy.base import deployed, free_base_port
from orchestrator.deploy.ray import RayReplica, RayTarget
from orchestrator.engines.base import LaunchPlan, ProcessSpec, ReplicaPlan
from orchestrator.errors import DeployError
from tests.support.engines import candidate
from tests.support.ray_cluster import free_gpus, free_port, leftovers, ray_or_skip

pytestmark = pytest.mark.ray

NODE = {"num_cpus": 2, "num_gpus": 8, "node_ip_address": "127.0.0.1", "object_store_memory": 100 * 2**20}
# A stand-in engine rank: serves HTTP on its port (the last argument) until stopped.
SERVE = (
    "import sys, http.server as h; "
    "h.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[-1])), h.SimpleHTTPRequestHandler).serve_forever()"
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    ray = ray_or_skip()
    from ray.cluster_utils import Cluster

    c = Cluster(
        initialize_head=True,
        head_node_args={**NODE, "gcs_server_port": free_port(), "include_dashboard": False},
    )
    c.add_node(**NODE)
    c.wait_for_nodes()
    ray.init(address=c.address, logging_level="WARNING", log_to_driver=False)
    yield ray
    ray.shutdown()
    c.shutdown()



def _tp8pp2_plan(base: int) -> LaunchPlan:
    """Shaped like vLLM's tp8pp2 plan: a leader on node0 and a headless rank on node1, 8 GPUs each."""
    procs = tuple(
        ProcessSpec(
            argv=("python", "-c", SERVE, "--master-addr=node0", f"--node-rank={rank}", str(base + rank)),
            env=(("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"), ("VLLM_HOST_IP", f"node{rank}")),
            node_index=rank,
            gpu_ids=tuple(range(8)),
            ports=(base + rank,),
            role="leader" if rank == 0 else "worker",
        )
        for rank in (0, 1)
    )
    return LaunchPlan(
        "vllm", candidate("tp8pp2", "vllm"), (ReplicaPlan(procs, f"http://node0:{base}/", f"http://node0:{base}/v1"),)
    )


def test_tp8pp2_spreads_one_bundle_per_node(cluster: Any, tmp_path: Path) -> None:
    from ray.util.placement_group import placement_group_table

    ray = cluster
    target = RayTarget(tmp_path, address="auto", gpus_per_node=8, node_names=("node0", "node1"))
    plan = _tp8pp2_plan(free_base_port(1))
    with deployed(target, plan, timeout_s=60) as dep:
        (rep,) = [h for h in dep.handles if isinstance(h, RayReplica)]
        assert rep.strategy == "STRICT_SPREAD"
        assert rep.bundles == ({"CPU": 1.0, "GPU": 8.0}, {"CPU": 1.0, "GPU": 8.0})
        table = placement_group_table(rep.placement_group)
        assert table["strategy"] == "STRICT_SPREAD"
        nodes = table["bundles_to_node_id"]
        assert len(set(nodes.values())) == 2  # one bundle on each node
        assert [a.info["node_id"] for a in rep.actors] == [nodes[0], nodes[1]]
        for a in rep.actors:
            assert sorted(a.info["cuda_visible_devices"].split(",")) == [str(g) for g in range(8)]
        assert dep.endpoints[0].health_url.startswith("http://127.0.0.1:")
        logs = [Path(a.info["log"]).read_text().splitlines()[0] for a in rep.actors]
        assert all("--master-addr=127.0.0.1" in line for line in logs)
        assert free_gpus(ray, 16, wait_s=0) == 0
    assert leftovers(ray) == ([], [])
    assert free_gpus(ray, 16) == 16


def test_a_replica_wider_than_the_cluster_is_refused_up_front(cluster: Any, tmp_path: Path) -> None:
    proc = ProcessSpec(argv=("python", "-c", "pass"), node_index=0, gpu_ids=tuple(range(8)))
    procs = tuple(ProcessSpec(argv=proc.argv, node_index=n, gpu_ids=proc.gpu_ids) for n in range(3))
    plan = LaunchPlan("vllm", candidate("tp8pp3", "vllm"), (ReplicaPlan(procs, "http://node0:1/", "http://node0:1/v1"),))
    with pytest.raises(DeployError, match=r"needs 24 GPUs"):
        RayTarget(tmp_path, gpus_per_node=8).deploy(plan)
    assert leftovers(cluster) == ([], [])
