"""Layouts side by side: the packer's waves (deploy/packing.py), checked by hand and by properties,
the engines' slots inside a layout's share, and when a sweep uses waves at all."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.deploy.packing import Placed, nodes_held, pack
from orchestrator.engines.base import Placement, assign_slots, placement_problems
from orchestrator.errors import SpecError
from orchestrator.layout import Layout, parse_layout
from orchestrator.pipeline.context import side_by_side_on
from orchestrator.pipeline.side_by_side import placement_lines, waves
from orchestrator.pipeline.sweep import Sweep, SweepOptions
from orchestrator.spec.models import SweepSpec
from orchestrator.store.db import Store
from orchestrator.store.extras import SideRecords

Blocks = list[list[tuple[int, tuple[int, ...]]]]


def _waves(layouts: str, nodes: int, gpus: int = 8) -> list[list[tuple[str, Blocks]]]:
    """[[(layout, per replica [(node, gpu ids)])] per wave]"""
    return [
        [(str(p.layout), [[(b.node, b.gpus) for b in blocks] for blocks in p.replicas]) for p in wave]
        for wave in pack([parse_layout(x) for x in layouts.split()], nodes, gpus)
    ]


ALL = tuple(range(8))


def test_two_nodes_hold_tp8_and_tp4x2_in_one_wave() -> None:
    assert _waves("tp8 tp4x2", 2) == [
        [("tp8", [[(0, ALL)]]), ("tp4x2", [[(1, (0, 1, 2, 3))], [(1, (4, 5, 6, 7))]])]
    ]


def test_one_node_is_sequential() -> None:
    assert _waves("tp8 tp4x2", 1) == [
        [("tp8", [[(0, ALL)]])],
        [("tp4x2", [[(0, (0, 1, 2, 3))], [(0, (4, 5, 6, 7))]])],
    ]


def test_a_layout_over_two_nodes_takes_both_alone() -> None:
    assert _waves("tp8pp2 tp8 tp4x2", 2) == [
        [("tp8pp2", [[(0, ALL), (1, ALL)]])],
        [("tp8", [[(0, ALL)]]), ("tp4x2", [[(1, (0, 1, 2, 3))], [(1, (4, 5, 6, 7))]])],
    ]


def test_tiny_layouts_fill_the_leftovers_of_one_node() -> None:
    # tp8 needs the whole node; tp4, tp2 and tp1 share one, in aligned blocks; waves in input order
    assert _waves("tp4 tp2 tp8 tp1", 1) == [
        [("tp4", [[(0, (0, 1, 2, 3))]]), ("tp2", [[(0, (4, 5))]]), ("tp1", [[(0, (6,))]])],
        [("tp8", [[(0, ALL)]])],
    ]


def test_a_tp_group_is_never_split_over_nodes() -> None:
    # tp6x2 leaves GPUs 6-7 free on both nodes: four GPUs in all, but no node holds a tp4 group
    assert _waves("tp6x2 tp4", 2) == [
        [("tp6x2", [[(0, (0, 1, 2, 3, 4, 5))], [(1, (0, 1, 2, 3, 4, 5))]])],
        [("tp4", [[(0, (0, 1, 2, 3))]])],
    ]
    # ... while tp2 groups fit in those leftovers
    assert len(_waves("tp6x2 tp2x2", 2)) == 1


def test_a_layout_the_cluster_cannot_hold_gets_a_wave_without_gpus() -> None:
    # 24 GPUs on 2 nodes of 8; a 12-GPU replica is not a whole number of nodes
    assert _waves("tp8pp3 tp4 tp4pp3", 2) == [
        [("tp8pp3", [])], [("tp4", [[(0, (0, 1, 2, 3))]])], [("tp4pp3", [])]
    ]


def test_the_same_input_gives_the_same_waves() -> None:
    layouts = "tp1x8 tp2x4 tp4x2 tp8 tp2 tp1 tp4 tp8pp2"
    assert _waves(layouts, 3) == _waves(layouts, 3)


_LAYOUTS = st.builds(
    Layout,
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 1, 2]),
    replicas=st.sampled_from([1, 2, 3]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_LAYOUTS, min_size=1, max_size=7), st.integers(1, 4), st.sampled_from([4, 8]))
def test_waves_hold_each_layout_once_on_disjoint_gpus(layouts: list[Layout], nodes: int, gpn: int) -> None:
    out = pack(layouts, nodes, gpn)
    assert sorted(str(p.layout) for w in out for p in w) == sorted(map(str, layouts))
    for wave in out:
        used: set[tuple[int, int]] = set()
        for p in wave:
            if not p.replicas:  # unplaceable: alone, and truly too big for the cluster
                assert len(wave) == 1 and placement_problems(p.layout, Placement(("n",) * nodes, gpn))
                continue
            assert len(p.replicas) == p.layout.replicas
            for blocks in p.replicas:
                held = [(b.node, g) for b in blocks for g in b.gpus]
                assert len(held) == p.layout.gpus_per_replica
                if p.layout.gpus_per_replica <= gpn:
                    assert len(blocks) == 1  # one node
                else:
                    assert all(len(b.gpus) == gpn for b in blocks)  # whole nodes
                assert not used & set(held)
                used |= set(held)
            # The engines place the replicas on exactly the packer's GPUs inside the layout's share.
            where = Placement(tuple(f"n{i}" for i in range(nodes)), gpn, usable_gpus=p.usable_gpus(nodes))
            slots = assign_slots(p.layout, where)
            assert [[(s.node_index, s.gpu_ids) for s in r] for r in slots] == [
                [(b.node, b.gpus) for b in blocks] for blocks in p.replicas
            ]


def test_a_share_too_small_for_the_layout_is_a_placement_problem() -> None:
    where = Placement(("a", "b"), 8, usable_gpus=((0, 1, 2, 3), ()))
    assert placement_problems(parse_layout("tp4x2"), where) == [
        "needs 2 blocks of 4 GPUs on one node, placement (its share of the cluster) holds 1"
    ]
    assert placement_problems(parse_layout("tp8pp2"), where) == [
        "needs 2 nodes of 8 GPUs, placement (its share of the cluster) has 0"
    ]
    with pytest.raises(SpecError, match="ascending GPU ids below 8"):
        Placement(("a",), 8, usable_gpus=((8,),))


def _spec(nodes: int, engine: str = "sim", gpu: str = "h100-sxm", kind: str = "local") -> SweepSpec:
    target = {"kind": kind} if kind != "kubernetes" else {"kind": kind, "image": "x"}
    return SweepSpec.model_validate({
        "model": {"name": "qwen2.5-72b", "max_model_len": 4096},
        "hardware": {"gpu": gpu, "nodes": nodes, "gpus_per_node": 8},
        "engine": {"name": engine},
        "target": target,
        "workload": {"input_tokens": 128, "output_tokens": 16, "rates_per_s": [1], "num_requests": 4},
        "slo": {"ttft_p99_ms": 3000},
        "layouts": ["tp8", "tp4x2"],
    })


def test_when_layouts_may_share_the_cluster() -> None:
    assert not side_by_side_on(_spec(2), served=False, choice="on")  # virtual time: never
    assert side_by_side_on(_spec(2), served=True, choice="on")
    assert not side_by_side_on(_spec(2, "vllm"), served=True, choice="off")
    assert not side_by_side_on(_spec(2), served=True, choice="auto")  # the served simulator shares one CPU
    assert side_by_side_on(_spec(1, "vllm"), served=True, choice="auto")
    assert side_by_side_on(_spec(2, "vllm", kind="ray"), served=True, choice="auto")
    assert not side_by_side_on(_spec(2, "vllm", kind="kubernetes"), served=True, choice="auto")
    assert not side_by_side_on(_spec(1, "vllm", gpu="cpu"), served=True, choice="auto")


class _Quiet:
    def __getattr__(self, name: str) -> object:
        return lambda *a, **k: None


def _sweep_waves(tmp_path: Path, nodes: int, served: bool) -> list[list[str]]:
    spec = _spec(nodes)
    sweep = Sweep(spec, Store(tmp_path / f"r{nodes}{served}.db"), _Quiet(),  # type: ignore[arg-type]
                  options=SweepOptions(served=served, side_by_side="on"))
    return [[c.name for c in w] for w in waves(sweep.ctx, [sweep.ctx.candidate(x) for x in spec.layouts])]


def test_a_sweep_on_one_node_stays_sequential(tmp_path: Path) -> None:
    assert _sweep_waves(tmp_path, 1, served=True) == [["tp8"], ["tp4x2"]]
    assert _sweep_waves(tmp_path, 2, served=True) == [["tp8", "tp4x2"]]
    assert _sweep_waves(tmp_path, 2, served=False) == [["tp8"], ["tp4x2"]]  # virtual time


def test_placed_to_dict_names_nodes() -> None:
    (wave,) = pack([parse_layout("tp8"), parse_layout("tp4x2")], 2, 8)
    assert isinstance(wave[1], Placed)
    assert wave[1].to_dict(["node0", "node1"]) == {
        "nodes": ["node1"],
        "replicas": [
            [{"node": "node1", "gpu_ids": [0, 1, 2, 3]}], [{"node": "node1", "gpu_ids": [4, 5, 6, 7]}]
        ],
    }


def test_a_real_engine_is_pinned_to_its_share() -> None:
    from orchestrator.candidate import Candidate
    from orchestrator.catalog.loader import load_gpu, load_model
    from orchestrator.engines import get_engine, resolve_settings
    from orchestrator.engines.base import EngineOptions

    # tp4x2 on node1 of a wave whose tp8 holds node0: CUDA_VISIBLE_DEVICES per replica, on node1
    (wave,) = pack([parse_layout("tp8"), parse_layout("tp4x2")], 2, 8)
    where = Placement(("node0", "node1"), 8, base_port=20000, usable_gpus=wave[1].usable_gpus(2))
    for engine in ("vllm", "sglang"):
        settings = resolve_settings(engine, load_gpu("h100-sxm"), load_model("qwen2.5-7b"))
        candidate = Candidate(parse_layout("tp4x2"), settings)
        plan = get_engine(engine).launch_plan(candidate, EngineOptions(model="m"), where)
        procs = [p for r in plan.replicas for p in r.processes]
        assert [(p.node_index, p.env_dict["CUDA_VISIBLE_DEVICES"]) for p in procs] == [
            (1, "0,1,2,3"), (1, "4,5,6,7")
        ], engine
        assert [r.openai_base_url for r in plan.replicas] == [
            "http://node1:20000/v1", "http://node1:20010/v1"
        ], engine


def test_nodes_held_counts_whole_nodes_of_the_spec_size() -> None:
    assert nodes_held([8.0, 8.0], 8) == 2
    assert nodes_held([16.0], 8) == 2  # one Ray node of 16 fake GPUs holds two nodes of 8
    assert nodes_held([8.0, 4.0, 0.0], 8) == 1  # a 4-GPU node holds no 8-GPU node; a CPU-only head none
    assert nodes_held([], 8) == 0


class _FakeRay:
    def __init__(self, node_gpus: list[float]) -> None:
        self.node_gpus = node_gpus

    def nodes(self) -> list[dict[str, object]]:
        return [{"Alive": True, "Resources": {"GPU": g, "CPU": 8.0}} for g in self.node_gpus]


def _ray_sweep_waves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nodes: int, node_gpus: list[float],
                     layouts: tuple[str, ...] = ("tp8", "tp4x2")) -> tuple[list[list[str]], Sweep]:
    from orchestrator.deploy.ray import RayTarget

    monkeypatch.setattr(RayTarget, "connect", lambda self: _FakeRay(node_gpus))
    spec = _spec(nodes, "vllm", kind="ray").model_copy(update={"layouts": [parse_layout(x) for x in layouts]})
    sweep = Sweep(spec, Store(tmp_path / f"r{len(node_gpus)}.db"), _Quiet(),  # type: ignore[arg-type]
                  options=SweepOptions(served=True, side_by_side="on", workdir=str(tmp_path / "w")))
    sweep.ctx.store.create_run(
        run_id=sweep.run_id, spec_path=None, spec_json=spec.model_dump(mode="json"), spec_hash="x",
        engine="vllm", engine_version=None, model="m", model_config_hash=None, orch_version="0",
        hardware={}, metadata={},
    )
    candidates = [sweep.ctx.candidate(x) for x in spec.layouts]
    return [[c.name for c in w] for w in waves(sweep.ctx, candidates)], sweep


def test_on_ray_the_waves_are_sized_from_the_cluster_when_it_has_less(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The spec claims 3 nodes of 8; the cluster has two: tp4 waits for a second wave, and one line says why.
    got, sweep = _ray_sweep_waves(tmp_path, monkeypatch, 3, [8.0, 8.0], ("tp8", "tp4x2", "tp4"))
    assert got == [["tp8", "tp4x2"], ["tp4"]]
    cluster = SideRecords(sweep.ctx.store, sweep.run_id).cluster()
    assert cluster is not None
    assert cluster["packed_nodes"] == 2 and cluster["ray_node_gpus"] == [8.0, 8.0]
    assert cluster["note"].startswith("side by side: the spec claims 3 x 8 GPUs, the Ray cluster at")
    assert "has 16 (2 nodes); layouts share it as 2 x 8" in cluster["note"]
    assert placement_lines({"cluster": cluster})[0] == cluster["note"]


def test_on_ray_a_cluster_as_big_as_the_spec_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got, sweep = _ray_sweep_waves(tmp_path, monkeypatch, 2, [16.0])
    assert got == [["tp8", "tp4x2"]]
    assert SideRecords(sweep.ctx.store, sweep.run_id).cluster() is None
    got, _ = _ray_sweep_waves(tmp_path, monkeypatch, 2, [8.0, 0.0])  # 8 of the 16 claimed
    assert got == [["tp8"], ["tp4x2"]]
