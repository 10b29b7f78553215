"""TP/EP/quantization rules the engines enforce at load, refused (or warned) at plan time."""

from __future__ import annotations

from dataclasses import replace

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.catalog.types import CheckpointQuant
from orchestrator.layout import parse_layout
from orchestrator.plan.checks import Cluster, layout_problems
from orchestrator.plan.inputs import PlanInputs
from orchestrator.plan.planner import plan_layout
from tests.support.engines import fixed_settings


def _problems(model: str, layout: str, *, nodes: int = 1, engine: str = "vllm", dtype: str = "bf16",
              group: int = 128, quant: CheckpointQuant | None = None) -> tuple[list[str], list[str]]:
    return layout_problems(load_model(model), parse_layout(layout), Cluster(nodes, 8), weight_dtype=dtype,
                           group_size=group, quant=quant, engine=engine)


def test_kv_heads_must_divide_below_and_be_divided_above() -> None:
    reject, _ = _problems("mistral-large-2407", "tp6")  # 96 heads divide, 8 KV heads do not
    assert any("does not divide the 8 KV heads" in r for r in reject)
    reject, _ = _problems("glm-4.5", "tp6")
    assert any("8 KV heads" in r for r in reject)
    reject, warn = _problems("llama-3.1-70b", "tp16", nodes=2)  # 16 = 2 x 8: each KV head on 2 ranks
    assert not any("KV heads" in r for r in reject) and any("replicated" in w for w in warn)


def test_vocabulary_must_split_after_padding_to_64() -> None:
    reject, _ = _problems("mistral-large-2407", "tp6")  # 32768 = 64 x 512; 512 is not a multiple of 3
    assert any("vocabulary 32768" in r and "TP 6" in r for r in reject)
    reject, _ = _problems("llama-3.1-8b", "tp8")
    assert not any("vocabulary" in r for r in reject)


def test_uneven_experts_over_ep_differ_by_engine() -> None:
    reject, warn = _problems("qwen3-30b-a3b", "dp6ep")  # 128 experts over 6 ranks
    assert not any("EP ranks" in r for r in reject)
    assert any("first 2 ranks 22 experts" in w for w in warn)
    reject, _ = _problems("qwen3-30b-a3b", "dp6ep", engine="sglang")
    assert any("SGLang requires an even split" in r for r in reject)


def test_uneven_ep_prices_the_busiest_rank() -> None:
    cfg = load_model("qwen3-30b-a3b")
    inp = PlanInputs(cfg=cfg, gpu=load_gpu("h100"), cluster=Cluster(1, 8), settings=fixed_settings(8192))
    even, uneven = plan_layout(inp, parse_layout("dp8ep")), plan_layout(inp, parse_layout("dp6ep"))
    assert even.expert_imbalance is not None and uneven.expert_imbalance == 22 / (128 / 6)


def test_quantized_shards_follow_the_real_format() -> None:
    block = CheckpointQuant(method="fp8", weight_dtype="fp8", block_shape=(128, 128))
    reject, _ = _problems("deepseek-v3", "tp16", nodes=2, dtype="fp8", quant=block)
    assert not any("FP8 block" in r for r in reject)
    reject, _ = _problems("deepseek-v3", "tp32", nodes=4, dtype="fp8", quant=block)
    expected = "expert gate/up_proj output 2048/32 = 64 is not a multiple of block_n 128"
    assert any(expected in r for r in reject)
    nvfp4 = CheckpointQuant(method="modelopt", weight_dtype="nvfp4", group_size=16)
    reject, _ = _problems("qwen2.5-72b", "tp16", nodes=2, dtype="nvfp4", quant=nvfp4)
    assert any("NVFP4: down_proj input 29568/16 = 1848 is not a multiple of 16" in r for r in reject)
    # MXFP4 experts are padded by the engine (2880/8 = 360 is no multiple of 32): never refused
    oss = load_model("gpt-oss-120b")
    reject, _ = _problems("gpt-oss-120b", "tp8", dtype="mxfp4", quant=oss.quantization)
    assert not reject


def test_int4_group_size_from_the_checkpoint() -> None:
    cfg = load_model("qwen2.5-72b")
    awq = CheckpointQuant(method="awq", weight_dtype="int4", group_size=64)
    quantized = replace(cfg, quantization=awq)
    inp = PlanInputs(cfg=quantized, gpu=load_gpu("h100"), cluster=Cluster(1, 8), weight_dtype="int4",
                     quant_group_size=64, weight_bytes_per_value=0.5 + 2 / 64, settings=fixed_settings(8192))
    # 29568/8 = 3696 = 57.75 groups of 64: refused; 29568/2 = 14784 = 231 groups: fine
    assert any("int4 group size 64" in r for r in plan_layout(inp, parse_layout("tp8")).rejected_because)
    assert not any("int4" in r for r in plan_layout(inp, parse_layout("tp2")).rejected_because)
