"""The cost model's formula fixes (issue 14 item 5), each pinned to a hand calculation."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.catalog.types import LinkSpec
from orchestrator.layout import parse_layout
from orchestrator.plan.checks import Cluster
from orchestrator.plan.comm import allreduce_time_s
from orchestrator.plan.inputs import PlanInputs, layout_cost
from orchestrator.plan.memory import stage_layer_counts
from orchestrator.plan.params import count_params
from tests.support.engines import fixed_settings

DSV3 = load_model("deepseek-v3")
QWEN = load_model("qwen2.5-72b")
H200 = load_gpu("h200")


def _ds(gpu=H200, **kw) -> PlanInputs:  # type: ignore[no-untyped-def]
    return PlanInputs(cfg=DSV3, gpu=gpu, cluster=Cluster(1, 8), weight_dtype="fp8",
                      weight_bytes_per_value=1.0, settings=fixed_settings(8192), **kw)


def test_mla_decode_attention_in_the_absorbed_form() -> None:
    cost = layout_cost(_ds(), parse_layout("tp8"))
    st = cost.stages[0]
    # Per head and (token, context) pair: prefill 2 (d_qk + d_v) = 2 (192 + 128) = 640 FLOPs; absorbed
    # decode scores against the 512 latent + 64 rope dims and reads values from the latent: 2 (576 + 512).
    assert st.attn_flops_per_pair == 2 * 128 * 320 * 61 / 8
    assert st.decode_attn_flops_per_pair == 2 * 128 * 1088 * 61 / 8
    assert st.decode_attn_flops_per_pair / st.attn_flops_per_pair == pytest.approx(3.4)
    # One decode token over 4,096 context tokens: 2*128*1088*61*4096/8 = 8.70e9 FLOPs per GPU, at the
    # bf16 peak (fp8 weights, no FP8 attention) x 0.5: 17.6 us.
    attn_s = cost.step(1, 0, 4096).compute_s - cost.step(1, 0, 0).compute_s
    assert attn_s == pytest.approx(8.699e9 / (989e12 * 0.5), rel=1e-3)
    assert attn_s * 1e6 == pytest.approx(17.6, abs=0.05)
    # A prefill's pairs stay in the non-absorbed form.
    pre = cost.step(1, 0, 4096, prefill_pairs=4096).compute_s - cost.step(1, 0, 0).compute_s
    assert pre == pytest.approx(attn_s / 3.4)


def test_attention_runs_at_the_bf16_peak_unless_fp8_attention() -> None:
    fp8 = layout_cost(_ds(), parse_layout("tp8"))
    assert fp8.flops_per_s == 1979e12 * 0.5  # the linear layers use FP8 tensor cores
    assert fp8.attn_flops_per_s == 989e12 * 0.5  # attention does not, without an FP8 KV cache
    fp8_attn = layout_cost(_ds(fp8_attention=True), parse_layout("tp8"))
    assert fp8_attn.attn_flops_per_s == 1979e12 * 0.5
    slow = fp8.prefill(4096).compute_s
    fast = fp8_attn.prefill(4096).compute_s
    st = fp8.stages[0]
    pairs = 4096 * 4097 / 2
    attn_flops = st.attn_flops_per_pair * pairs  # 2*128*320*61/8 = 624,640 x 8.39e6 pairs = 5.24e12
    assert attn_flops == pytest.approx(5.241e12, rel=1e-3)
    assert slow - fast == pytest.approx(attn_flops / (989e12 * 0.5) - attn_flops / (1979e12 * 0.5))


def test_pp_layers_split_as_vllm_splits_them() -> None:
    # vllm/distributed/utils.py get_pp_indices: even split, the remainder on the stages before the last.
    assert stage_layer_counts(61, 4) == (15, 15, 16, 15)
    assert stage_layer_counts(63, 4) == (16, 16, 16, 15)
    assert stage_layer_counts(80, 3) == (27, 27, 26)
    assert stage_layer_counts(62, 4) == (15, 16, 16, 15)
    assert stage_layer_counts(80, 8) == (10,) * 8
    cost = layout_cost(_ds(), parse_layout("tp2pp4"))
    # DeepSeek-V3: layers 0-2 dense. Stage 2 holds layers 30-45, 16 MoE layers.
    assert [st.moe_layers for st in cost.stages] == [12, 15, 16, 15]


def test_moe_experts_have_their_own_efficiency() -> None:
    counts = count_params(DSV3)
    cost = layout_cost(_ds(), parse_layout("tp8"))
    assert H200.moe_compute_efficiency == 0.2
    assert cost.expert_flops_per_s == 1979e12 * 0.2
    # Expert FLOPs of a 4,096-token prefill on tp8: 2 * 44.04M params per expert * 58 MoE layers / 8
    # ranks = 638.6 MFLOP per routed row, x 4,096 * 8 routed rows = 2.09e13. The grouped GEMMs pad
    # each expert's rows to 64 (4,096 tokens > 256 experts): 128 rows per expert are 2 + (1 - e^-2)/2
    # = 2.432 blocks, 256 * 64 * 2.432 = 39,851 rows for 32,768 (x 1.216). At 1979e12 x 0.2: 64.3 ms
    # (at the dense 0.5 it would be 25.7 ms).
    assert counts.routed_expert == 3 * 7168 * 2048
    rows = 256 * 64 * (2 + (1 - math.exp(-2)) / 2)
    assert rows == pytest.approx(39851, abs=1)
    expert_flops = 2 * counts.routed_expert * 58 / 8 * rows
    assert expert_flops == pytest.approx(2.0925e13 * rows / 32768, rel=1e-3)
    same = layout_cost(_ds(gpu=replace(H200, moe_compute_efficiency=0.5)), parse_layout("tp8"))
    extra = cost.prefill(4096).compute_s - same.prefill(4096).compute_s
    assert extra == pytest.approx(expert_flops / (1979e12 * 0.2) - expert_flops / (1979e12 * 0.5))
    assert extra * 1e3 == pytest.approx(64.3 - 25.7, abs=0.1)


def test_moe_activation_passes_are_paid_at_the_hbm_rate() -> None:
    """vLLM's fused-MoE passes beside the GEMMs (plan/moe.py), hand-counted for DeepSeek-V3 FP8 tp8:
    d 7168, expert slice n = 2048/8 = 256, FP8 GEMM inputs. Per routed row: gathered input 7168 x 1 B,
    cache1 2n x 2 = 1,024, silu_and_mul 1,024 + 512, quantize 512 + 256, GEMM 2 input 256 x 1, cache3
    7168 x 2, moe_sum read 7168 x 2: 39,424 B. Per token: moe_sum write 14,336 + input quantize 14,336
    + 7,168 = 35,840 B. A 4,096-token prefill moves 32,768 rows and 4,096 tokens of them in each of
    58 MoE layers: 83.4 GB, 21.7 ms at the preset's 4.8 TB/s x 0.8."""
    cost = layout_cost(_ds(), parse_layout("tp8"))
    st = cost.stages[0]
    assert st.expert_act_bytes_per_routed_token == 39424 * 58
    assert st.expert_act_bytes_per_token == 35840 * 58
    moved = (39424 * 32768 + 35840 * 4096) * 58
    assert moved == pytest.approx(83.44e9, rel=1e-3)
    bare = replace(st, expert_act_bytes_per_routed_token=0.0, expert_act_bytes_per_token=0.0)
    none = replace(cost, stages=(bare,))
    extra = cost.prefill(4096).compute_s - none.prefill(4096).compute_s
    assert cost.hbm_bytes_per_s == 4.8e12 * 0.8
    assert extra * 1e3 == pytest.approx(moved / (4.8e12 * 0.8) * 1e3, rel=1e-9)
    assert extra * 1e3 == pytest.approx(21.7, abs=0.05)
    # Under EP every rank holds whole experts (n = 2048) and computes 1/8 of the rows.
    ep = layout_cost(_ds(), parse_layout("dp8ep")).stages[0]
    per_row_ep = 7168 + 4 * 2048 + 6 * 2048 + 2048 + 2 * 7168 * 2 + 3 * 2048
    assert ep.expert_act_bytes_per_routed_token == pytest.approx(per_row_ep * 58 / 8)


def test_mla_chunked_prefill_re_expands_the_cached_latent() -> None:
    """A prefill chunk after the first re-expands its prompt's cached latent with kv_b_proj: 2 x r 512
    x (128/8 heads) x (nope 128 + v 128) = 4.19 MFLOP per prefix token and layer on tp8, x 61 layers =
    255.9 MFLOP; a chunk over an 8,192-token prefix pays 2.10 TFLOP more, 2.12 ms at 1979e12 x 0.5."""
    cost = layout_cost(_ds(), parse_layout("tp8"))
    assert cost.stages[0].mla_expand_flops_per_prefix_token == 2 * 512 * 16 * 256 * 61
    pairs = 4096 * (8192 + 4097 / 2)
    base = cost.round_s(4096, 8192, pairs, 1, prefill_pairs=pairs)
    later = cost.round_s(4096, 8192, pairs, 1, prefill_pairs=pairs, prefix_tokens=8192)
    assert (later - base) * 1e3 == pytest.approx(8192 * 255.85e6 / (1979e12 * 0.5) * 1e3, rel=1e-3)
    assert (later - base) * 1e3 == pytest.approx(2.12, abs=0.01)
    dense = layout_cost(PlanInputs(cfg=QWEN, gpu=H200, cluster=Cluster(1, 8), settings=fixed_settings(8192)),
                        parse_layout("tp8"))
    assert dense.stages[0].mla_expand_flops_per_prefix_token == 0.0


def test_fixed_step_overhead_beside_the_bandwidth_term() -> None:
    gpu = replace(load_gpu("h100-sxm"), step_overhead_s=2e-3)
    inp = PlanInputs(cfg=QWEN, gpu=gpu, cluster=Cluster(1, 8), settings=fixed_settings(8192))
    cost = layout_cost(inp, parse_layout("tp8"))
    for batch in (8, 500):
        # no attention pairs: the compute is the GEMMs', beside the weight stream; the KV read follows
        p = cost.step(batch, batch * 1000, 0.0)
        # the fixed costs reported together: the step's 2 ms and 80 layers' 40 us floor (3.2 ms)
        assert p.overhead_s == pytest.approx(2e-3 + 80 * 40e-6)
        busy = max(p.weight_read_s, p.compute_s) + p.kv_read_s
        assert p.total_s == pytest.approx(busy + p.tp_comm_s + p.overhead_s)
        assert cost.round_s(batch, batch * 1000, 0.0, batch) == pytest.approx(p.total_s)
        p = cost.step(batch, batch * 1000, batch * 1000)
        assert cost.round_s(batch, batch * 1000, batch * 1000, batch) == pytest.approx(p.total_s)
    # Under PP it is paid once per round, not per micro-batch: tp4pp2 at batch 2 runs 2 micro-batches.
    pp = layout_cost(inp, parse_layout("tp4pp2"))
    no_over = layout_cost(replace(inp, gpu=replace(gpu, step_overhead_s=0.0)), parse_layout("tp4pp2"))
    assert pp.round_s(2, 2000, 2000, 2) - no_over.round_s(2, 2000, 2000, 2) == pytest.approx(2e-3)


def test_allreduce_latency_per_collective() -> None:
    ring = LinkSpec("nvlink", 450e9, 2e-6)
    custom = replace(ring, allreduce_latency_s=8e-6)
    size = 16 * 8192 * 2
    # Ring: 14 hops x 2 us = 28 us + 14/8 * 262,144 B / 450 GB/s = 1.02 us.
    assert allreduce_time_s(size, 8, ring) * 1e6 == pytest.approx(28 + 1.019, abs=0.01)
    # A measured 8 us per call replaces the hop latencies.
    assert allreduce_time_s(size, 8, custom) * 1e6 == pytest.approx(8 + 1.019, abs=0.01)


def test_gemms_and_attention_are_two_rooflines_one_after_the_other() -> None:
    """A step on one stream runs the weight-streaming GEMMs and then attention: max(weights, GEMM FLOPs)
    + max(KV, attention FLOPs). At batch 1,024 over 2,000-token contexts (Qwen2.5-72B, tp8, H100) the
    GEMMs are compute-bound and attention reads 2M tokens of KV: the step is longer than one max over
    all reads and all FLOPs would make it, by no more than the smaller of the two sides."""
    inp = PlanInputs(cfg=QWEN, gpu=load_gpu("h100-sxm"), cluster=Cluster(1, 8), settings=fixed_settings(8192))
    cost = layout_cost(inp, parse_layout("tp8"))
    batch, ctx = 1024, 2000
    p = cost.step(batch, batch * ctx, batch * ctx)
    gemm_only = cost.step(batch, batch * ctx, 0.0)  # the same step without attention's FLOPs
    assert gemm_only.compute_s > gemm_only.weight_read_s  # the GEMMs are compute-bound at this batch
    one_max = max(p.weight_read_s + p.kv_read_s, p.compute_s)
    busy = p.total_s - p.tp_comm_s - p.overhead_s
    assert busy > one_max
    assert busy - one_max <= min(p.kv_read_s, gemm_only.compute_s) + 1e-12
    # a plain decode step prices the same through the simulator's per-batch pricer (bit-identical)
    pricer = cost.decode_pricer(batch)
    assert pricer is not None
    assert pricer(batch * ctx, batch * ctx) == cost.round_s(batch, batch * ctx, batch * ctx, batch)


def test_every_layer_pays_a_fixed_floor_per_step() -> None:
    """GPUSpec.layer_overhead_s: a layer's kernels cost a fixed time beside their bytes and FLOPs, paid by
    every layer of a stage at every step, whatever the batch. Qwen2.5-72B has 80 layers: on tp8 at the
    H100 preset's 40 us, 80 x 40 us = 3.2 ms per step at batch 1 and at batch 256 alike; under pp2 each
    stage pays its own 40 layers (1.6 ms)."""
    h100 = load_gpu("h100-sxm")
    assert h100.layer_overhead_s == 40e-6
    assert QWEN.num_layers == 80

    def cost(layout: str, layer_overhead_s: float):  # type: ignore[no-untyped-def]
        gpu = replace(h100, layer_overhead_s=layer_overhead_s)
        inp = PlanInputs(cfg=QWEN, gpu=gpu, cluster=Cluster(1, 8), settings=fixed_settings(8192))
        return layout_cost(inp, parse_layout(layout))

    with_floor, without = cost("tp8", 40e-6), cost("tp8", 0.0)
    for batch in (1, 256):
        ctx = batch * 2000
        extra = with_floor.round_s(batch, ctx, ctx, batch) - without.round_s(batch, ctx, ctx, batch)
        assert extra == pytest.approx(80 * 40e-6)
        pricer = with_floor.decode_pricer(batch)  # the simulator's decode pricer: bit-identical
        assert pricer is not None
        assert pricer(ctx, ctx) == with_floor.round_s(batch, ctx, ctx, batch)
    # the step's parts report it with the step overhead, and still add up to the total
    p = with_floor.step(1, 2000, 2000)
    assert p.overhead_s == pytest.approx(h100.step_overhead_s + 3.2e-3)
    q = without.step(1, 2000, 2000)
    assert p.total_s - q.total_s == pytest.approx(3.2e-3)
    pp_floor, pp_none = cost("tp4pp2", 40e-6), cost("tp4pp2", 0.0)
    stages = [a - b for a, b in zip(pp_floor.stage_times_s(1, 2000, 2000),
                                    pp_none.stage_times_s(1, 2000, 2000), strict=True)]
    assert stages == pytest.approx([40 * 40e-6, 40 * 40e-6])
