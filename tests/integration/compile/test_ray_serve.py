"""The Ray Serve LLM config orch compiles, checked by Ray Serve LLM itself (`LLMConfig`) where a Python
with both ray[serve] and vLLM exists (ORCH_RAY_SERVE_PYTHON, this venv, or ORCH_VLLM_PYTHON). CI builds
one (.ci/setup.d/55-ray-serve-llm.sh) and fails without it; elsewhere the check skips and says why."""

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
        why = "no Python with vllm and ray.serve.llm (ORCH_RAY_SERVE_PYTHON, .venv, ORCH_VLLM_PYTHON)"
        if os.environ.get("ORCH_CI") == "1":
            pytest.fail(f"ORCH_CI=1 but {why}; .ci/setup.d/55-ray-serve-llm.sh exports ORCH_RAY_SERVE_PYTHON")
        pytest.skip(why)
    lay = parse_layout("tp4x2")
    cfg = llm_config(prepare(SPEC, lay, engine="vllm").plan, lay, "H100")
    out = subprocess.run([exe, "-c", CHECK, json.dumps(cfg)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"ok": True, "tp": 4}
