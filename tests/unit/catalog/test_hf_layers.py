"""Reading architecture families from config.json: layer kinds, MoE placement, nested text_config,
checkpoint formats, and one-line refusals of what orch cannot price."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.catalog.loader import load_model, model_from_hf_config
from orchestrator.catalog.quant import engine_quantization_flag, read_quantization, served_weight_dtype
from orchestrator.catalog.types import CHUNKED, FULL, LINEAR, MAMBA, SLIDING
from orchestrator.errors import SpecError
from orchestrator.plan.kv import kv_bytes_per_token
from orchestrator.plan.params import count_params
from tests.support.cli import Orch
from tests.support.paths import ROOT

# nvidia/Nemotron-H-8B-Base-8K (trimmed: the fields that give its structure). Mamba-2 blocks, attention
# blocks and MLP-only blocks in one per-layer pattern: a hybrid orch does not model.
NEMOTRON_H = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
    "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "hidden_size": 4096, "num_hidden_layers": 52, "num_attention_heads": 32, "num_key_value_heads": 8,
    "ssm_state_size": 128, "mamba_num_heads": 128, "mamba_head_dim": 64, "n_groups": 8, "conv_kernel": 4,
    "expand": 2, "vocab_size": 131072, "max_position_embeddings": 8192,
}
# MiniMaxAI/MiniMax-Text-01: lightning (linear) attention layers between softmax ones (shortened).
MINIMAX = {"model_type": "minimax", "num_hidden_layers": 8, "num_attention_heads": 64, "hidden_size": 6144,
           "num_local_experts": 32, "attn_type_list": [0, 0, 0, 1, 0, 0, 0, 1]}


def _one_line(exc: pytest.ExceptionInfo[SpecError]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize(("config", "field"), [(NEMOTRON_H, "hybrid_override_pattern"),
                                               (MINIMAX, "attn_type_list")])
def test_unsupported_hybrid_is_refused_in_one_line(config: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as exc:
        model_from_hf_config(config, "x")
    msg = _one_line(exc)
    assert repr(field) in msg and "cannot price" in msg


def test_unknown_model_type_and_layer_type_are_refused() -> None:
    with pytest.raises(SpecError) as exc:
        model_from_hf_config({"model_type": "rwkv6", "num_hidden_layers": 2, "hidden_size": 64,
                              "num_attention_heads": 2, "vocab_size": 10, "max_position_embeddings": 8}, "x")
    assert "model_type 'rwkv6'" in _one_line(exc)
    gpt = load_raw("gpt-oss-20b")
    gpt["layer_types"] = ["sliding_attention", "mamba2"] * 12
    with pytest.raises(SpecError) as exc:
        model_from_hf_config(gpt, "x")
    assert "layer_types[1] 'mamba2'" in _one_line(exc)


def test_orch_validate_refuses_the_unsupported_hybrid(tmp_path: Path, orch: Orch) -> None:
    (tmp_path / "config.json").write_text(json.dumps(NEMOTRON_H))
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"model: {{config_path: {tmp_path / 'config.json'}}}\nhardware: {{gpu: h100}}\n"
                    "workload: {input_tokens: 100, output_tokens: 10, rates_per_s: [1], num_requests: 10}\n"
                    "layouts: [tp1]\n")
    out = orch("validate", str(spec))
    assert out.returncode == 2
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "hybrid_override_pattern" in lines[0] and "ok" not in out.stdout.lower()


def load_raw(name: str) -> dict[str, Any]:
    root = ROOT / "orchestrator" / "catalog" / "models"
    data: dict[str, Any] = json.loads((root / f"{name}.json").read_text())
    return data


def test_layer_kinds_per_family() -> None:
    oss = load_model("gpt-oss-120b")
    assert oss.layer_kinds[:4] == (SLIDING, FULL, SLIDING, FULL) and oss.sliding_window == 128
    gemma = load_model("gemma-3-27b")
    assert [i for i, k in enumerate(gemma.layer_kinds) if k == FULL] == list(range(5, 62, 6))
    assert gemma.sliding_window == 1024 and gemma.tie_word_embeddings and gemma.vocab_size == 262208
    assert load_model("gemma-2-27b").layer_kinds[:2] == (SLIDING, FULL)
    scout = load_model("llama-4-scout-17b-16e")
    assert scout.layer_kinds[:4] == (CHUNKED, CHUNKED, CHUNKED, FULL) and scout.attention_chunk_size == 8192
    nxt = load_model("qwen3-next-80b-a3b")
    assert nxt.layer_kinds[:4] == (LINEAR, LINEAR, LINEAR, FULL)
    jamba = load_model("jamba-1.5-mini")
    assert [i for i, k in enumerate(jamba.layer_kinds) if k != MAMBA] == [4, 12, 20, 28]
    assert jamba.moe_layer_indices == tuple(range(1, 32, 2))
    assert load_model("llama-3.1-8b").layer_kinds == ()  # every layer full attention


def test_nested_text_config_reads_the_language_model() -> None:
    maverick = load_model("llama-4-maverick-17b-128e")
    assert (maverick.num_layers, maverick.hidden_size, maverick.num_routed_experts) == (48, 5120, 128)
    assert maverick.moe_layer_indices == tuple(range(1, 48, 2))  # interleave_moe_layer_step 2
    assert maverick.intermediate_size == 16384 and maverick.moe_intermediate_size == 8192
    c = count_params(maverick)
    assert (c.num_moe_layers, c.num_dense_layers) == (24, 24)
    assert c.vision > 0.8e9 and c.total + c.vision == pytest.approx(400e9, rel=0.02)
    assert c.active == pytest.approx(17e9, rel=0.02)


def test_qwen3_next_kv_per_token_counts_only_full_attention_layers() -> None:
    cfg = load_model("qwen3-next-80b-a3b")
    assert kv_bytes_per_token(cfg, 2.0) == 12 * 2 * 2 * 256 * 2  # 12 of 48 layers hold KV
    assert cfg.linear_attention is not None and cfg.linear_attention.num_value_heads == 32


def test_checkpoint_formats() -> None:
    oss = load_model("gpt-oss-120b").quantization
    assert oss is not None and oss.weight_dtype == "mxfp4" and oss.group_size == 32
    assert not oss.attention_quantized and oss.experts_quantized  # modules_to_not_convert: self_attn
    fp8 = read_quantization({"quantization_config": {"quant_method": "fp8",
                                                     "weight_block_size": [128, 128]}}, "x")
    assert fp8 is not None and fp8.block_shape == (128, 128)
    ct = {"quant_method": "compressed-tensors", "ignore": ["lm_head"],
          "config_groups": {"group_0": {"targets": ["Linear"],
                                        "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}}
    got = read_quantization({"quantization_config": ct}, "x")
    assert got is not None and (got.method, got.weight_dtype) == ("compressed-tensors", "fp8")
    ct["config_groups"]["group_0"]["weights"] = {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                                "group_size": 16}
    got = read_quantization({"quantization_config": ct}, "x")
    assert got is not None and got.weight_dtype == "nvfp4" and got.group_size == 16
    awq = read_quantization({"quantization_config": {"quant_method": "awq", "bits": 4,
                                                     "group_size": 64}}, "x")
    assert awq is not None and (awq.weight_dtype, awq.group_size) == ("int4", 64)
    nv = read_quantization({"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                                    "group_size": 16, "exclude_modules": ["lm_head"]}}, "x")
    assert nv is not None and nv.weight_dtype == "nvfp4"
    bad_ones: list[tuple[dict[str, Any], str]] = [({"quant_method": "bitsandbytes"}, "quant_method"),
                                                  ({"quant_method": "gptq", "bits": 8}, "bits")]
    for bad, field in bad_ones:
        with pytest.raises(SpecError) as exc:
            read_quantization({"quantization_config": bad}, "cfg.json")
        assert f"quantization_config.{field}" in _one_line(exc)


def test_launch_flag_only_for_online_fp8() -> None:
    ckpt = read_quantization({"quantization_config": {"quant_method": "fbgemm_fp8"}}, "x")
    assert engine_quantization_flag("fp8", ckpt) is None  # the engine reads the checkpoint's method
    assert engine_quantization_flag("fp8", None) == "fp8"  # online FP8 of a bf16 checkpoint
    assert engine_quantization_flag("bf16", None) is None
    assert served_weight_dtype("bf16", False, ckpt) == "fp8"  # unset: the checkpoint's format
    with pytest.raises(SpecError, match="weight_dtype: fp8"):
        served_weight_dtype("int4", True, ckpt)
