"""The prefill/decode planner: transfer bytes by hand, pool rates, which binds, splits, TTFT parts."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.disagg import DisaggLayout, parse_disagg
from orchestrator.layout import Layout, parse_layout
from orchestrator.plan.capacity import kv_capacity_tokens
from orchestrator.plan.checks import Cluster
from orchestrator.plan.decode import decode_estimate
from orchestrator.plan.disagg import (
    decode_engine,
    plan_disagg,
    prefill_engine,
)
from orchestrator.plan.disagg_search import output_tokens_per_s_per_gpu, plan_splits, rank_key
from orchestrator.plan.inputs import PlanInputs, layout_cost
from orchestrator.plan.kv_transfer import kv_transfer_bytes_per_token, kv_transfer_time_s
from orchestrator.plan.memory import kv_bytes_per_token
from tests.support.engines import fixed_settings

QWEN = load_model("qwen2.5-72b")  # 80 layers, 8 KV heads of 128
DSV3 = load_model("deepseek-v3")  # MLA: 61 layers of (512 + 64) latent values
H100 = load_gpu("h100-sxm")


def _inputs(nodes: int = 1, **kw: object) -> PlanInputs:
    return PlanInputs(cfg=QWEN, gpu=H100, cluster=Cluster(nodes, 8), settings=fixed_settings(8192), **kw)  # type: ignore[arg-type]


def _plan(text: str, nodes: int = 1, prompt: int = 4096, output: int = 256, itl: float | None = 50.0,
          **kw: object):  # type: ignore[no-untyped-def]
    return plan_disagg(_inputs(nodes, **kw), parse_disagg(text), engine="vllm", prompt_tokens=prompt,
                       output_tokens=output, itl_bound_ms=itl)


def test_transfer_bytes_by_hand() -> None:
    tp4 = Layout(tp=4)
    # Equal TP: each GPU holds and moves 2 of the 8 heads: 80 layers * 2 (K, V) * 2 heads * 128 * 2 B.
    assert kv_transfer_bytes_per_token(QWEN, 2.0, tp4, tp4) == 80 * 2 * 2 * 128 * 2
    # Decode TP 8 reads from prefill TP 4: a prefill GPU sends its 2 heads to 2 decode GPUs (1 each).
    assert kv_transfer_bytes_per_token(QWEN, 2.0, tp4, Layout(tp=8)) == 80 * 2 * 2 * 128 * 2
    # Decode TP 2 gathers from two prefill GPUs: each decode GPU receives 4 heads.
    assert kv_transfer_bytes_per_token(QWEN, 2.0, tp4, Layout(tp=2)) == 80 * 2 * 4 * 128 * 2
    # The whole model's KV on one GPU each side.
    assert kv_transfer_bytes_per_token(QWEN, 2.0, Layout(), Layout()) == kv_bytes_per_token(QWEN, 2.0)
    # MLA: every rank keeps the whole latent; a prefill rank serves d/p decode ranks.
    latent = 61 * (512 + 64) * 2
    assert kv_transfer_bytes_per_token(DSV3, 2.0, tp4, tp4) == latent
    assert kv_transfer_bytes_per_token(DSV3, 2.0, tp4, Layout(tp=8)) == 2 * latent
    # Prefill PP 2: a prefill GPU sends half the layers, the decode GPU receives all of them.
    assert kv_transfer_bytes_per_token(QWEN, 2.0, Layout(tp=4, pp=2), tp4) == 80 * 2 * 2 * 128 * 2


def test_transfer_time_is_alpha_beta_and_nvlink_beats_the_network() -> None:
    tp4 = Layout(tp=4)
    per_token = kv_transfer_bytes_per_token(QWEN, 2.0, tp4, tp4)
    ib = kv_transfer_time_s(QWEN, 2.0, tp4, tp4, 8192, H100.inter_node)
    link = H100.inter_node
    assert ib == pytest.approx(link.latency_s + per_token * 8192 / link.bandwidth_bytes_per_s)
    assert kv_transfer_time_s(QWEN, 2.0, tp4, tp4, 8192, H100.intra_node) < ib / 5
    assert kv_transfer_time_s(QWEN, 2.0, tp4, tp4, 16384, H100.inter_node) > 1.9 * ib


def test_capacity_is_the_smallest_pool_and_says_which() -> None:
    row = _plan("p:tp4+d:tp4")
    assert row.fits, row.rejected_because
    assert row.capacity_rps == min(row.prefill_rps, row.decode_rps, row.transfer_rps)
    assert row.binds == "prefill"  # 4k-token prompts: one TP4 prefill engine cannot feed a TP4 decoder
    assert row.output_tokens_per_s_per_gpu == pytest.approx(row.capacity_rps * 256 / 8)
    more_prefill = _plan("p:tp4x3+d:tp4", nodes=2)
    assert more_prefill.prefill_rps == pytest.approx(3 * row.prefill_rps, rel=1e-9)
    assert more_prefill.decode_rps == pytest.approx(row.decode_rps)
    # A balanced split of the same 16 GPUs serves at least as many requests as the one asked for.
    assert more_prefill.balanced_rps >= more_prefill.capacity_rps


def test_balanced_split_and_ratio() -> None:
    row = _plan("p:tp4x2+d:tp8", nodes=2, itl=None)
    assert row.fits, row.rejected_because
    # The ratio is the decode replica's rate over the prefill replica's.
    assert row.decode_per_prefill_replica == pytest.approx(row.decode_rps / (row.prefill_rps / 2), rel=1e-6)
    if row.balanced is not None:
        assert row.balanced.gpus == row.gpus and row.balanced_rps > row.capacity_rps


def test_ttft_is_the_sum_of_its_parts() -> None:
    inputs = _inputs()
    pd = parse_disagg("p:tp4+d:tp4")
    row = plan_disagg(inputs, pd, engine="vllm", prompt_tokens=4096, output_tokens=256, itl_bound_ms=50)
    pf = prefill_engine(inputs, Layout(tp=4), 4096)
    dec = decode_engine(inputs, Layout(tp=4), 4096, 256, 50)
    link = H100.intra_node  # 8 GPUs: one node
    transfer = kv_transfer_time_s(QWEN, 2.0, Layout(tp=4), Layout(tp=4), 4096, link)
    assert row.transfer_ms == pytest.approx(transfer * 1e3)
    assert row.ttft_ms == pytest.approx((pf.alone_s + transfer + dec.first_step_s) * 1e3)
    assert row.ttft_loaded_ms > row.ttft_ms  # the prefill queue at 80% of capacity


def test_decode_steps_carry_no_prefill_chunks() -> None:
    inputs = _inputs()
    cost = layout_cost(inputs, Layout(tp=4))
    kv, _, _ = kv_capacity_tokens(inputs, cost)
    plain = decode_estimate(cost, Layout(tp=4), 32, 4224, kv, step_budget_tokens=8192)
    charged = decode_estimate(cost, Layout(tp=4), 32, 4224, kv, prompt_tokens=4096, output_tokens=256,
                              step_budget_tokens=8192)
    dec = decode_engine(inputs, Layout(tp=4), 4096, 256, None)
    assert dec.best is not None and dec.best.chunk_step_fraction == 0.0
    assert plain.itl_ms < charged.itl_ms  # the aggregated engine pays for the prompts it prefills


def test_prefill_kv_held_until_transfer_can_limit_the_pool() -> None:
    # Little's law: a prefill engine holds KV/prompt prompts for (prefill + transfer) seconds.
    pf = prefill_engine(_inputs(), Layout(tp=4), 4096)
    rate, limited = pf.rate_rps(4096, transfer_s=0.0)
    assert not limited and rate == pf.compute_rps
    slow_link = 10 * pf.kv_tokens / 4096 / pf.compute_rps  # a transfer long enough to fill its KV
    rate, limited = pf.rate_rps(4096, transfer_s=slow_link)
    assert limited and rate < pf.compute_rps


def test_rejections_name_the_pool_and_the_rule() -> None:
    over = _plan("p:tp8+d:tp8")
    assert not over.fits and "pools overlap" in over.rejected_because[0]
    weights = _plan("p:tp1+d:tp4")
    assert any(r.startswith("prefill pool: weights") for r in weights.rejected_because)
    rule = _plan("p:tp4+d:tp2pp2")
    assert any("decode pool cannot use PP" in r for r in rule.rejected_because)
    heads = _plan("p:tp3+d:tp3")
    assert any(r.startswith("prefill pool: TP 3 does not divide") for r in heads.rejected_because)


def test_splits_of_n_gpus_rank_both_kinds() -> None:
    plan = plan_splits(_inputs(nodes=2), 16, engine="vllm", prompt_tokens=8192, output_tokens=256,
                       itl_bound_ms=40)
    assert plan.cluster == Cluster(2, 8)
    kinds = {type(r).__name__ for r in plan.rows}
    # Aggregated layouts of all 16 GPUs are there, one replica of 16 included.
    assert any(not isinstance(r.layout, DisaggLayout) and r.layout.gpus_per_replica == 16 for r in plan.rows)
    assert kinds == {"PlanRow", "DisaggRow"}
    assert all(r.gpus == 16 for r in plan.rows)
    names = [str(r.layout) for r in plan.rows]
    assert len(names) == len(set(names))
    pairs = [r for r in plan.rows if isinstance(r.layout, DisaggLayout)]
    assert len(pairs) == plan.splits
    # Every split of tp4 shapes is there: p:tp4 x n_p + d:tp4 x (4 - n_p).
    assert {f"p:tp4x{n}+d:tp4x{4 - n}".replace("x1+", "+").replace("x1", "") for n in (1, 2, 3)} <= set(names)
    keys = [rank_key(r) for r in plan.rows]
    assert keys == sorted(keys)
    fitting = [output_tokens_per_s_per_gpu(r) for r in plan.rows if rank_key(r)[0] == 0]
    assert fitting == sorted(fitting, reverse=True) and fitting[0] > 0


def test_split_planning_needs_two_gpus() -> None:
    from orchestrator.errors import SpecError

    with pytest.raises(SpecError, match="at least 2 GPUs"):
        plan_splits(_inputs(), 1, engine="vllm", prompt_tokens=10, output_tokens=10, itl_bound_ms=None)


def test_pair_planner_uses_the_aggregated_cost_model() -> None:
    # A decode pool's ITL is the aggregated decode estimate at the same batch, not a second formula.
    row = _plan("p:tp4+d:tp4", itl=None)
    assert row.decode is not None and row.decode.best is not None
    best = row.decode.best
    inputs = _inputs()
    cost = layout_cost(inputs, parse_layout("tp4"))
    kv, _, _ = kv_capacity_tokens(inputs, cost)
    again = decode_estimate(cost, parse_layout("tp4"), best.batch, best.context_tokens, kv,
                            step_budget_tokens=8192)
    assert again.itl_ms == best.itl_ms
    assert math.isclose(row.itl_ms, best.itl_ms)
    assert replace(row).layout == row.layout
