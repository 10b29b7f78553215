"""Speculative decoding in the planner: settings resolved against the model, the step formula, memory."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.errors import SpecError
from orchestrator.layout import Layout, parse_layout
from orchestrator.pipeline.validate import check_spec
from orchestrator.plan.capacity import kv_capacity, kv_capacity_tokens
from orchestrator.plan.checks import Cluster
from orchestrator.plan.decode import decode_estimate
from orchestrator.plan.inputs import PlanInputs, layout_cost, speculative_step_cost
from orchestrator.plan.params import count_params
from orchestrator.plan.planner import plan_layout
from orchestrator.plan.speculative import SpeculativeSettings, single_speculative, speculative_options
from orchestrator.spec.load import load_spec_lines
from orchestrator.spec.speculative import SpeculativeSpec
from tests.support.engines import fixed_settings

LLAMA70 = load_model("llama-3.1-70b")
H100 = load_gpu("h100-sxm")


def _spec(**kw: object) -> SpeculativeSpec:
    return SpeculativeSpec.model_validate(kw)


def _inputs(cfg=LLAMA70, **spec: object) -> PlanInputs:  # type: ignore[no-untyped-def]
    speculative = single_speculative(_spec(**spec), cfg) if spec else None
    settings = replace(fixed_settings(8192), speculative=speculative)
    return PlanInputs(cfg=cfg, gpu=H100, cluster=Cluster(1, 8), settings=settings)


def test_expected_accepted_tokens_are_the_sum_of_prefix_products() -> None:
    s = SpeculativeSettings("ngram", 3, (0.8, 0.5, 0.5))
    assert s.expected_accepted_tokens == pytest.approx(0.8 + 0.8 * 0.5 + 0.8 * 0.5 * 0.5)
    assert s.tokens_per_step == pytest.approx(2.4)
    assert SpeculativeSettings("ngram", 4, (1.0,) * 4).tokens_per_step == 5.0
    assert SpeculativeSettings("ngram", 4, (0.0,) * 4).tokens_per_step == 1.0


def test_mtp_needs_the_models_mtp_layers() -> None:
    with pytest.raises(SpecError, match=r"^engine\.speculative\.method: mtp .* llama-3\.1-70b's .* none"):
        speculative_options(_spec(method="mtp", num_speculative_tokens=1, acceptance_rate=0.8), LLAMA70)
    ds = load_model("deepseek-v3")
    assert ds.mtp_layers == 1
    (s,) = speculative_options(_spec(method="mtp", num_speculative_tokens=2, acceptance_rate=0.8), ds)
    assert s.drafter is not None and s.drafter.num_layers == 1 and s.drafter.is_moe
    assert s.shares_embedding and s.shares_lm_head


def test_mtp_above_its_layers_must_be_a_multiple_of_them() -> None:
    two = replace(load_model("deepseek-v3"), mtp_layers=2)
    with pytest.raises(SpecError, match=r"^engine\.speculative\.num_speculative_tokens: 3 .* multiple"):
        speculative_options(_spec(method="mtp", num_speculative_tokens=3, acceptance_rate=0.8), two)
    ok = speculative_options(_spec(method="mtp", num_speculative_tokens=[1, 2, 4], acceptance_rate=0.8), two)
    assert [s.num_speculative_tokens for s in ok] == [1, 2, 4] and ok[0].drafter_copies == 2


def test_a_draft_model_must_share_the_vocabulary() -> None:
    bad = _spec(method="draft_model", num_speculative_tokens=4, acceptance_rate=0.6,
                draft_model={"name": "qwen2.5-7b"})
    with pytest.raises(SpecError, match=r"^engine\.speculative\.draft_model\.name: the draft's vocabulary"):
        speculative_options(bad, LLAMA70)
    good = _spec(method="draft_model", num_speculative_tokens=4, acceptance_rate=0.6,
                 draft_model={"name": "llama-3.1-8b"})
    (s,) = speculative_options(good, LLAMA70)
    assert s.drafter is not None and s.drafter.name == "llama-3.1-8b"


def test_one_engine_needs_one_k() -> None:
    with pytest.raises(SpecError, match=r"num_speculative_tokens: \[2, 4\] is a list"):
        single_speculative(_spec(method="ngram", num_speculative_tokens=[2, 4], acceptance_rate=0.5), LLAMA70)


def test_validate_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("""model: {name: llama-3.1-8b}
hardware: {gpu: h100-sxm}
workload: {kind: random, input_tokens: 64, output_tokens: 32, rates_per_s: [1], num_requests: 10}
layouts: [tp1]
engine:
  speculative:
    method: mtp
    num_speculative_tokens: 2
    acceptance_rate: 0.7
""")
    with pytest.raises(SpecError) as err:
        check_spec(load_spec_lines(path), full=False)
    assert str(err.value).startswith(f"{path}:7: engine.speculative.method: mtp drafts with")


def test_speculation_pays_at_batch_one_and_loses_at_a_large_batch() -> None:
    off = _inputs()
    on = _inputs(method="ngram", num_speculative_tokens=4, acceptance_rate=0.5)
    layout = parse_layout("tp4")
    cost = layout_cost(on, layout)
    spec = speculative_step_cost(on, cost)
    assert spec is not None and spec.draft is None  # n-gram: no drafter on the GPU
    context = 600
    tpot_off = {b: cost.round_s(b, b * context, b * (context + 1), b) for b in (1, 512)}
    tpot_on = {b: spec.tpot_s(b, context) for b in (1, 512)}
    assert tpot_on[1] < 0.6 * tpot_off[1]  # memory-bound: k+1 tokens cost about one
    assert tpot_on[512] > tpot_off[512]  # compute-bound: verifying k+1 per sequence costs k+1
    # The planner's decode estimate says the same through the same formula.
    kv = kv_capacity_tokens(off, cost)[0]
    est_off = decode_estimate(cost, layout, 1, context, kv, step_budget_tokens=8192)
    est_on = decode_estimate(cost, layout, 1, context, kv, step_budget_tokens=8192, spec=spec)
    assert est_on.tokens_per_step == pytest.approx(spec.tokens_per_step)
    assert est_on.tpot_ms == pytest.approx(est_on.itl_ms / spec.tokens_per_step)
    assert est_on.itl_ms > est_off.itl_ms  # a step is longer ...
    assert est_on.tpot_ms < est_off.tpot_ms  # ... and gives more tokens
    assert plan_layout(on, layout).best is not None


def test_acceptance_zero_only_adds_cost() -> None:
    on = _inputs(method="draft_model", num_speculative_tokens=3, acceptance_rate=0.0,
                 draft_model={"name": "llama-3.1-8b"})
    cost = layout_cost(on, parse_layout("tp4"))
    spec = speculative_step_cost(on, cost)
    assert spec is not None
    for b in (1, 8, 64, 256):
        assert spec.tpot_s(b, 1000) > cost.round_s(b, b * 1000, b * 1001, b)


def test_a_drafters_weights_and_kv_take_cache_room() -> None:
    layout = Layout(tp=4)
    base = _inputs()
    cost = layout_cost(base, layout)
    tokens_off = kv_capacity_tokens(base, cost)[0]
    draft = _inputs(method="draft_model", num_speculative_tokens=3, acceptance_rate=0.6,
                    draft_model={"name": "llama-3.1-8b"})
    spec = speculative_step_cost(draft, cost)
    assert spec is not None
    # llama-3.1-8b in bf16 over TP4: about 16 GB / 4 per GPU, embedding and head included (nothing shared).
    assert spec.draft_weight_bytes_per_gpu == pytest.approx(16.06e9 / 4, rel=0.02)
    # KV per token: the 8B's 32 layers x 8 KV heads x 128 x 2 x 2 bytes over TP4.
    assert spec.draft_kv_bytes_per_token_per_gpu == pytest.approx(32 * 2 * 2 * 128 * 2)
    tokens_on = kv_capacity_tokens(draft, cost, spec)[0]
    assert tokens_on < tokens_off
    eagle = _inputs(method="eagle3", num_speculative_tokens=3, acceptance_rate=0.6)
    head = speculative_step_cost(eagle, cost)
    assert head is not None and head.draft is not None
    # One decoder layer plus its own LM head, the embedding shared: far below the 8B draft.
    layer_and_head = (LLAMA70.hidden_size * LLAMA70.vocab_size * 2 / 4)
    assert layer_and_head < head.draft_weight_bytes_per_gpu < 0.3 * spec.draft_weight_bytes_per_gpu


def test_mtp_shares_embedding_and_head() -> None:
    ds = replace(load_model("deepseek-v3"))
    mtp = single_speculative(_spec(method="mtp", num_speculative_tokens=1, acceptance_rate=0.8), ds)
    inputs = PlanInputs(cfg=ds, gpu=load_gpu("h200"), cluster=Cluster(1, 8), weight_dtype="fp8",
                        weight_bytes_per_value=1.0, settings=replace(fixed_settings(8192), speculative=mtp))
    cost = layout_cost(inputs, parse_layout("tp8"))
    spec = speculative_step_cost(inputs, cost)
    assert spec is not None and spec.draft is not None
    one_stage = spec.draft.stages[0]
    held = one_stage.dense_weight_bytes + one_stage.expert_weight_bytes
    shared = 2 * ds.vocab_size * ds.hidden_size * 2 / 8  # embedding + LM head, bf16, over TP8
    assert spec.draft_weight_bytes_per_gpu == pytest.approx(held - shared)


def test_a_drafters_kv_shares_the_pool_token_for_token() -> None:
    # Without window or state layers every cached token holds the model's KV and the drafter's: the
    # last stage's room (after both weights) over their bytes per token, to within a block.
    layout = Layout(tp=4)
    draft = _inputs(method="draft_model", num_speculative_tokens=3, acceptance_rate=0.6,
                    draft_model={"name": "llama-3.1-8b"})
    cost = layout_cost(draft, layout)
    spec = speculative_step_cost(draft, cost)
    assert spec is not None
    cap = kv_capacity(draft, cost, spec)
    own = cost.stages[-1].kv_bytes_per_token
    expected = cap.rooms[-1] / (own + spec.draft_kv_bytes_per_token_per_gpu)
    assert cap.tokens == pytest.approx(expected, abs=2 * cost.stages[-1].kv_shape.block_tokens)  # type: ignore[union-attr]
    # vLLM's start check counts the drafter's layers for a max_model_len request too.
    without = kv_capacity(draft, cost)
    assert (cap.max_len_shortfall(8192, 8192) - without.max_len_shortfall(8192, 8192)
            >= spec.draft_weight_bytes_per_gpu + 8192 * spec.draft_kv_bytes_per_token_per_gpu - 1)


def test_one_layer_drafters_are_full_attention_and_keep_the_models_moe() -> None:
    # Gemma-2 alternates sliding and full layers; its EAGLE head is one full-attention layer.
    gemma = load_model("gemma-2-27b")
    assert gemma.is_hybrid
    head = single_speculative(_spec(method="eagle3", num_speculative_tokens=2, acceptance_rate=0.6), gemma)
    assert head.drafter is not None and not head.drafter.is_hybrid and head.drafter.num_layers == 1
    inputs = _inputs(gemma, method="eagle3", num_speculative_tokens=2, acceptance_rate=0.6)
    cost = layout_cost(inputs, parse_layout("tp2"))
    spec = speculative_step_cost(inputs, cost)
    assert spec is not None
    assert kv_capacity(inputs, cost, spec).tokens < kv_capacity(inputs, cost).tokens
    # GLM-4.5's MTP layer is one of its MoE layers (its first three layers are dense).
    glm = load_model("glm-4.5")
    assert glm.mtp_layers == 1
    mtp = single_speculative(_spec(method="mtp", num_speculative_tokens=1, acceptance_rate=0.8), glm)
    assert mtp.drafter is not None and mtp.drafter.is_moe and mtp.drafter.mtp_layers == 0
    assert count_params(mtp.drafter).num_moe_layers == 1
