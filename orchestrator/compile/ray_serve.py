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


def serve_app_config(
    plan: LaunchPlan, layout: Layout, accelerator: str | None = None, app_name: str = "llm"
) -> dict[str, Any]:
    """A ``serve run`` config file: one OpenAI-compatible app serving the layout."""
    return {"applications": [serve_application(llm_config(plan, layout, accelerator), layout, app_name)]}
