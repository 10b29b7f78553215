"""Published config.json files (orchestrator/catalog/models, sources in SOURCES.md) against hand counts.

Each count below is written out from the architecture (every matrix, bias and norm), not computed by
orch, and compared with what `orch plan --json` reports for the model: total and active parameters,
KV bytes per token (full-attention layers only) and per max_model_len sequence (window layers their
window, state layers their state). Published sizes are checked too, within 2%.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from orchestrator.plan.run import make_plan
from orchestrator.spec.models import SweepSpec

BF16 = 2


@dataclass(frozen=True)
class Hand:
    total: int
    active: int  # per token, with the embedding table (Qwen/Mistral convention)
    kv_per_token: int
    kv_per_sequence: int
    max_model_len: int
    published_total: float | None = None  # text model (+ vision where the publisher counts it)
    with_vision: bool = False
    mtp: int = 0
    vision: int = 0


def gqa_attention(d: int, h: int, kv: int, hd: int, *, qkv_bias: bool = False, o_bias: bool = False,
                  qk_norm: bool = False, sinks: bool = False, gate: bool = False) -> int:
    q = h * hd
    out = d * q * (2 if gate else 1) + 2 * d * kv * hd + q * d
    out += (q + 2 * kv * hd) if qkv_bias else 0
    out += d if o_bias else 0
    out += 2 * hd if qk_norm else 0
    out += h if sinks else 0
    return out


def kv_token(layers: int, kv: int, hd: int) -> int:
    return layers * 2 * kv * hd * BF16


# -- gpt-oss: MXFP4 experts with biases, alternating 128-token windows, sinks, q/k/v/o biases ----------
def _gpt_oss(layers: int, experts: int) -> Hand:
    d, V = 2880, 201088
    attn = gqa_attention(d, 64, 8, 64, qkv_bias=True, o_bias=True, sinks=True)
    expert = 3 * d * 2880 + 2 * 2880 + d  # gate_up (+ bias 2f), down (+ bias d)
    router = d * experts + experts
    layer = attn + experts * expert + router + 2 * d
    active_layer = attn + 4 * expert + router + 2 * d
    full = layers // 2
    return Hand(total=layers * layer + 2 * V * d + d, active=layers * active_layer + 2 * V * d + d,
                kv_per_token=kv_token(full, 8, 64),
                kv_per_sequence=kv_token(full, 8, 64) * 131072 + kv_token(full, 8, 64) * 128,
                max_model_len=131072, published_total=116.8e9 if layers == 36 else 20.9e9)


def _gemma3_27b() -> Hand:
    d, V = 5376, 262208  # vocab: transformers' Gemma3TextConfig default (the published text_config omits it)
    layer = gqa_attention(d, 32, 16, 128, qk_norm=True) + 3 * d * 21504 + 4 * d  # 4 norms per layer
    total = 62 * layer + V * d + d  # tied embedding
    h, f = 1152, 4304  # SigLIP tower, counted as a generic ViT (hf_layers.vision_params)
    vision = (27 * (4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h) + 3 * 14 * 14 * h + h
              + (896 // 14) ** 2 * h + h * d)
    full, sliding = 10, 52  # layers 5, 11, ..., 59 full (every 6th)
    return Hand(total=total, active=total, kv_per_token=kv_token(full, 16, 128),
                kv_per_sequence=kv_token(full, 16, 128) * 131072 + kv_token(sliding, 16, 128) * 1024,
                max_model_len=131072, published_total=27.4e9, with_vision=True, vision=vision)


def _gemma2_27b() -> Hand:
    d, V = 4608, 256000
    layer = gqa_attention(d, 32, 16, 128) + 3 * d * 36864 + 4 * d
    total = 46 * layer + V * d + d
    return Hand(total=total, active=total, kv_per_token=kv_token(23, 16, 128),
                kv_per_sequence=kv_token(23, 16, 128) * 8192 + kv_token(23, 16, 128) * 4096,
                max_model_len=8192, published_total=27.2e9)


def _llama4(experts: int, step: int) -> Hand:
    d, V = 5120, 202048
    attn = gqa_attention(d, 40, 8, 128)  # use_qk_norm is an L2 norm without weights
    expert = 3 * d * 8192
    moe = attn + experts * expert + expert + d * experts + 2 * d  # routed + one shared expert + router
    moe_active = attn + 2 * expert + d * experts + 2 * d
    dense = attn + 3 * d * 16384 + 2 * d  # intermediate_size_mlp
    n_moe = 48 // step
    n_dense = 48 - n_moe
    emb = 2 * V * d + d
    vision_cfg = 1408
    h, f = vision_cfg, 5632
    vision = (34 * (4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h) + 3 * 14 * 14 * h + h
              + (336 // 14) ** 2 * h + 4096 * d)
    # 12 NoPE layers attend to everything; the 36 RoPE layers to their 8192-token chunk.
    return Hand(total=n_moe * moe + n_dense * dense + emb, active=n_moe * moe_active + n_dense * dense + emb,
                kv_per_token=kv_token(12, 8, 128),
                kv_per_sequence=kv_token(12, 8, 128) * 131072 + kv_token(36, 8, 128) * 8192,
                max_model_len=131072, published_total=109e9 if experts == 16 else 400e9,
                with_vision=True, vision=vision)


def _qwen3_next() -> Hand:
    d, V, E = 2048, 151936, 512
    full_attn = gqa_attention(d, 16, 2, 256, qk_norm=True, gate=True)
    key, value = 16 * 128, 32 * 128
    gdn = (d * (2 * key + 2 * value) + d * 2 * 32  # in_proj_qkvz, in_proj_ba
           + (2 * key + value) * 4 + 32 + 32 + 128 + value * d)  # conv1d, dt_bias, A_log, norm, out_proj
    expert = 3 * d * 512
    moe = E * expert + expert + d + d * E  # routed, shared expert + its gate, router
    moe_active = 10 * expert + expert + d + d * E
    layers = 12 * (full_attn + moe + 2 * d) + 36 * (gdn + moe + 2 * d)
    active = 12 * (full_attn + moe_active + 2 * d) + 36 * (gdn + moe_active + 2 * d)
    emb = 2 * V * d + d
    state = 36 * ((2 * key + value) * 3 * BF16 + 32 * 128 * 128 * BF16)  # conv (kernel-1) + delta state
    return Hand(total=layers + emb, active=active + emb, kv_per_token=kv_token(12, 2, 256),
                kv_per_sequence=kv_token(12, 2, 256) * 262144 + state, max_model_len=262144,
                published_total=80e9)


def _jamba_mini() -> Hand:
    d, V = 4096, 65536
    attn = gqa_attention(d, 32, 8, 128)
    di, ds, dt = 8192, 16, 256
    mamba = (d * 2 * di + di * 4 + di + di * (dt + 2 * ds) + dt * di + di + di * ds + di + di * d
             + dt + 2 * ds)  # in_proj, conv, x_proj, dt_proj (+biases), A_log, D, out_proj, dt/B/C norms
    mlp = 3 * d * 14336
    moe = 16 * mlp + d * 16
    moe_active = 2 * mlp + d * 16
    mixers = 4 * attn + 28 * mamba  # attention at layers 4, 12, 20, 28
    total = mixers + 16 * mlp + 16 * moe + 32 * 2 * d + 2 * V * d + d  # MoE at odd layers
    active = mixers + 16 * mlp + 16 * moe_active + 32 * 2 * d + 2 * V * d + d
    state = 28 * (di * 3 * BF16 + di * ds * BF16)
    return Hand(total=total, active=active, kv_per_token=kv_token(4, 8, 128),
                kv_per_sequence=kv_token(4, 8, 128) * 262144 + state, max_model_len=262144,
                published_total=52e9)


def _mistral_large() -> Hand:
    d, V = 12288, 32768
    layer = gqa_attention(d, 96, 8, 128) + 3 * d * 28672 + 2 * d
    total = 88 * layer + 2 * V * d + d
    return Hand(total=total, active=total, kv_per_token=kv_token(88, 8, 128),
                kv_per_sequence=kv_token(88, 8, 128) * 131072, max_model_len=131072, published_total=123e9)


def _glm45() -> Hand:
    d, V = 5120, 151552
    attn = gqa_attention(d, 96, 8, 128, qkv_bias=True, qk_norm=True)
    expert = 3 * d * 1536
    router = d * 160 + 160  # + e_score_correction_bias
    moe = attn + 160 * expert + expert + router + 2 * d
    moe_active = attn + 8 * expert + expert + router + 2 * d
    dense = attn + 3 * d * 12288 + 2 * d
    emb = 2 * V * d + d
    mtp = moe + 2 * d * d + 3 * d  # one MTP layer: a decoder layer + eh_proj + three norms
    return Hand(total=3 * dense + 89 * moe + emb, active=3 * dense + 89 * moe_active + emb,
                kv_per_token=kv_token(92, 8, 128), kv_per_sequence=kv_token(92, 8, 128) * 131072,
                max_model_len=131072, published_total=355e9, mtp=mtp)


def _mla(d: int, h: int, q_lora: int) -> int:
    return (d * q_lora + q_lora + q_lora * h * 192 + d * (512 + 64) + 512 + 512 * h * 256 + h * 128 * d)


def _kimi_k2() -> Hand:
    d, V = 7168, 163840
    attn = _mla(d, 64, 1536)
    expert = 3 * d * 2048
    router = d * 384 + 384
    moe = attn + 384 * expert + expert + router + 2 * d
    moe_active = attn + 8 * expert + expert + router + 2 * d
    dense = attn + 3 * d * 18432 + 2 * d
    emb = 2 * V * d + d
    per_token = 61 * (512 + 64) * BF16  # the MLA latent and rope key, not split by TP
    return Hand(total=dense + 60 * moe + emb, active=dense + 60 * moe_active + emb, kv_per_token=per_token,
                kv_per_sequence=per_token * 131072, max_model_len=131072, published_total=1.04e12)


def _deepseek_v3() -> Hand:
    d, V = 7168, 129280
    attn = _mla(d, 128, 1536)
    expert = 3 * d * 2048
    router = d * 256 + 256
    moe = attn + 256 * expert + expert + router + 2 * d
    moe_active = attn + 8 * expert + expert + router + 2 * d
    dense = attn + 3 * d * 18432 + 2 * d
    per_token = 61 * 576 * BF16
    emb = 2 * V * d + d
    return Hand(total=3 * dense + 58 * moe + emb, active=3 * dense + 58 * moe_active + emb,
                kv_per_token=per_token, kv_per_sequence=per_token * 163840, max_model_len=163840,
                published_total=671e9, mtp=moe + 2 * d * d + 3 * d)


def _dense(d: int, layers: int, h: int, kv: int, f: int, V: int, *, qkv_bias: bool = False,
           max_len: int, published: float) -> Hand:
    layer = gqa_attention(d, h, kv, 128, qkv_bias=qkv_bias) + 3 * d * f + 2 * d
    total = layers * layer + 2 * V * d + d
    return Hand(total=total, active=total, kv_per_token=kv_token(layers, kv, 128),
                kv_per_sequence=kv_token(layers, kv, 128) * max_len, max_model_len=max_len,
                published_total=published)


def _mixtral() -> Hand:
    d, V = 4096, 32000
    attn = gqa_attention(d, 32, 8, 128)
    expert = 3 * d * 14336
    layer = attn + 8 * expert + d * 8 + 2 * d
    active = attn + 2 * expert + d * 8 + 2 * d
    return Hand(total=32 * layer + 2 * V * d + d, active=32 * active + 2 * V * d + d,
                kv_per_token=kv_token(32, 8, 128), kv_per_sequence=kv_token(32, 8, 128) * 32768,
                max_model_len=32768, published_total=46.7e9)


def _qwen3_30b() -> Hand:
    d, V = 2048, 151936
    attn = gqa_attention(d, 32, 4, 128, qk_norm=True)
    expert = 3 * d * 768
    layer = attn + 128 * expert + d * 128 + 2 * d
    active = attn + 8 * expert + d * 128 + 2 * d
    return Hand(total=48 * layer + 2 * V * d + d, active=48 * active + 2 * V * d + d,
                kv_per_token=kv_token(48, 4, 128), kv_per_sequence=kv_token(48, 4, 128) * 40960,
                max_model_len=40960, published_total=30.5e9)


HAND = {
    "gpt-oss-120b": _gpt_oss(36, 128),
    "gpt-oss-20b": _gpt_oss(24, 32),
    "gemma-3-27b": _gemma3_27b(),
    "gemma-2-27b": _gemma2_27b(),
    "llama-4-scout-17b-16e": _llama4(16, 1),
    "llama-4-maverick-17b-128e": _llama4(128, 2),
    "qwen3-next-80b-a3b": _qwen3_next(),
    "jamba-1.5-mini": _jamba_mini(),
    "mistral-large-2407": _mistral_large(),
    "glm-4.5": _glm45(),
    "kimi-k2": _kimi_k2(),
    "deepseek-v3": _deepseek_v3(),
    "mixtral-8x7b": _mixtral(),
    "qwen3-30b-a3b": _qwen3_30b(),
    "llama-3.1-8b": _dense(4096, 32, 32, 8, 14336, 128256, max_len=131072, published=8.03e9),
    "qwen2.5-72b": _dense(8192, 80, 64, 8, 29568, 152064, qkv_bias=True, max_len=32768, published=72.7e9),
}


def _plan(name: str, max_len: int) -> dict[str, Any]:
    spec = SweepSpec.model_validate({
        "model": {"name": name, "max_model_len": max_len},
        "hardware": {"gpu": "b200", "nodes": 4},
        "workload": {"input_tokens": 1000, "output_tokens": 200, "rates_per_s": [1], "num_requests": 10},
        "layouts": ["tp8"],
    })
    return json.loads(json.dumps(make_plan(spec).to_dict()))


@pytest.mark.parametrize("name", sorted(HAND))
def test_plan_matches_the_hand_count(name: str) -> None:
    hand = HAND[name]
    got = _plan(name, hand.max_model_len)
    assert got["total_params"] == hand.total
    assert got["active_params"] == hand.active
    assert got["kv_bytes_per_token"] == hand.kv_per_token
    assert got["kv_bytes_per_sequence"] == hand.kv_per_sequence
    assert got["mtp_params"] == hand.mtp
    if hand.vision:
        assert got["vision_params"] == hand.vision


@pytest.mark.parametrize("name", sorted(HAND))
def test_published_size_within_two_percent(name: str) -> None:
    hand = HAND[name]
    assert hand.published_total is not None
    total = hand.total + (hand.vision if hand.with_vision else 0)
    assert abs(total - hand.published_total) / hand.published_total < 0.02, (
        f"{name}: {total / 1e9:.2f}B vs published {hand.published_total / 1e9:.1f}B")


def test_sixteen_fixtures() -> None:
    assert len(HAND) >= 15
