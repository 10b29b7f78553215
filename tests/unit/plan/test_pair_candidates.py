"""A spec's prefill/decode pairs as candidates, and what no deployment of one can do (exit 2, one line
naming the layout and the fix, before anything runs)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.disagg import parse_disagg
from orchestrator.errors import SpecError
from orchestrator.plan.candidates import check_pairs, disagg_candidate, pair_problem
from orchestrator.plan.from_spec import engine_settings
from orchestrator.spec.models import SweepSpec


def _spec(**changes: Any) -> SweepSpec:
    data: dict[str, Any] = {
        "model": {"name": "qwen2.5-7b", "max_model_len": 8192},
        "hardware": {"gpu": "h100-sxm", "nodes": 1},
        "engine": {"name": "vllm"},
        "workload": {"rates_per_s": [1], "num_requests": 4},
        "layouts": ["tp8"],
    }
    data.update(changes)
    return SweepSpec.model_validate(data)


@pytest.mark.parametrize(("layout", "spec", "words"), [
    ("p:tp16+d:tp4", {}, "the prefill pool tp16 needs 16 GPUs, the cluster has 8"),
    ("p:tp4x2+d:tp4", {}, "the pools overlap: prefill 8 + decode 4 = 12 GPUs"),
    ("p:tp1+d:tp1", {"disagg": {"transfer_backend": "ExampleConnector"},
                     "target": {"kind": "kubernetes", "image": "vllm/vllm-openai:v0.32.0"}},
     "pods do not have; use disagg.transfer_backend: NixlConnector"),
    ("p:tp8+d:tp8", {"disagg": {"transfer_backend": "ExampleConnector"}, "hardware": {"gpu": "h100-sxm",
                                                                                     "nodes": 2}},
     "both pools must fit one 8-GPU node"),
    ("p:tp4+d:tp4", {"engine": {"name": "sim", "sim_scheduler": "guaranteed-no-evict"}},
     "runs vLLM's scheduler, not guaranteed-no-evict"),
])
def test_what_no_deployment_can_run_names_the_layout_and_the_fix(layout: str, spec: dict[str, Any],
                                                                 words: str) -> None:
    s = _spec(**spec)
    why = pair_problem(s, parse_disagg(layout))
    assert why is not None and why.startswith(f"layout {layout}: ") and words in why, why
    with pytest.raises(SpecError, match="layout"):
        check_pairs(s, [parse_disagg(layout)])


def test_pairs_that_fit_pass() -> None:
    assert pair_problem(_spec(), parse_disagg("p:tp2x2+d:tp4")) is None
    assert pair_problem(_spec(hardware={"gpu": "h100-sxm", "nodes": 2}), parse_disagg("p:tp8+d:tp8")) is None


def test_each_pool_takes_its_own_settings_and_expert_slots() -> None:
    spec = _spec(model={"name": "deepseek-v3"}, hardware={"gpu": "h200", "nodes": 44},
                 engine={"name": "sglang", "num_redundant_experts": 32, "max_num_seqs": 64},
                 disagg={"transfer_backend": "nixl", "router_policy": "round_robin",
                         "decode": {"max_num_seqs": 128, "num_redundant_experts": 64}})
    base = engine_settings(spec)
    c = disagg_candidate(spec, parse_disagg("p:tp4dp8ep+d:tp4dp80ep"), base)
    assert c.prefill.settings == base and c.prefill.num_redundant_experts == 32
    assert c.decode.settings.max_num_seqs == 128 and c.decode.num_redundant_experts == 64
    assert c.decode.settings.source("max_num_seqs") == "spec"
    assert c.transfer == "nixl" and c.router_policy == "round_robin" and c.engine == "sglang"
    assert c.name == "p:tp4dp8ep+d:tp4dp80ep"


def test_the_default_transfer_is_the_engines() -> None:
    assert disagg_candidate(_spec(), parse_disagg("p:tp4+d:tp4"), engine_settings(_spec())).transfer == \
        "NixlConnector"
    sg = _spec(engine={"name": "sglang"})
    assert disagg_candidate(sg, parse_disagg("p:tp4+d:tp4"), engine_settings(sg)).transfer == "mooncake"
