"""Gaps between the simulator and the cost model, each pinned to a hand calculation: the per-request
overhead in the arrival path (and in the planner's TTFT), and MLA's two attention forms in a step
that mixes prefill chunks and decodes."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.errors import SpecError
from orchestrator.layout import parse_layout
from orchestrator.plan.checks import Cluster
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.plan.inputs import PlanInputs, layout_cost
from orchestrator.plan.planner import plan_layout
from orchestrator.sim.build import replica_engines
from orchestrator.sim.engine import EngineConfig, EngineCore, Seq
from orchestrator.sim.loops import closed_loop, simulate
from orchestrator.sim.virtual import SimRequest
from orchestrator.spec.load import load_spec
from tests.support.engines import LIMITS, fixed_settings
from tests.support.paths import ROOT

H100 = load_gpu("h100-sxm")
LLAMA8B = load_model("llama-3.1-8b")


def _inputs(request_overhead_s: float) -> PlanInputs:
    gpu = replace(H100, request_overhead_s=request_overhead_s)
    return PlanInputs(cfg=LLAMA8B, gpu=gpu, cluster=Cluster(1, 8), settings=fixed_settings(8192))


# -- the per-request overhead ------------------------------------------------------------------------

def test_one_request_pays_the_overhead_once_before_its_prefill() -> None:
    inputs = _inputs(5e-3)
    (eng,) = replica_engines(inputs, parse_layout("tp1"))
    cost = eng.cost
    (rec,), summary = simulate([eng], [SimRequest("a", 1.0, 1000, 4)])
    prefill_s = cost.prefill(1000).total_s  # one 1,000-token chunk alone, step overhead included
    # Decodes at context 1001, 1002, 1003: one token each, KV of the context read.
    decode_s = [cost.round_s(1, c, c + 1, 1) for c in (1001, 1002, 1003)]
    assert rec.sent_s == 1.0
    assert rec.chunk_times_s[0] == pytest.approx(1.0 + 5e-3 + prefill_s, rel=1e-12)
    assert rec.done_s == pytest.approx(1.0 + 5e-3 + prefill_s + sum(decode_s), rel=1e-12)
    assert summary.steps == 4
    # Without the overhead everything is 5 ms earlier, and nothing else changes.
    (eng0,) = replica_engines(_inputs(0.0), parse_layout("tp1"))
    (rec0,), _ = simulate([eng0], [SimRequest("a", 1.0, 1000, 4)])
    assert [t + 5e-3 for t in rec0.chunk_times_s] == pytest.approx(rec.chunk_times_s, rel=1e-12)


def test_the_planners_ttft_charges_the_same_overhead() -> None:
    inputs = _inputs(7e-3)
    row = plan_layout(inputs, parse_layout("tp1"), prompt_tokens=1000)
    prefill_s = layout_cost(inputs, parse_layout("tp1")).prefill(1000).total_s
    assert row.prefill_ms == pytest.approx((7e-3 + prefill_s) * 1e3)
    # ... and it is what the simulator measures for that prompt alone.
    (eng,) = replica_engines(inputs, parse_layout("tp1"))
    (rec,), _ = simulate([eng], [SimRequest("a", 0.0, 1000, 1)])
    assert rec.ttft_s is not None and rec.ttft_s * 1e3 == pytest.approx(row.prefill_ms)


def test_requests_in_front_of_the_engine_are_not_yet_scheduled() -> None:
    """Two requests 1 ms apart with a 10 ms overhead: the second reaches the engine while the first's
    prefill runs, so it waits for that step to end (as a request arriving then would)."""
    inputs = _inputs(10e-3)
    (eng,) = replica_engines(inputs, parse_layout("tp1"))
    cost = eng.cost
    a, b = simulate([eng], [SimRequest("a", 0.0, 2000, 1), SimRequest("b", 1e-3, 2000, 1)])[0]
    step_a = cost.prefill(2000).total_s
    assert step_a > 1e-3  # b's arrival (11 ms) falls inside a's step (10 ms to 10 ms + step_a)
    assert a.chunk_times_s[0] == pytest.approx(10e-3 + step_a)
    # b's prompt is a chunk of its own in the next step (nothing decodes: a wanted one token).
    assert b.chunk_times_s[0] == pytest.approx(10e-3 + step_a + cost.prefill(2000).total_s)


def test_closed_loop_client_holds_its_slot_through_the_overhead() -> None:
    inputs = _inputs(4e-3)
    (eng,) = replica_engines(inputs, parse_layout("tp1"))
    cost = eng.cost
    records, _ = closed_loop([eng], [SimRequest(str(i), 0.0, 500, 1) for i in range(3)], 1)
    one = 4e-3 + cost.prefill(500).total_s
    assert [r.sent_s for r in records] == pytest.approx([0.0, one, 2 * one])
    assert [r.done_s for r in records] == pytest.approx([one, 2 * one, 3 * one])


def test_a_request_too_long_for_the_cache_is_refused_after_the_overhead() -> None:
    cost = layout_cost(_inputs(3e-3), parse_layout("tp1"))
    eng = EngineCore(cost, EngineConfig(kv_capacity_tokens=1000, **LIMITS))
    records, summary = closed_loop([eng], [SimRequest("big", 0.0, 5000, 10), SimRequest("ok", 0.0, 100, 1)],
                                   1)
    big, ok = records
    assert big.error == "http_400" and big.done_s == pytest.approx(3e-3) and summary.rejected == 1
    # The refusal frees the client's slot: the next request goes out when the 400 comes back.
    assert ok.sent_s == pytest.approx(3e-3)
    assert ok.done_s == pytest.approx(6e-3 + cost.prefill(100).total_s)


def _spec(tmp_path: Path, overrides: str) -> Path:
    text = (ROOT / "layouts" / "qwen72b.yaml").read_text()
    out = tmp_path / "spec.yaml"
    out.write_text(text.replace("  nodes: 1\n", f"  nodes: 1\n  overrides: {overrides}\n"))
    return out


def test_hardware_overrides_set_it_and_plan_reports_it(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, "{request_overhead_s: 2.5e-3}"))
    inputs = plan_inputs(spec)
    assert inputs.gpu.request_overhead_s == 2.5e-3 and "overridden: request_overhead_s" in inputs.gpu.source
    assert load_gpu("h100-sxm").request_overhead_s == 0.0  # unmeasured on GPUs: not charged
    assert load_gpu("cpu").request_overhead_s == pytest.approx(49e-3)  # fitted to a vLLM-CPU run
    out = subprocess.run([sys.executable, "-c", "from orchestrator.cli import main; main()", "plan",
                          str(tmp_path / "spec.yaml"), "--layouts", "spec", "--json"],
                         capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["assumptions"]["request_overhead_s"] == 2.5e-3
    with pytest.raises(SpecError, match="request_overhead_s: must be non-negative"):
        plan_inputs(load_spec(_spec(tmp_path, "{request_overhead_s: -1.0e-3}")))


# -- MLA prefill pairs in a mixed step -------------------------------------------------------------

DSV3 = load_model("deepseek-v3")
H200 = load_gpu("h200")


def test_mixed_step_charges_mla_decodes_in_the_absorbed_form() -> None:
    inputs = PlanInputs(cfg=DSV3, gpu=H200, cluster=Cluster(1, 8), weight_dtype="fp8",
                        weight_bytes_per_value=1.0, settings=fixed_settings(16384))
    cost = layout_cost(inputs, parse_layout("tp8"))
    eng = EngineCore(cost, EngineConfig(kv_capacity_tokens=10**6, max_num_seqs=64,
                                        max_num_batched_tokens=200_000, block_tokens=16))
    for i in range(16):
        eng.add(Seq(f"d{i}", 8000, 100, 0.0))
    eng.complete(eng.schedule())  # all 16 prompts in one step; each has emitted its first token
    eng.add(Seq("new", 4000, 100, 0.0))
    plan = eng.schedule()
    # 16 decodes, each over its 8,000 + 1 context tokens and itself; one 4,000-token chunk from scratch.
    assert plan.decodes == 16 and plan.tokens == 16 + 4000
    decode_pairs = 16 * 8001 + 16
    prefill_pairs = 4000 * 4001 / 2
    assert plan.prefill_pairs == prefill_pairs
    assert plan.attn_pairs == decode_pairs + prefill_pairs
    # Per layer and GPU (tp8): prefill form 2*128*(192+128)/8 = 10,240 FLOPs per pair, absorbed decode
    # form 2*128*(2*512+64)/8 = 34,816; 61 layers; attention at the bf16 peak x 0.5 = 494.5 TFLOP/s.
    extra_flops = decode_pairs * (34_816 - 10_240) * 61  # 1.919e11
    assert extra_flops == pytest.approx(1.919e11, rel=1e-3)
    parts = cost.step(plan.tokens, plan.kv_tokens, plan.attn_pairs, prefill_pairs=prefill_pairs)
    assert parts.bound == "compute"  # so the extra FLOPs show in the step time one for one
    as_before = cost.round_s(plan.tokens, plan.kv_tokens, plan.attn_pairs, plan.sequences)  # all prefill
    assert eng.step_time_s(plan) - as_before == pytest.approx(extra_flops / (989e12 * 0.5), rel=1e-6)
    assert (eng.step_time_s(plan) - as_before) * 1e3 == pytest.approx(0.388, abs=0.001)
    # A dense model has one attention form: the split changes nothing there.
    dense = layout_cost(_inputs(0.0), parse_layout("tp1"))
    assert dense.round_s(4016, 128016, plan.attn_pairs, 17, prefill_pairs=prefill_pairs) == \
        dense.round_s(4016, 128016, plan.attn_pairs, 17)
