"""LaunchPlan -> a Ray Serve LLM config, for users who serve the winning layout through Ray Serve.

The result is the config file of ``serve run`` / ``serve deploy``: one application built by
``ray.serve.llm:build_openai_app`` (``build_dp_openai_app`` for data-parallel layouts) with one
``LLMConfig`` (model_loading_config, engine_kwargs with the
layout's tensor/pipeline/data parallel sizes, deployment_config with a fixed num_replicas = x, and the
accelerator_type Ray schedules on). Ray Serve LLM runs vLLM, so only vLLM plans compile. Pure: no Ray.
"""

from __future__ import annotations

from typing import Any

from orchestrator.compile.k8s_argv import DROPPED_ENV, OWN_ADDRESS_ENV
from orchestrator.compile.k8s_ray import engine_kwargs, serve_application, served_name
from orchestrator.engines.base import LaunchPlan
from orchestrator.errors import SpecError
from orchestrator.layout import Layout

# orch GPU presets -> Ray accelerator types (ray.util.accelerators); presets not listed get none.
ACCELERATOR_TYPES = {
    "h100-sxm": "H100",
    "h100": "H100",
    "h200": "H200",
    "a100-sxm-80gb": "A100-80G",
    "a100-80gb": "A100-80G",
    "b200": "B200",
    "l40s": "L40S",
}


def accelerator_type(gpu_preset: str) -> str | None:
    return ACCELERATOR_TYPES.get(gpu_preset.strip().lower())


def llm_config(plan: LaunchPlan, layout: Layout, accelerator: str | None = None) -> dict[str, Any]:
    """The keyword arguments of ``ray.serve.llm.LLMConfig`` for this layout."""
    if plan.engine != "vllm":
        raise SpecError(
            f"ray-serve: engine {plan.engine!r} is not served by Ray Serve LLM; compile with --engine vllm"
        )
    if layout != plan.layout or not plan.replicas:
        raise SpecError(f"ray-serve: the plan is for {plan.layout!s}, not {layout}; compile that layout")
    proc = plan.replicas[0].processes[0]
    model, kwargs = engine_kwargs(proc.argv, layout)
    config: dict[str, Any] = {
        "model_loading_config": {"model_id": served_name(proc.argv, model), "model_source": model},
        "engine_kwargs": kwargs,
        # Fixed replicas: the measured layout is x replicas; autoscaling would serve another one.
        "deployment_config": {"num_replicas": layout.replicas},
    }
    if accelerator:
        config["accelerator_type"] = accelerator
    # Ray assigns devices and addresses per actor; the plan's pins and addresses would fight it.
    env = {k: v for k, v in proc.env if k not in DROPPED_ENV | OWN_ADDRESS_ENV}
    if env:
        config["runtime_env"] = {"env_vars": env}
    return config


# Ray Serve LLM's prefill/decode builder (ray/llm/_internal/serve/serving_patterns/prefill_decode/
# builder.py in Ray 2.60): ingress -> decode deployment -> prefill deployment, each an LLMConfig whose
# engine_kwargs carry kv_transfer_config; Ray sets the NIXL side-channel ports itself
# (experimental_configs NIXL_SIDE_CHANNEL_PORT_BASE), so the plan's VLLM_NIXL_* env stays out.
PD_IMPORT_PATH = "ray.serve.llm:build_pd_openai_app"
_RAY_OWNS_ENV = frozenset({"VLLM_NIXL_SIDE_CHANNEL_PORT"})


def pd_serve_app_config(plan: LaunchPlan, accelerator: str | None = None,
                        app_name: str = "llm") -> dict[str, Any]:
    """A ``serve run`` config of a prefill/decode pair: build_pd_openai_app with each pool's LLMConfig."""
    configs: dict[str, Any] = {}
    for pool in plan.pools:
        role, layout = (pool.replicas[0].role if pool.replicas else ""), pool.layout
        if role not in ("prefill", "decode") or not isinstance(layout, Layout):
            raise SpecError(f"ray-serve: {plan.name} is not a prefill/decode pair's plan")
        config = llm_config(pool, layout, accelerator)
        env = config.get("runtime_env", {}).get("env_vars", {})
        for key in _RAY_OWNS_ENV:
            env.pop(key, None)
        if not env:
            config.pop("runtime_env", None)
        if layout.dp > 1:  # build_pd_openai_app gang-schedules DP ranks itself (DPPD servers)
            config["deployment_config"] = {"num_replicas": layout.replicas}
        configs[f"{role}_config"] = config
    return {"applications": [{"name": app_name, "route_prefix": "/", "import_path": PD_IMPORT_PATH,
                              "args": configs}]}


def serve_app_config(
    plan: LaunchPlan, layout: Layout, accelerator: str | None = None, app_name: str = "llm"
) -> dict[str, Any]:
    """A ``serve run`` config file: one OpenAI-compatible app serving the layout."""
    return {"applications": [serve_application(llm_config(plan, layout, accelerator), layout, app_name)]}
