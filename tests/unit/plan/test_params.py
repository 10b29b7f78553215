"""Parameter counts against the published model sizes and a hand count of Llama-3.1-8B."""

from __future__ import annotations

import pytest

from orchestrator.catalog.loader import load_model
from orchestrator.plan.params import count_params, layer_params, stage_params

PUBLISHED_TOTAL = {
    "qwen2.5-7b": 7.61e9,
    "qwen2.5-72b": 72.7e9,
    "llama-3.1-8b": 8.03e9,
    "llama-3.1-70b": 70.6e9,
    "llama-3.1-405b": 405e9,
    "mixtral-8x7b": 46.7e9,
    "deepseek-v2-lite": 15.7e9,
    "deepseek-v3": 671e9,
    "qwen3-30b-a3b": 30.5e9,
    "qwen3-235b-a22b": 235e9,
}


@pytest.mark.parametrize(("name", "published"), sorted(PUBLISHED_TOTAL.items()))
def test_total_within_one_percent(name: str, published: float) -> None:
    total = count_params(load_model(name)).total
    assert abs(total - published) / published < 0.01, f"{name}: {total / 1e9:.3f}B vs {published / 1e9}B"


# Qwen and Mistral count the embedding table in "active"; DeepSeek does not (a lookup is not a matmul).
PUBLISHED_ACTIVE = {
    "mixtral-8x7b": (12.9e9, "active"),
    "qwen3-30b-a3b": (3.3e9, "active"),
    "qwen3-235b-a22b": (22e9, "active"),
    "deepseek-v3": (37e9, "active_without_embedding"),
    "deepseek-v2-lite": (2.4e9, "active_without_embedding"),
}


@pytest.mark.parametrize(("name", "expected"), sorted(PUBLISHED_ACTIVE.items()))
def test_moe_active_close_to_published(name: str, expected: tuple[float, str]) -> None:
    published, attr = expected
    active = getattr(count_params(load_model(name)), attr)
    assert abs(active - published) / published < 0.05, f"{name}: {active / 1e9:.3f}B vs {published / 1e9}B"


def test_dense_models_active_equals_total() -> None:
    c = count_params(load_model("llama-3.1-70b"))
    assert c.active == c.total
    assert c.num_moe_layers == 0 and c.routed_expert == 0 and c.router_per_layer == 0


def test_llama_3_1_8b_by_hand() -> None:
    c = count_params(load_model("llama-3.1-8b"))
    d, V, f, L = 4096, 128256, 14336, 32
    assert c.embedding == V * d == 525_336_576
    assert c.lm_head == V * d  # not tied
    # q and o: d x d; k and v: d x (8 heads * 128) = d x 1024; no biases
    assert c.attention_per_layer == 2 * d * d + 2 * d * 1024 == 41_943_040
    assert c.dense_mlp_per_layer == 3 * d * f == 176_160_768
    assert c.norms_per_layer == 2 * d
    assert c.final_norm == d
    assert c.num_dense_layers == L and c.num_moe_layers == 0
    per_layer = 41_943_040 + 176_160_768 + 8192
    assert c.total == 2 * 525_336_576 + L * per_layer + d == 8_030_261_248


def test_qwen2_has_qkv_biases() -> None:
    c = count_params(load_model("qwen2.5-7b"))
    d = 3584
    kv = 4 * 128
    assert c.attention_per_layer == 2 * d * d + 2 * d * kv + d + 2 * kv


def test_deepseek_v3_structure() -> None:
    cfg = load_model("deepseek-v3")
    c = count_params(cfg)
    assert (c.num_dense_layers, c.num_moe_layers) == (3, 58)
    assert c.routed_expert == 3 * 7168 * 2048
    assert c.shared_experts_per_layer == 3 * 7168 * 2048  # one shared expert of the routed width
    assert c.router_per_layer == 7168 * 256 + 256  # + e_score_correction_bias (noaux_tc routing)
    mla = (7168 * 1536 + 1536 + 1536 * 128 * 192  # q_a, q_a_layernorm, q_b
           + 7168 * (512 + 64) + 512  # kv_a_proj_with_mqa, kv_a_layernorm
           + 512 * 128 * (128 + 128)  # kv_b
           + 128 * 128 * 7168)  # o
    assert c.attention_per_layer == mla
    # layers 0..2 dense, 3.. MoE
    assert layer_params(c, 0, cfg) == c.dense_layer
    assert layer_params(c, 3, cfg) == c.moe_layer


def test_deepseek_v2_lite_has_no_q_lora() -> None:
    cfg = load_model("deepseek-v2-lite")
    assert cfg.q_lora_rank == 0
    assert count_params(cfg).attention_per_layer == (
        2048 * 16 * 192 + 2048 * 576 + 512 + 512 * 16 * 256 + 16 * 128 * 2048
    )
    assert count_params(cfg).shared_experts_per_layer == 2 * 3 * 2048 * 1408


def test_stages_sum_to_total() -> None:
    for name in ("llama-3.1-8b", "deepseek-v3"):
        cfg = load_model(name)
        c = count_params(cfg)
        L = cfg.num_layers
        half = L // 2
        s0 = stage_params(c, range(half), first=True, last=False, cfg=cfg)
        s1 = stage_params(c, range(half, L), first=False, last=True, cfg=cfg)
        assert s0 + s1 == c.total


def test_layer_index_out_of_range() -> None:
    c = count_params(load_model("llama-3.1-8b"))
    with pytest.raises(IndexError):
        layer_params(c, 32)
