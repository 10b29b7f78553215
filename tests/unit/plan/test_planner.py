"""The planner pinned to hand calculations (DESIGN.md "Cost model")."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.layout import parse_layout
from orchestrator.plan.checks import Cluster
from orchestrator.plan.comm import allreduce_time_s
from orchestrator.plan.enumerate import enumerate_layouts
from orchestrator.plan.inputs import PlanInputs, layout_cost
from orchestrator.plan.memory import kv_bytes_per_token, stage_layer_counts
from orchestrator.plan.params import count_params
from orchestrator.plan.planner import plan_layout
from tests.support.engines import fixed_settings

QWEN = load_model("qwen2.5-72b")
H100 = load_gpu("h100-sxm")
H100_IDEAL = load_gpu("h100-sxm", {"hbm_efficiency": 1.0, "compute_efficiency": 1.0})


def _inputs(cfg=QWEN, gpu=H100, nodes=1, **kw) -> PlanInputs:  # type: ignore[no-untyped-def]
    return PlanInputs(cfg=cfg, gpu=gpu, cluster=Cluster(nodes, 8), settings=fixed_settings(8192), **kw)


def test_kv_bytes_per_token_anchor() -> None:
    # 2 * 80 layers * 8 KV heads * 128 dims * 2 bytes
    assert kv_bytes_per_token(QWEN, 2.0) == 327_680


@pytest.mark.parametrize(("tp", "ms"), [(2, 21.3), (4, 10.7), (8, 5.3)])
def test_weight_read_anchor_at_batch_1(tp: int, ms: float) -> None:
    cost = layout_cost(_inputs(gpu=H100_IDEAL), parse_layout(f"tp{tp}"))
    parts = cost.step(1, 0, 0)
    # (72.7e9 - 1.25e9 input embedding, a lookup) params * 2 bytes / tp / 3.35e12 B/s
    assert parts.weight_read_s * 1e3 == pytest.approx(ms, abs=0.05)


def test_input_embedding_is_a_lookup_of_b_rows() -> None:
    cost = layout_cost(_inputs(gpu=H100_IDEAL), parse_layout("tp8"))
    counts = count_params(QWEN)
    held = counts.total * 2 / 8  # every parameter is held ...
    for batch in (1, 64):
        # ... but of the 152,064 x 8,192 embedding only B rows are read: B * 8192 * 2 / 8 bytes.
        read = (held - counts.embedding * 2 / 8 + batch * 8192 * 2 / 8) / 3.35e12
        assert cost.step(batch, 0, 0).weight_read_s == pytest.approx(read, rel=1e-12)
    # tp8, batch 1: 18.17 GB held, 17.86 GB read per step: 5.33 ms at 3.35 TB/s.
    assert cost.step(1, 0, 0).weight_read_s * 1e3 == pytest.approx(5.33, abs=0.01)


def test_efficiency_divides_the_bandwidth() -> None:
    ideal = layout_cost(_inputs(gpu=H100_IDEAL), parse_layout("tp8")).step(1, 0, 0).weight_read_s
    real = layout_cost(_inputs(gpu=H100), parse_layout("tp8")).step(1, 0, 0).weight_read_s
    assert real == pytest.approx(ideal / H100.hbm_efficiency)


def test_kv_capacity_by_hand() -> None:
    row = plan_layout(_inputs(), parse_layout("tp8"))
    counts = count_params(QWEN)
    weights = counts.total * 2 / 8  # bf16, embedding and head split too
    usable = 81559 * 2**20 * 0.9 - 2e9  # nvidia-smi's 81,559 MiB
    # vLLM's start-up profile peak, the larger of its two runs: the sampler run, 256 requests
    # (max_num_seqs) x the whole vocabulary x 14 bytes (bf16 logits, their float32 copy, float32
    # probabilities, the exponential draw); the forward on 8,192 tokens, the residual and layer input
    # (2 H) beside the MLP's gate_up and activation (3 x intermediate / 8), bf16.
    sampler = 256 * QWEN.vocab_size * (2 + 4 + 4 + 4)
    forward = 8192 * (2 * QWEN.hidden_size + 3 * QWEN.intermediate_size / 8) * 2
    usable -= max(sampler, forward)
    per_gpu_kv = 80 * 2 * 1 * 128 * 2  # one KV head per GPU at TP8
    assert row.weight_bytes_per_gpu == pytest.approx(weights, rel=1e-9)
    # vLLM's pool: 16-token blocks of every layer, one of them the null block (kv_cache_utils.py).
    blocks = math.floor((usable - weights) / (per_gpu_kv * 16)) - 1
    assert row.kv_tokens_per_replica == blocks * 16
    assert row.fits and not row.rejected_because


def test_tp_beyond_kv_heads_replicates_kv_and_warns() -> None:
    tp8 = plan_layout(_inputs(nodes=2), parse_layout("tp8"))
    tp16 = plan_layout(_inputs(nodes=2), parse_layout("tp16"))
    assert tp16.kv_bytes_per_token_per_gpu == tp8.kv_bytes_per_token_per_gpu
    assert any("KV heads are replicated" in w for w in tp16.warnings)
    assert any("crosses the node boundary" in w for w in tp16.warnings)


def test_rejections_name_the_reason() -> None:
    inp = _inputs()
    assert "exceed the usable" in plan_layout(inp, parse_layout("tp1x8")).rejected_because[0]
    assert "cluster has 8" in plan_layout(inp, parse_layout("tp8x2")).rejected_because[0]
    heads = plan_layout(inp, parse_layout("tp3")).rejected_because[0]
    assert "does not divide the 64 attention heads" in heads
    assert "EP on a dense model" in plan_layout(inp, parse_layout("dp8ep")).rejected_because[0]
    int4 = replace(inp, weight_dtype="int4", weight_bytes_per_value=0.5 + 2 / 128)
    reasons = plan_layout(int4, parse_layout("tp8")).rejected_because
    assert any("29568/8 = 3696 is not a multiple of 128" in r for r in reasons)
    short = replace(inp, settings=fixed_settings(2_000_000))
    assert "less than max_model_len" in plan_layout(short, parse_layout("tp8")).rejected_because[0]


def test_allreduce_ring_formula() -> None:
    link = H100.intra_node
    size = 16 * 8192 * 2
    expected = 14 * link.latency_s + 14 / 8 * size / link.bandwidth_bytes_per_s
    assert allreduce_time_s(size, 8, link) == pytest.approx(expected)
    assert allreduce_time_s(size, 1, link) == 0.0
    cost = layout_cost(_inputs(), parse_layout("tp8"))
    assert cost.step(16, 0, 0).tp_comm_s == pytest.approx(160 * expected)


def test_tp_across_nodes_pays_the_slow_link() -> None:
    inside = layout_cost(_inputs(nodes=2), parse_layout("tp8")).tp_link
    across = layout_cost(_inputs(nodes=2), parse_layout("tp16")).tp_link
    assert inside == H100.intra_node and across == H100.inter_node


def test_pp_token_visits_every_stage() -> None:
    inp = _inputs()
    tp4 = layout_cost(inp, parse_layout("tp4"))
    tp4pp2 = layout_cost(inp, parse_layout("tp4pp2"))
    # Same weights per token read in total: PP gives no latency gain at batch 1.
    one = tp4pp2.decode_round_s(1, 1000)[1]
    assert one >= tp4.decode_round_s(1, 1000)[1]
    assert stage_layer_counts(80, 3) == (27, 27, 26)
    row = plan_layout(inp, parse_layout("tp4pp2"), batches=(64,))
    assert row.decode[0].microbatches == 2
    assert row.pp_idle_fraction == pytest.approx(1 / 3)


def test_moe_reads_touched_experts_only() -> None:
    mix = load_model("mixtral-8x7b")
    cost = layout_cost(_inputs(cfg=mix, gpu=H100_IDEAL), parse_layout("tp8"))
    st = cost.stages[0]
    assert cost.touched_fraction(1) == pytest.approx(2 / 8)
    assert cost.step(1, 0, 0).weight_read_s == pytest.approx(
        (st.dense_weight_bytes - st.lookup_bytes + st.lookup_row_bytes + 0.25 * st.expert_weight_bytes)
        / 3.35e12)
    # At serving batches nearly every expert is read.
    assert cost.touched_fraction(64) > 0.999


def test_ep_spreads_experts_and_pays_imbalance() -> None:
    mix = load_model("mixtral-8x7b")
    inp = _inputs(cfg=mix)
    ep = layout_cost(inp, parse_layout("dp8ep"))
    tp = layout_cost(inp, parse_layout("tp8"))
    assert ep.stages[0].expert_weight_bytes == pytest.approx(tp.stages[0].expert_weight_bytes)
    assert ep.expert_imbalance > 1.0  # seeded lognormal popularity over 8 ranks
    uniform = replace(inp, expert_popularity=(1 / 8,) * 8)
    assert layout_cost(uniform, parse_layout("dp8ep")).expert_imbalance == pytest.approx(1.0)
    assert ep.step(16, 0, 0).ep_comm_s > 0 and tp.step(16, 0, 0).ep_comm_s == 0


def test_prefill_is_compute_bound_and_matches_hand_count() -> None:
    cost = layout_cost(_inputs(gpu=H100_IDEAL), parse_layout("tp8"))
    parts = cost.prefill(4096)
    assert parts.bound == "compute"
    counts = count_params(QWEN)
    linear = 2 * counts.active_without_embedding * 4096 / 8
    attention = 2 * 64 * 256 * 80 * (4096 * 4097 / 2) / 8
    assert parts.compute_s == pytest.approx((linear + attention) / 989e12, rel=1e-6)


def test_enumeration_covers_the_cluster() -> None:
    dense = {str(x) for x in enumerate_layouts(QWEN, Cluster(1, 8))}
    assert {"tp8", "tp4x2", "tp2x4", "tp1x8", "tp4pp2", "pp8"} <= dense
    assert not any("ep" in x for x in dense)
    moe = {str(x) for x in enumerate_layouts(load_model("deepseek-v3"), Cluster(2, 8))}
    assert {"dp16ep", "dp8epx2", "tp8pp2", "tp8x2"} <= moe
    assert all(parse_layout(x).gpus == 16 for x in moe)


def test_best_batch_respects_itl_bound() -> None:
    inp = _inputs()
    free = plan_layout(inp, parse_layout("tp8"))
    tight = plan_layout(inp, parse_layout("tp8"), itl_bound_ms=20.0)
    assert free.best is not None and tight.best is not None
    assert tight.best.itl_ms <= 20.0 < free.best.itl_ms
    assert tight.best.batch < free.best.batch


def test_redundant_experts_lower_the_ep_imbalance() -> None:
    ds = load_model("deepseek-v3")
    inp = PlanInputs(cfg=ds, gpu=load_gpu("h200"), cluster=Cluster(1, 8), weight_dtype="fp8",
                     weight_bytes_per_value=1.0, settings=fixed_settings(8192))
    plain = layout_cost(inp, parse_layout("dp8ep"))
    eplb = layout_cost(replace(inp, num_redundant_experts=16), parse_layout("dp8ep"))
    assert eplb.expert_imbalance < plain.expert_imbalance
    # the busiest rank computes less; each rank holds (256 + 16) / 8 = 34 expert slots instead of 32
    assert eplb.step(64, 0, 0).compute_s < plain.step(64, 0, 0).compute_s
    experts = [st.expert_weight_bytes for st in eplb.stages], [st.expert_weight_bytes for st in plain.stages]
    assert experts[0] == pytest.approx([b * 272 / 256 for b in experts[1]])
