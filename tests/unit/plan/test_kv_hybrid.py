"""KV per layer kind and vLLM's hybrid allocator layout (plan/kv.py), by hand; and the layouts vendors
advertise for the hybrid models now fitting."""

from __future__ import annotations

import math

from orchestrator.catalog.loader import load_model
from orchestrator.layout import parse_layout
from orchestrator.plan.kv import kv_cache_shape
from orchestrator.plan.planner import plan_layout
from orchestrator.plan.run import make_plan
from orchestrator.spec.models import SweepSpec


def test_gemma3_groups_pad_sliding_layers_to_the_full_group() -> None:
    cfg = load_model("gemma-3-27b")
    shape = kv_cache_shape(cfg, range(62), kv_bytes_per_value=2.0, tp=1)
    per_token = 2 * 16 * 128 * 2
    assert shape.block_tokens == 16 and shape.page_bytes == 16 * per_token
    # 10 full layers are the group size; 52 sliding layers split into ceil(52/10) = 6 groups.
    kinds = sorted((g.kind, g.layers) for g in shape.groups)
    assert kinds == [("full", 10), ("sliding", 8), ("sliding", 8), ("sliding", 9), ("sliding", 9),
                     ("sliding", 9), ("sliding", 9)]
    assert shape.bytes_per_block == 10 * 16 * per_token
    # One 131072-token sequence: 8192 full blocks + 6 sliding groups x (1024/16 + 1) blocks.
    assert shape.blocks_per_sequence(131072) == 8192 + 6 * 65
    assert shape.blocks_per_sequence(500) == 32 + 6 * 32  # a short sequence: its window has not slid
    free = 20e9
    assert shape.sequences(free, 131072) == (math.floor(free / shape.bytes_per_block) - 1) // (8192 + 390)


def test_qwen3_next_state_pages_raise_the_block_size() -> None:
    cfg = load_model("qwen3-next-80b-a3b")
    shape = kv_cache_shape(cfg, range(48), kv_bytes_per_value=2.0, tp=1)
    state = (2 * 2048 + 4096) * 3 * 2 + 32 * 128 * 128 * 2  # conv + delta state, bf16
    per_token = 2 * 2 * 256 * 2
    assert shape.block_tokens == 16 * math.ceil(state / (16 * per_token)) == 544
    assert shape.page_bytes == 544 * per_token >= state
    assert sorted((g.kind, g.layers) for g in shape.groups) == [("full", 12)] + [("state", 12)] * 3
    assert shape.blocks_per_sequence(131072) == math.ceil(131072 / 544) + 3
    assert shape.state_bytes_per_sequence == 36 * state
    # TP2 halves both the heads' KV (1 of 2 KV heads) and the state (16 of 32 value heads)
    tp2 = kv_cache_shape(cfg, range(48), kv_bytes_per_value=2.0, tp=2)
    assert tp2.full_bytes_per_token == shape.full_bytes_per_token / 2
    assert tp2.state_bytes_per_sequence == shape.state_bytes_per_sequence / 2


def test_vllm_start_check_counts_window_plus_the_step_budget() -> None:
    cfg = load_model("gpt-oss-120b")
    shape = kv_cache_shape(cfg, range(36), kv_bytes_per_value=2.0, tp=1)
    page = 16 * 2 * 8 * 64 * 2
    full = math.ceil(131072 / 16) * 18 * page
    sliding = (math.ceil((128 - 1 + 8192) / 16) + 1) * 18 * page  # SlidingWindowSpec.max_memory_usage_bytes
    assert shape.max_len_bytes(131072, 8192) == full + sliding


def _spec(model: str, gpu: str, max_len: int, dtype: str | None = None) -> SweepSpec:
    m: dict[str, object] = {"name": model, "max_model_len": max_len}
    if dtype:
        m["weight_dtype"] = dtype
    return SweepSpec.model_validate({
        "model": m, "hardware": {"gpu": gpu}, "engine": {"name": "vllm"},
        "workload": {"input_tokens": 1000, "output_tokens": 1000, "rates_per_s": [1], "num_requests": 10},
        "layouts": ["tp1"]})


def test_gpt_oss_120b_mxfp4_on_one_h100_at_131k_fails_vllms_start_check() -> None:
    """vLLM's Triton MXFP4 backend on Hopper keeps the experts' scales twice (plan/memory.py), so the
    weights take ~64 GiB (vLLM logs 64.38 GiB, issue #33155) and one 131,072-token request no longer
    fits beside them at gpu_memory_utilization 0.9; vLLM refuses it too (issue #27508: 1.71 GiB of
    KV at 0.95). It fits at 65,536 tokens, and at 131,072 on an H200."""
    result = make_plan(_spec("gpt-oss-120b", "h100-sxm", 131072, "mxfp4"), layouts=[parse_layout("tp1")])
    row = result.rows[0]
    assert result.inputs.weight_dtype == "mxfp4" and result.inputs.mxfp4_backend == "triton"
    assert not row.fits and "sliding-window layers' blocks" in row.rejected_because[0]
    # the pool holds more full-attention tokens than max_model_len: the message says what is short
    assert "full-attention tokens per engine, but one max_model_len 131072 request" in row.rejected_because[0]
    # MXFP4 experts (0.5 + 1/32 byte, scales held twice) and bf16 attention, router, embeddings
    assert 64.0 * 2**30 < row.weight_bytes_per_gpu < 64.38 * 2**30
    # the same model with every layer full attention would hold 36 layers of KV per token, not 18
    assert row.kv_bytes_per_token_per_gpu == 18 * 2 * 8 * 64 * 2
    half = make_plan(_spec("gpt-oss-120b", "h100-sxm", 65536, "mxfp4"), layouts=[parse_layout("tp1")]).rows[0]
    assert half.fits, half.rejected_because
    h200 = make_plan(_spec("gpt-oss-120b", "h200", 131072, "mxfp4"), layouts=[parse_layout("tp1")]).rows[0]
    assert h200.fits, h200.rejected_because


def test_gemma3_27b_bf16_fits_one_h100_at_128k() -> None:
    row = make_plan(_spec("gemma-3-27b", "h100-sxm", 131072, "bf16"), layouts=[parse_layout("tp1")]).rows[0]
    assert row.fits, row.rejected_because
    assert row.max_batch >= 1


def test_every_layer_full_attention_would_not_fit() -> None:
    """What the planner did before it read layer kinds: gemma-3-27b as 62 full layers at 128k."""
    result = make_plan(_spec("gemma-3-27b", "h100-sxm", 131072, "bf16"), layouts=[parse_layout("tp1")])
    from dataclasses import replace
    flat = replace(result.inputs, cfg=replace(result.inputs.cfg, layer_kinds=()))
    assert not plan_layout(flat, parse_layout("tp1")).fits
