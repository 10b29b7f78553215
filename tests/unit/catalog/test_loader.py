"""Catalog loader: model presets, local config.json files, GPU presets, and their errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.catalog.loader import gpu_names, load_gpu, load_model, model_from_hf_config, model_names
from orchestrator.errors import SpecError

EXPECTED_MODELS = {
    "qwen2.5-7b", "qwen2.5-72b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "mixtral-8x7b",
    "deepseek-v2-lite", "deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b",
}


def test_all_presets_listed() -> None:
    assert set(model_names()) >= EXPECTED_MODELS


@pytest.mark.parametrize("name", sorted(EXPECTED_MODELS))
def test_every_preset_loads(name: str) -> None:
    cfg = load_model(name)
    assert cfg.name == name
    assert cfg.num_layers > 0 and cfg.hidden_size > 0 and cfg.head_dim > 0
    assert cfg.num_heads % cfg.num_kv_heads == 0


def test_name_is_case_insensitive() -> None:
    assert load_model("Llama-3.1-8B") == load_model("llama-3.1-8b")


def test_key_spellings() -> None:
    mixtral = load_model("mixtral-8x7b")
    assert (mixtral.num_routed_experts, mixtral.num_experts_per_token) == (8, 2)
    assert mixtral.moe_intermediate_size == 14336  # full-width experts
    assert mixtral.num_shared_experts == 0
    q3 = load_model("qwen3-30b-a3b")
    assert (q3.num_routed_experts, q3.num_experts_per_token, q3.moe_intermediate_size) == (128, 8, 768)
    assert q3.head_dim == 128  # explicit head_dim, not hidden/heads = 64
    v3 = load_model("deepseek-v3")
    assert v3.is_mla and v3.q_lora_rank == 1536 and v3.kv_lora_rank == 512
    assert v3.first_k_dense_layers == 3 and v3.num_shared_experts == 1
    assert v3.shared_expert_intermediate_size == 2048
    assert load_model("qwen2.5-7b").attention_bias
    assert not load_model("llama-3.1-8b").attention_bias


def test_qwen2_moe_shared_expert_spelling() -> None:
    d = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
         "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256, "num_experts": 4,
         "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 96}
    cfg = model_from_hf_config(d, "tiny")
    assert (cfg.num_shared_experts, cfg.shared_expert_intermediate_size) == (1, 96)


def test_unknown_model_suggests() -> None:
    with pytest.raises(SpecError) as e:
        load_model("lama-3.1-8b")
    msg = str(e.value)
    assert "did you mean 'llama-3.1-8b'" in msg
    assert "qwen2.5-72b" in msg  # lists the known ones
    assert "\n" not in msg


def _tiny() -> dict[str, object]:
    return {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
            "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 256,
            "model_type": "llama"}


def test_local_config_file_and_directory(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(_tiny()))
    from_dir = load_model(str(tmp_path))
    from_file = load_model(str(tmp_path / "config.json"))
    assert from_dir == from_file
    assert from_dir.head_dim == 16 and from_dir.num_kv_heads == 2


def test_missing_field_names_file_and_field(tmp_path: Path) -> None:
    d = _tiny()
    del d["vocab_size"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(d))
    with pytest.raises(SpecError) as e:
        load_model(str(path))
    assert str(path) in str(e.value) and "'vocab_size'" in str(e.value)


def test_negative_value_rejected(tmp_path: Path) -> None:
    d = _tiny()
    d["hidden_size"] = -64
    path = tmp_path / "config.json"
    path.write_text(json.dumps(d))
    with pytest.raises(SpecError, match=r"'hidden_size'.*positive"):
        load_model(str(path))


def test_zero_value_rejected() -> None:
    d = _tiny()
    d["num_hidden_layers"] = 0
    with pytest.raises(SpecError, match="num_hidden_layers"):
        model_from_hf_config(d, "tiny")


def test_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(SpecError, match="invalid JSON"):
        load_model(str(path))


def test_directory_without_config(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"no config\.json"):
        load_model(str(tmp_path))


def test_moe_without_top_k() -> None:
    d = _tiny()
    d["num_local_experts"] = 8
    with pytest.raises(SpecError, match="num_experts_per_tok"):
        model_from_hf_config(d, "tiny")


# ----------------------------------------------------------------------------- GPUs

EXPECTED_GPUS = {"h100-sxm", "h200", "a100-sxm-80gb", "b200", "l40s", "mi300x"}


def test_gpu_presets_load() -> None:
    assert set(gpu_names()) >= EXPECTED_GPUS
    for name in gpu_names():
        g = load_gpu(name)
        assert g.intra_node.bandwidth_bytes_per_s > g.inter_node.bandwidth_bytes_per_s
        assert 0 < g.hbm_efficiency <= 1 and 0 < g.compute_efficiency <= 1
        if name == "cpu":  # the CPU stand-in says its figures are guesses
            assert "guesses" in g.source
            continue
        assert g.memory_bytes > 1e10 and g.hbm_bytes_per_s > 1e11 and g.bf16_flops_per_s > 1e14
        assert "datasheet" in g.source


def test_h100_figures_and_alias() -> None:
    g = load_gpu("H100")
    assert g.name == "h100-sxm"
    assert g.memory_bytes == 81559 * 2**20 and g.hbm_bytes_per_s == 3.35e12  # nvidia-smi: 81,559 MiB
    assert g.bf16_flops_per_s == 989e12 and g.fp8_flops_per_s == 1979e12
    assert g.gpus_per_node == 8
    assert g.intra_node.bandwidth_bytes_per_s == 450e9 and g.intra_node.latency_s == 2e-6
    assert g.inter_node.bandwidth_bytes_per_s == 50e9
    assert load_gpu("a100").fp8_flops_per_s == 0.0


def test_gpu_overrides() -> None:
    g = load_gpu("h200", {"hbm_efficiency": 0.7, "inter_node": {"bandwidth_bytes_per_s": 100e9}})
    assert g.hbm_efficiency == 0.7
    assert g.inter_node.bandwidth_bytes_per_s == 100e9
    assert g.inter_node.latency_s == load_gpu("h200").inter_node.latency_s
    assert "overridden" in g.source


def test_gpu_override_errors() -> None:
    with pytest.raises(SpecError, match="did you mean 'hbm_efficiency'"):
        load_gpu("h200", {"hbm_eficiency": 0.7})
    with pytest.raises(SpecError, match="hbm_efficiency"):
        load_gpu("h200", {"hbm_efficiency": 1.5})
    with pytest.raises(SpecError, match="memory_bytes"):
        load_gpu("h200", {"memory_bytes": -1})


def test_unknown_gpu() -> None:
    with pytest.raises(SpecError) as e:
        load_gpu("h300")
    assert "h100-sxm" in str(e.value) and "mi300x" in str(e.value)
