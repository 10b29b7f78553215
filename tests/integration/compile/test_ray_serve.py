"""The Ray Serve LLM config orch compiles, checked by Ray Serve LLM itself (`LLMConfig`) where a Python
with both ray[serve] and vLLM exists (ORCH_RAY_SERVE_PYTHON, this venv, or ORCH_VLLM_PYTHON). Optional:
skipped with the reason otherwise, CI included (neither the CI venv nor the vLLM CPU venv has both)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from orchestrator.compile import prepare
from orchestrator.compile.ray_serve import accelerator_type, llm_config, serve_app_config
from orchestrator.layout import parse_layout
from orchestrator.spec.models import SweepSpec

SPEC = SweepSpec.model_validate(
    {
        "model": {"name": "qwen2.5-72b", "max_model_len": 8192},
        "hardware": {"gpu": "h100-sxm", "nodes": 2},
        "engine": {"name": "vllm"},
        "workload": {"rates_per_s": [1], "num_requests": 4},
        "layouts": ["tp4x2"],
    }
)
CHECK = """
import json, sys
from ray.serve.llm import LLMConfig
cfg = LLMConfig(**json.loads(sys.argv[1]))
print(json.dumps({"ok": True, "tp": cfg.engine_kwargs.get("tensor_parallel_size")}))
"""


def _python_with_serve_llm() -> str | None:
    for exe in (os.environ.get("ORCH_RAY_SERVE_PYTHON"), sys.executable, os.environ.get("ORCH_VLLM_PYTHON")):
        if not exe:
            continue
        probe = subprocess.run(
            [exe, "-c", "import vllm, ray.serve.llm"], capture_output=True, timeout=300, check=False
        )
        if probe.returncode == 0:
            return exe
    return None


@pytest.mark.parametrize("layout", ["tp4x2", "tp8pp2", "tp2dp4ep"])
def test_config_shape(layout: str) -> None:
    lay = parse_layout(layout)
    plan = prepare(SPEC, lay, engine="vllm").plan
    cfg = llm_config(plan, lay, accelerator_type("h100-sxm"))
    assert cfg["engine_kwargs"]["tensor_parallel_size"] == lay.tp
    assert cfg["engine_kwargs"]["pipeline_parallel_size"] == lay.pp
    assert cfg["deployment_config"] == {"num_replicas": lay.replicas}
    assert cfg["accelerator_type"] == "H100"
    assert "CUDA_VISIBLE_DEVICES" not in cfg.get("runtime_env", {}).get("env_vars", {})
    app = serve_app_config(plan, lay, "H100")["applications"][0]
    if lay.dp > 1:
        # Ray Serve LLM 2.60 serves DP through its own builder: one gang-scheduled Serve replica per DP
        # rank, num_replicas counting DP groups; the plain builder would reserve only tp*pp GPUs.
        assert app["import_path"] == "ray.serve.llm:build_dp_openai_app"
        assert app["args"] == {"llm_config": cfg}
        assert cfg["engine_kwargs"]["data_parallel_size"] == lay.dp
    else:
        assert app["import_path"] == "ray.serve.llm:build_openai_app"
        assert app["args"] == {"llm_configs": [cfg]}


@pytest.mark.ray
def test_ray_serve_llm_accepts_the_config() -> None:
    exe = _python_with_serve_llm()
    if exe is None:
        pytest.skip("no Python with vllm and ray.serve.llm (ORCH_RAY_SERVE_PYTHON, .venv, ORCH_VLLM_PYTHON)")
    lay = parse_layout("tp4x2")
    cfg = llm_config(prepare(SPEC, lay, engine="vllm").plan, lay, "H100")
    out = subprocess.run([exe, "-c", CHECK, json.dumps(cfg)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"ok": True, "tp": 4}


PD_CHECK = """
import json, sys
from ray.llm._internal.serve.serving_patterns.prefill_decode.builder import PDServingArgs
args = PDServingArgs.model_validate(json.loads(sys.argv[1]))
print(json.dumps({"prefill": args.prefill_config.engine_kwargs["kv_transfer_config"]["kv_role"],
                  "decode": args.decode_config.engine_kwargs["kv_transfer_config"]["kv_role"]}))
"""


@pytest.mark.ray
def test_ray_serve_llm_accepts_the_prefill_decode_app() -> None:
    """Ray 2.60's build_pd_openai_app validates its arguments with PDServingArgs (same model on both
    pools, kv_transfer_config on each); the pair's config passes it."""
    exe = _python_with_serve_llm()
    if exe is None:
        pytest.skip("no Python with vllm and ray.serve.llm (ORCH_RAY_SERVE_PYTHON, .venv, ORCH_VLLM_PYTHON)")
    from orchestrator.compile.ray_serve import pd_serve_app_config
    from orchestrator.disagg import parse_disagg
    from orchestrator.plan.candidates import disagg_candidate
    from orchestrator.plan.from_spec import engine_settings

    spec = SPEC.model_copy(update={"engine": SPEC.engine.model_copy(update={"name": "vllm"})})
    cand = disagg_candidate(spec, parse_disagg("p:tp4+d:tp4"), engine_settings(spec))
    (app,) = pd_serve_app_config(prepare(spec, cand).plan, "H100")["applications"]
    out = subprocess.run([exe, "-c", PD_CHECK, json.dumps(app["args"])], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"prefill": "kv_producer", "decode": "kv_consumer"}
