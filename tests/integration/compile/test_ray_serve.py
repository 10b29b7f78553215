"""The Ray Serve LLM config orch compiles, checked by Ray Serve LLM itself (`LLMConfig`, `PDServingArgs`)
in a Python where `import vllm, ray.serve.llm` works: ORCH_RAY_SERVE_PYTHON, built by
.ci/setup.d/51-ray-serve-llm.sh (ray[serve] at the CI venv's Ray version, layered on the vLLM-for-CPU
tier). Skipped with the reason without it; under CI (ORCH_CI=1) a missing one fails."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from orchestrator.compile import prepare
from orchestrator.compile.ray_serve import accelerator_type, llm_config, serve_app_config
from orchestrator.layout import parse_layout
from orchestrator.spec.models import SweepSpec
from tests.support.engine_cases import venv_python

SPEC = SweepSpec.model_validate(
    {
        "model": {"name": "qwen2.5-72b", "max_model_len": 8192},
        "hardware": {"gpu": "h100-sxm", "nodes": 2},
        "engine": {"name": "vllm"},
        "workload": {"rates_per_s": [1], "num_requests": 4},
        "layouts": ["tp4x2"],
    }
)
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


# Both checks in one Python: importing vLLM and Ray Serve LLM is most of the cost (about 10-20 s). Each
# check reports its own result or error, so one failing does not hide the other. Beyond LLMConfig's own
# validation, VLLMEngineConfig.from_llm_config is the step a Ray Serve LLM replica takes before starting
# vLLM: it sorts every engine kwarg into vLLM's AsyncEngineArgs or FrontendArgs fields and refuses any
# other ("Unknown engine argument"), and gives the placement group the replica reserves. Nothing further:
# AsyncEngineArgs itself resolves the model on the Hugging Face hub.
CHECKS = """
import json, sys
from ray.serve.llm import LLMConfig
from ray.llm._internal.serve.engines.vllm.vllm_models import VLLMEngineConfig
from ray.llm._internal.serve.serving_patterns.prefill_decode.builder import PDServingArgs

def engine(cfg):
    eng = VLLMEngineConfig.from_llm_config(cfg)
    return {"tp": eng.tensor_parallel_degree, "devices": eng.num_devices, "bundles": eng.placement_bundles}

def config(cfg):
    return engine(LLMConfig(**cfg))

def pd(args):
    args = PDServingArgs.model_validate(args)
    return {role: {"kv_role": c.engine_kwargs["kv_transfer_config"]["kv_role"], **engine(c)}
            for role, c in (("prefill", args.prefill_config), ("decode", args.decode_config))}

out = {}
for name, check, arg in (("config", config, sys.argv[1]), ("pd", pd, sys.argv[2])):
    try:
        out[name] = check(json.loads(arg))
    except Exception as exc:
        out[name] = {"error": repr(exc)[:2000]}
print(json.dumps(out))
"""


def _pd_app_args() -> dict[str, Any]:
    from orchestrator.compile.ray_serve import pd_serve_app_config
    from orchestrator.disagg import parse_disagg
    from orchestrator.plan.candidates import disagg_candidate
    from orchestrator.plan.from_spec import engine_settings

    cand = disagg_candidate(SPEC, parse_disagg("p:tp4+d:tp4"), engine_settings(SPEC))
    (app,) = pd_serve_app_config(prepare(SPEC, cand).plan, "H100")["applications"]
    args: dict[str, Any] = app["args"]
    return args


@pytest.fixture(scope="module")
def ray_serve_checks() -> dict[str, Any]:
    """Ray Serve LLM's verdict on a tp4x2 LLMConfig and on a p:tp4+d:tp4 prefill/decode app's args."""
    exe = venv_python("ORCH_RAY_SERVE_PYTHON", "51-ray-serve-llm.sh")
    lay = parse_layout("tp4x2")
    cfg = llm_config(prepare(SPEC, lay, engine="vllm").plan, lay, "H100")
    # Offline: the checks validate configs and must never wait on the Hugging Face hub for the model.
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    out = subprocess.run([exe, "-c", CHECKS, json.dumps(cfg), json.dumps(_pd_app_args())],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return result


@pytest.mark.ray
def test_ray_serve_llm_accepts_the_config(ray_serve_checks: dict[str, Any]) -> None:
    got = ray_serve_checks["config"]
    assert "error" not in got, got
    # tp4x2: each of the 2 replicas reserves tp*pp = 4 GPUs, all on H100s
    assert got["tp"] == 4 and got["devices"] == 4, got
    assert [b["GPU"] for b in got["bundles"]] == [1] * 4, got
    assert all("accelerator_type:H100" in b for b in got["bundles"]), got


@pytest.mark.ray
def test_ray_serve_llm_accepts_the_prefill_decode_app(ray_serve_checks: dict[str, Any]) -> None:
    """Ray 2.60's build_pd_openai_app validates its arguments with PDServingArgs (same model on both
    pools, kv_transfer_config on each); the pair's config passes it."""
    got = ray_serve_checks["pd"]
    assert "error" not in got, got
    assert {role: (c["kv_role"], c["devices"]) for role, c in got.items()} == {
        "prefill": ("kv_producer", 4), "decode": ("kv_consumer", 4)}
