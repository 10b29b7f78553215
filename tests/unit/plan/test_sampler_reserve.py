"""vLLM's start-up sampler run, counted out of the KV pool of the last PP stage (plan/memory.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.layout import parse_layout
from orchestrator.plan.capacity import kv_capacity
from orchestrator.plan.checks import Cluster
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.plan.inputs import PlanInputs, layout_cost
from orchestrator.plan.memory import SAMPLER_BYTES_PER_LOGIT, sampler_profile_bytes
from orchestrator.spec.models import SweepSpec
from tests.support.engines import fixed_settings

LLAMA70 = load_model("llama-3.1-70b")
H100 = load_gpu("h100-sxm")


def _inputs(profile: str, **settings: int) -> PlanInputs:
    return PlanInputs(cfg=LLAMA70, gpu=H100, cluster=Cluster(1, 8),
                      settings=replace(fixed_settings(8192), **settings), sampler_profile=profile)


def test_rows_are_the_profile_runs_requests_over_the_whole_vocabulary() -> None:
    # 256 requests of the 8,192-token run; a 128-token budget gives 128 one-token requests.
    assert sampler_profile_bytes(128256, 256, 8192, "no-sort") == 256 * 128256 * 14.0
    assert sampler_profile_bytes(128256, 1024, 128, "sort") == 128 * 128256 * 28.0
    assert sampler_profile_bytes(128256, 256, 8192, "none") == 0.0
    assert SAMPLER_BYTES_PER_LOGIT["sort"] > SAMPLER_BYTES_PER_LOGIT["no-sort"]


@pytest.mark.parametrize("layout", ["tp4", "tp2pp2"])
def test_only_the_last_stage_loses_the_sampler_peak(layout: str) -> None:
    shape = parse_layout(layout)
    base = _inputs("none", max_num_seqs=1024)
    cost = layout_cost(base, shape)
    without = kv_capacity(base, cost)
    with_ = kv_capacity(_inputs("no-sort", max_num_seqs=1024), cost)
    peak = sampler_profile_bytes(LLAMA70.vocab_size, 1024, 8192, "no-sort")
    assert with_.sampler_bytes == peak
    # the forward's activations at 8,192 tokens: the residual and layer input (2 x 8,192) beside the
    # MLP's gate_up and activation (3 x 28,672 / TP), bf16
    forward = 8192 * (2 * 8192 + 3 * 28672 / shape.tp) * 2
    assert without.forward_bytes == with_.forward_bytes == forward < peak
    # vLLM's profile peak is the larger of the forward and the sampler run, not their sum
    assert with_.rooms[-1] == pytest.approx(without.rooms[-1] - (peak - forward))
    assert with_.rooms[:-1] == without.rooms[:-1]
    assert with_.tokens < without.tokens


def test_more_sequences_leave_less_kv() -> None:
    cost = layout_cost(_inputs("no-sort"), parse_layout("tp4"))
    small = kv_capacity(_inputs("no-sort", max_num_seqs=64), cost).tokens
    large = kv_capacity(_inputs("no-sort", max_num_seqs=1024), cost).tokens
    assert large < small


def _spec(engine: dict[str, object]) -> SweepSpec:
    return SweepSpec.model_validate({
        "model": {"name": "llama-3.1-70b"}, "hardware": {"gpu": "h100-sxm", "nodes": 1},
        "engine": engine, "workload": {"input_tokens": 128, "output_tokens": 128, "rates_per_s": [1.0],
                                         "num_requests": 10},
        "layouts": ["tp4"]})


def test_engines_without_a_sampler_run_keep_their_pool() -> None:
    assert plan_inputs(_spec({"name": "vllm"})).sampler_profile == "no-sort"
    assert plan_inputs(_spec({"name": "sim"})).sampler_profile == "no-sort"
    assert plan_inputs(_spec({"name": "sglang"})).sampler_profile == "none"
    no_evict = _spec({"name": "sim", "sim_scheduler": "guaranteed-no-evict"})
    assert plan_inputs(no_evict).sampler_profile == "none"
