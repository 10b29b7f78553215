from __future__ import annotations

import pytest

from orchestrator.engines import get_engine
from orchestrator.engines.base import Placement, assign_slots, check_extra_args, placement_problems
from orchestrator.errors import SpecError
from orchestrator.layout import parse_layout


def test_unknown_engine() -> None:
    with pytest.raises(SpecError, match="unknown engine 'nope'"):
        get_engine("nope")


@pytest.mark.parametrize("flag", ["-tp", "--tensor-parallel-size=2", "--port", "--tp-size"])
def test_passthrough_conflict(flag: str) -> None:
    with pytest.raises(SpecError, match=flag.split("=")[0]):
        check_extra_args(("--foo", flag, "2"))


def test_passthrough_ok() -> None:
    check_extra_args(("--trust-remote-code", "--seed", "1"))


def test_replica_gpus_disjoint() -> None:
    slots = assign_slots(parse_layout("tp2x4"), Placement(gpus_per_node=8))
    gpus = [g for rep in slots for s in rep for g in s.gpu_ids]
    ports = [s.port for rep in slots for s in rep]
    assert sorted(gpus) == list(range(8))
    assert len(set(ports)) == 4


def test_multi_node_span() -> None:
    p = Placement(nodes=("10.0.0.1", "10.0.0.2"), gpus_per_node=8)
    slots = assign_slots(parse_layout("tp8pp2"), p)
    assert [s.host for s in slots[0]] == ["10.0.0.1", "10.0.0.2"]
    assert placement_problems(parse_layout("tp8pp2x2"), p)
