"""Placement-group shapes and host substitution of the Ray target: pure, no Ray needed."""

from __future__ import annotations

import pytest

from orchestrator.deploy.ray import replica_bundles, substitute_hosts
from orchestrator.engines.base import ProcessSpec, ReplicaPlan
from orchestrator.errors import SpecError


def _replica(*procs: ProcessSpec) -> ReplicaPlan:
    return ReplicaPlan(procs, "http://h:1/health", "http://h:1/v1")


def test_single_node_replica_is_one_packed_bundle() -> None:
    shape = replica_bundles(_replica(ProcessSpec(("vllm",), gpu_ids=(4, 5, 6, 7))), 4, 8)
    assert shape.strategy == "PACK"
    assert shape.bundles == ({"CPU": 1.0, "GPU": 4.0},)
    assert [(a.process, a.bundle, a.num_gpus) for a in shape.actors] == [(0, 0, 4)]


def test_multi_node_replica_spreads_one_bundle_per_node() -> None:
    procs = [ProcessSpec(("vllm",), node_index=n, gpu_ids=tuple(range(8))) for n in (2, 3)]
    shape = replica_bundles(_replica(*procs), 16, 8)
    assert shape.strategy == "STRICT_SPREAD"
    assert shape.bundles == ({"CPU": 1.0, "GPU": 8.0},) * 2
    assert shape.bundle_of_node == {2: 0, 3: 1}
    assert [(a.bundle, a.num_gpus) for a in shape.actors] == [(0, 8), (1, 8)]


def test_sim_process_holds_the_whole_replica() -> None:
    shape = replica_bundles(_replica(ProcessSpec(("python",))), 16, 8)
    assert shape.bundles == ({"CPU": 1.0, "GPU": 8.0},) * 2  # both nodes reserved
    assert [(a.bundle, a.num_gpus) for a in shape.actors] == [(0, 8)]


def test_cpu_replicas_ask_for_no_gpus() -> None:
    shape = replica_bundles(_replica(ProcessSpec(("vllm",))), 2, 2, on_cpu=True)
    assert shape.bundles == ({"CPU": 1.0},) and shape.actors[0].num_gpus == 0


def test_a_replica_not_filling_whole_nodes_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="gpus_per_node"):
        replica_bundles(_replica(ProcessSpec(("vllm",))), 12, 8)


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("node0", "10.0.0.5"),
        ("--master-addr=node0", "--master-addr=10.0.0.5"),
        ("node1:29500", "10.0.0.6:29500"),
        ("node10", "node10"),
        ("--model=/models/node0", "--model=/models/node0"),
        ("node0:abc", "node0:abc"),
    ],
)
def test_placeholder_hosts_are_replaced_whole(token: str, expected: str) -> None:
    assert substitute_hosts(token, {"node0": "10.0.0.5", "node1": "10.0.0.6"}) == expected


def test_an_address_nobody_answers_fails_fast_with_the_fix() -> None:
    import socket

    from orchestrator.deploy.ray import RayTarget
    from orchestrator.errors import DeployError

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DeployError, match=r"target.address: nothing answers at '127.0.0.1:\d+'.*ray start"):
        RayTarget("/tmp/unused", address=f"127.0.0.1:{port}").connect()
