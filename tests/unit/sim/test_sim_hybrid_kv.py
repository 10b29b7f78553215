"""The simulator charges a hybrid model's window and state blocks per running sequence (plan/kv.py)."""

from __future__ import annotations

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.layout import parse_layout
from orchestrator.plan.capacity import kv_capacity
from orchestrator.plan.checks import Cluster
from orchestrator.plan.inputs import PlanInputs, layout_cost
from orchestrator.sim.build import replica_engines
from orchestrator.sim.engine import Seq
from tests.support.engines import fixed_settings


def _inputs(model: str) -> PlanInputs:
    return PlanInputs(cfg=load_model(model), gpu=load_gpu("h200"), cluster=Cluster(1, 8),
                      settings=fixed_settings(32768))


def test_side_blocks_are_charged_and_freed() -> None:
    inputs = _inputs("qwen3-next-80b-a3b")
    (eng,) = replica_engines(inputs, parse_layout("tp4"))
    cap = kv_capacity(inputs, layout_cost(inputs, parse_layout("tp4")))
    side = cap.side_tokens(2000)
    assert side > 0  # 3 state groups of one block each, in full-attention tokens
    eng.add(Seq("a", prompt_tokens=1000, max_tokens=1000, arrival_s=0.0))
    plan = eng.schedule()
    assert eng.side_kv == side
    eng.complete(plan)  # the prompt's KV is held once its chunk ran
    assert eng.kv_used_tokens() >= 1000 + side
    plan = eng.schedule()
    while eng.has_work():
        eng.complete(plan)
        plan = eng.schedule()
    assert eng.side_kv == 0


def test_full_attention_models_have_no_side_charge() -> None:
    inputs = _inputs("llama-3.1-8b")
    (eng,) = replica_engines(inputs, parse_layout("tp1"))
    assert eng.config.side_kv_tokens is None
