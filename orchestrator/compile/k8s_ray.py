"""LaunchPlan -> a KubeRay RayService (ray.io/v1) serving the layout through Ray Serve LLM.

The alternative to Deployment/LeaderWorkerSet for teams that run Ray on Kubernetes: KubeRay starts a Ray
cluster (a CPU head, GPU workers) and Ray Serve places one engine per replica with placement groups.
Ray Serve LLM runs vLLM, so only vLLM plans compile here. Pure: no cluster access.
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

from orchestrator.compile.k8s import (
    GPU_PRODUCT_LABEL,
    K8sOptions,
    Obj,
    Probe,
    object_metadata,
    pod_spec,
    selector_labels,
)
from orchestrator.compile.k8s_argv import DROPPED_ENV, OWN_ADDRESS_ENV, PodCommand
from orchestrator.engines.base import LaunchPlan
from orchestrator.errors import SpecError
from orchestrator.layout import Layout

RAY_API = "ray.io/v1"
IMPORT_PATH = "ray.serve.llm:build_openai_app"
DP_IMPORT_PATH = "ray.serve.llm:build_dp_openai_app"
SERVE_PORT = 8000
# The layout owns these; Ray Serve LLM sets them from engine_kwargs or its own placement.
_LAYOUT_FLAGS = frozenset(
    {
        "-tp", "--tensor-parallel-size", "-pp", "--pipeline-parallel-size", "-dp", "--data-parallel-size",
        "--enable-expert-parallel", "--distributed-executor-backend", "--host", "--port", "--nnodes",
        "--node-rank", "--master-addr", "--master-port", "--headless", "--served-model-name",
        "--data-parallel-address", "--data-parallel-rpc-port", "--data-parallel-size-local",
    }
)  # fmt: skip


# vLLM's short aliases that are not layout flags, by their EngineArgs names.
_SHORT_FLAGS = {"-q": "quantization"}


def _scalar(text: str) -> Any:
    # engine_kwargs reach vLLM's EngineArgs as Python values, so "8192" must arrive as 8192, and a JSON
    # flag value such as --eplb-config '{"num_redundant_experts": 32}' as a mapping (a string is refused).
    if text[:1] in "{[":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(f"RayService: flag value {text!r} is not valid JSON ({exc.msg})") from exc
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def engine_kwargs(argv: tuple[str, ...], layout: Layout) -> tuple[str, Obj]:
    """(model, engine_kwargs) from a ``vllm serve MODEL --flag value ...`` argv and the layout."""
    if "serve" not in argv or argv.index("serve") + 1 >= len(argv):
        raise SpecError("RayService: the plan's argv is not 'vllm serve MODEL ...'; compile a vLLM plan")
    i = argv.index("serve") + 1
    model, rest = argv[i], list(argv[i + 1 :])
    kwargs: Obj = {"tensor_parallel_size": layout.tp, "pipeline_parallel_size": layout.pp}
    if layout.dp > 1:
        kwargs["data_parallel_size"] = layout.dp
    if layout.ep:
        kwargs["enable_expert_parallel"] = True
    pos = 0
    while pos < len(rest):
        flag, value = rest[pos], None
        if "=" in flag:
            flag, value = flag.split("=", 1)
        elif pos + 1 < len(rest) and not rest[pos + 1].startswith("--"):
            value = rest[pos + 1]
            pos += 1
        pos += 1
        if not flag.startswith("-"):
            raise SpecError(f"RayService: cannot read argv token {flag!r}; pass engine flags as --name value")
        if flag in _LAYOUT_FLAGS:
            continue
        if not flag.startswith("--") and flag not in _SHORT_FLAGS:
            raise SpecError(f"RayService: short flag {flag!r} has no engine_kwargs name; write its long form")
        name = _SHORT_FLAGS.get(flag) or flag.lstrip("-").replace("-", "_")
        if value is None and name.startswith("no_"):
            # argparse's BooleanOptionalAction: --no-enable-prefix-caching is enable_prefix_caching=False.
            kwargs[name.removeprefix("no_")] = False
            continue
        kwargs[name] = True if value is None else _scalar(value)
    return model, kwargs


def served_name(argv: tuple[str, ...], model: str) -> str:
    """The --served-model-name of an argv, else the model."""
    for i, tok in enumerate(argv):
        if tok == "--served-model-name" and i + 1 < len(argv):
            return argv[i + 1]
        if tok.startswith("--served-model-name="):
            return tok.split("=", 1)[1]
    return model


def serve_config(plan: LaunchPlan, layout: Layout) -> Obj:
    """The Ray Serve config (serveConfigV2) of one LLM app with x engine replicas."""
    proc = plan.replicas[0].processes[0]
    model, kwargs = engine_kwargs(proc.argv, layout)
    # Ray assigns GPUs and addresses per actor; host-side pins and addresses would fight it.
    env = {k: v for k, v in proc.env if k not in DROPPED_ENV | OWN_ADDRESS_ENV}
    llm: Obj = {
        "model_loading_config": {"model_id": served_name(proc.argv, model), "model_source": model},
        "engine_kwargs": kwargs,
        # Fixed replicas: the measured layout is x replicas; autoscaling would serve a different one.
        "deployment_config": {
            "autoscaling_config": {"min_replicas": layout.replicas, "max_replicas": layout.replicas}
        },
    }
    if env:
        llm["runtime_env"] = {"env_vars": env}
    return {"applications": [serve_application(llm, layout)]}


def serve_application(llm: Obj, layout: Layout, name: str = "llm") -> Obj:
    """One Serve application around an LLMConfig: the data-parallel builder when the layout has dp.

    The plain builder reserves tp*pp GPUs per replica and would hand vLLM a DP size it cannot place;
    ``build_dp_openai_app`` gang-schedules one Serve replica per DP rank (num_replicas counts DP groups).
    """
    if layout.dp > 1:
        return {"name": name, "route_prefix": "/", "import_path": DP_IMPORT_PATH, "args": {"llm_config": llm}}
    return {"name": name, "route_prefix": "/", "import_path": IMPORT_PATH, "args": {"llm_configs": [llm]}}


def _ray_container(spec: Obj, name: str, ports: list[Obj]) -> Obj:
    (c,) = spec["containers"]
    # KubeRay writes the `ray start` command itself; probes belong to Serve's health checks here.
    for key in ("command", "startupProbe", "readinessProbe"):
        c.pop(key, None)
    c["name"] = name
    if ports:
        c["ports"] = ports
    else:
        c.pop("ports", None)
    return spec


def ray_service(
    plan: LaunchPlan,
    layout: Layout,
    opts: K8sOptions,
    ray_version: str = "2.60.0",
    gpus_per_node: int = 8,
) -> Obj:
    """A RayService: a CPU head and enough GPU workers of one node each for x engine replicas."""
    if plan.engine != "vllm":
        raise SpecError(
            f"RayService: engine {plan.engine!r} is not served by Ray Serve LLM; use engine vllm, "
            "or the Deployment/LeaderWorkerSet objects"
        )
    if layout != plan.layout:
        raise SpecError(f"RayService: plan is for {plan.layout!s}, not layout {layout}")
    if gpus_per_node < 1:
        raise SpecError(f"RayService gpus_per_node {gpus_per_node}: must be >= 1")
    per_pod = min(gpus_per_node, layout.gpus_per_replica)
    workers = math.ceil(layout.gpus / per_pod)
    # The head schedules no engine: GPU nodes stay whole for the placement groups.
    # Ray workers inherit the container's env: secrets go there by reference (Serve's runtime_env would
    # need the values).
    empty = PodCommand(argv=(), env=(), secret_env=plan.replicas[0].processes[0].secret_env)
    head_ports = [
        {"name": "gcs", "containerPort": 6379, "protocol": "TCP"},
        {"name": "dashboard", "containerPort": 8265, "protocol": "TCP"},
        {"name": "serve", "containerPort": SERVE_PORT, "protocol": "TCP"},
    ]
    head_spec = _ray_container(pod_spec(empty, 0, opts, Probe("/", 1)), "ray-head", head_ports)
    # No GPU on the head, but Serve's controller and proxy need a core and some memory of their own.
    head_spec["containers"][0]["resources"] = {"requests": {"cpu": "2", "memory": "8Gi"}}
    # The head needs no GPU node; only the workers are pinned to the GPU product.
    head_selector = {k: v for k, v in head_spec.pop("nodeSelector", {}).items() if k != GPU_PRODUCT_LABEL}
    if head_selector:
        head_spec["nodeSelector"] = head_selector
    worker_spec = _ray_container(pod_spec(empty, per_pod, opts, None), "ray-worker", [])
    return {
        "apiVersion": RAY_API,
        "kind": "RayService",
        "metadata": object_metadata(plan, opts),
        "spec": {
            "serveConfigV2": yaml.safe_dump(serve_config(plan, layout), sort_keys=False),
            "rayClusterConfig": {
                "rayVersion": ray_version,
                "headGroupSpec": {
                    "rayStartParams": {"dashboard-host": "0.0.0.0", "num-gpus": "0"},
                    "template": {"metadata": {"labels": selector_labels(opts)}, "spec": head_spec},
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu",
                        "replicas": workers,
                        "minReplicas": workers,
                        "maxReplicas": workers,
                        "rayStartParams": {},
                        "template": {"metadata": {"labels": selector_labels(opts)}, "spec": worker_spec},
                    }
                ],
            },
        },
    }
