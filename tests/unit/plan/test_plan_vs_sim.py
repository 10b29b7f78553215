"""The planner charges prefill as the simulator's scheduler runs it, so `orch plan` and `orch simulate`
rank layouts the same way and predict throughput within a modest factor of each other (issue 14 item 4;
before, the planner's decode-only throughput was 4-6x the simulator's on long prompts)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from orchestrator.layout import parse_layout
from orchestrator.plan.capacity import kv_capacity_tokens
from orchestrator.plan.decode import decode_estimate
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.plan.inputs import layout_cost
from orchestrator.plan.run import make_plan
from orchestrator.sim.run import simulate_point
from orchestrator.spec.load import load_spec
from orchestrator.spec.models import SweepSpec
from tests.support.paths import ROOT

SPEC = ROOT / "layouts" / "qwen72b.yaml"


def _preset(spec: SweepSpec) -> SweepSpec:
    """The spec on the raw GPU preset: these tests are about the planner and the simulator agreeing
    on one set of constants, not about a calibration profile (which the sim engine now gets)."""
    hw = spec.hardware.model_copy(update={"calibration": "none"})
    return spec.model_copy(update={"hardware": hw})


def _long_variant(tmp_path: Path) -> Path:
    """4,000-token prompts, 500-token answers. max_num_seqs 64 keeps every layout clear of the KV
    limit, so the comparison is about prefill, not about preemption (the scheduler's own test)."""
    text = SPEC.read_text()
    text = text.replace("input_tokens: {kind: normal, mean: 1024, stddev: 256, min: 64, max: 4096}",
                        "input_tokens: 4000")
    text = text.replace("output_tokens: {kind: normal, mean: 256, stddev: 64, min: 16, max: 1024}",
                        "output_tokens: 500")
    text = text.replace("max_num_seqs: 256", "max_num_seqs: 64")
    text = text.replace("layouts: [tp8, tp4x2, tp2x4]", "layouts: [tp8, tp4x2, tp2x4, tp2pp4]")
    assert "input_tokens: 4000" in text and "max_num_seqs: 64" in text
    out = tmp_path / "long.yaml"
    out.write_text(text)
    return out


# Past capacity the batch takes 20 s and more to fill (prefill admits the queue at its own pace), and
# throughput counts the tokens streamed inside the measurement window: a 30-s warm-up and enough
# requests behind it measure the saturated steady state the planner describes, not the ramp.
WARMUP_S = 30.0


@pytest.mark.parametrize(("which", "rate", "requests"), [("chat", 50.0, 3000), ("long", 20.0, 1200)])
def test_plan_and_simulate_rank_layouts_alike(tmp_path: Path, which: str, rate: float,
                                              requests: int) -> None:
    path = SPEC if which == "chat" else _long_variant(tmp_path)
    spec = _preset(load_spec(path))
    spec = spec.model_copy(update={"workload": spec.workload.model_copy(update={"warmup_s": WARMUP_S})})
    plan = make_plan(spec, layouts=list(spec.layouts))
    fitting = [r for r in plan.rows if r.fits and r.best is not None]
    assert len(fitting) >= 2
    inputs = plan_inputs(spec)
    simulated: dict[str, float] = {}
    planned: dict[str, float] = {}
    for row in fitting:
        # Far above every layout's capacity: the simulator runs saturated, as the planner assumes.
        sp = simulate_point(spec, inputs, row.layout, rate, num_requests=requests)
        assert sp.summary.preemptions == 0
        per_gpu = (sp.result.metrics.per_gpu or {})["output_throughput"]
        simulated[str(row.layout)] = per_gpu
        # Saturated: the planner's estimate at its largest batch, prefill charged, no SLO tail.
        cost = layout_cost(inputs, row.layout)
        prompt, out = plan.prompt_tokens, plan.output_tokens
        planned[str(row.layout)] = decode_estimate(
            cost, row.layout, row.max_batch, plan.context_tokens, row.kv_tokens_per_replica,
            prompt_tokens=prompt, output_tokens=out,
            step_budget_tokens=inputs.max_num_batched_tokens).output_tokens_per_s_per_gpu
        ratio = planned[str(row.layout)] / per_gpu
        assert 0.8 < ratio < 1.4, (row.layout, ratio)
    assert sorted(planned, key=lambda k: -planned[k]) == sorted(simulated, key=lambda k: -simulated[k])


def test_prefill_charge_by_hand() -> None:
    spec = _preset(load_spec(SPEC))
    inputs = plan_inputs(spec)
    layout = parse_layout("tp8")
    cost = layout_cost(inputs, layout)
    kv = kv_capacity_tokens(inputs, cost)[0]
    assert inputs.max_num_batched_tokens == 8192  # vLLM's default on an H100
    # 64 sequences at 4,250 context; 4,000-token prompts, 500-token answers, budget 8,192 tokens:
    # each prompt goes in one chunk of 4,000 tokens, and 64/500 = 12.8% of the steps carry one.
    est = decode_estimate(cost, layout, 64, 4250, kv, prompt_tokens=4000, output_tokens=500,
                          step_budget_tokens=inputs.max_num_batched_tokens)
    decode_s = cost.decode_round_s(64, 4250)[1]
    pairs = 4000 * 4001 / 2
    chunk_s = cost.round_s(64 + 4000, 64 * 4250, 64 * 4250 + pairs, 65, prefill_pairs=pairs)
    assert est.prefill_chunk_tokens == 4000 and est.chunk_step_fraction == pytest.approx(0.128)
    mean_s = 0.128 * chunk_s + 0.872 * decode_s
    assert est.itl_ms == pytest.approx(mean_s * 1e3)
    assert est.output_tokens_per_s_per_gpu == pytest.approx(64 / mean_s / 8)
    # Decode alone would claim over twice the throughput: the 4,000-token chunk is ~200 ms of compute
    # against a ~14 ms decode step.
    alone = decode_estimate(cost, layout, 64, 4250, kv, step_budget_tokens=inputs.max_num_batched_tokens)
    assert alone.output_tokens_per_s_per_gpu > 2.0 * est.output_tokens_per_s_per_gpu
    assert math.isclose(alone.itl_ms, decode_s * 1e3)
    # A budget smaller than the prompt splits it into chunks of 2,048 - 64 = 1,984 tokens; the 512
    # prefill tokens a step needs (64 x 4000/500) then ride in 512/1,984 = 25.8% of the steps.
    small = decode_estimate(cost, layout, 64, 4250, kv, prompt_tokens=4000, output_tokens=500,
                            step_budget_tokens=2048)
    assert small.prefill_chunk_tokens == 1984
    assert small.chunk_step_fraction == pytest.approx(512 / 1984)
    # Short answers need more prefill per step than one chunk: every step carries 64 x 32/4 = 512
    # tokens (several prompts); a batch that would need more than the budget cannot be kept full.
    short = decode_estimate(cost, layout, 64, 40, kv, prompt_tokens=32, output_tokens=4,
                            step_budget_tokens=inputs.max_num_batched_tokens)
    assert short.chunk_step_fraction == 1.0 and short.prefill_chunk_tokens == 512
    capped = decode_estimate(cost, layout, 256, 4250, kv, prompt_tokens=4000, output_tokens=100,
                             step_budget_tokens=inputs.max_num_batched_tokens)
    assert capped.decoding == 8192 // 41
