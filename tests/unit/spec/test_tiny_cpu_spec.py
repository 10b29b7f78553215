"""layouts/tiny-cpu.yaml loads, and the planner lets its three CPU layouts through (with a copy of the
tiny model's config.json, since the model itself is built by scripts/build-tiny-model.sh)."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.compile import is_cpu
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.plan.planner import plan_layout
from orchestrator.spec.load import load_spec
from tests.support.paths import ROOT

TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
    "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 32, "vocab_size": 310, "max_position_embeddings": 1024, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6, "hidden_act": "silu",
}  # fmt: skip


def test_tiny_cpu_spec_loads_and_its_layouts_fit(tmp_path: Path) -> None:
    spec = load_spec(ROOT / "layouts" / "tiny-cpu.yaml")
    assert is_cpu(spec.hardware.gpu) and spec.engine.name == "vllm"
    assert [str(x) for x in spec.layouts] == ["tp1x2", "tp2", "pp2"]
    assert spec.engine.env["VLLM_CPU_KVCACHE_SPACE"] == "1" and spec.engine.env["HF_HUB_OFFLINE"] == "1"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY_CONFIG))
    spec = spec.model_copy(update={"model": spec.model.model_copy(update={"config_path": str(cfg)})})
    inputs = plan_inputs(spec)
    for layout in spec.layouts:
        row = plan_layout(inputs, layout, prompt_tokens=32, context_tokens=40)
        assert not row.rejected_because, (str(layout), row.rejected_because)
