"""One layout as a deployable text in each format (helm-values, k8s, shell, ray-serve), shared by
`orch compile` and `orch promote`, and the choices that make those texts apply as they are on a cluster:
a pinned image tag, the GPU product the pods must land on, the object options from the spec's target.
Pure: no cluster access.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from orchestrator.compile import Compiled, to_shell
from orchestrator.compile.helm_values import helm_values, pair_helm_values
from orchestrator.compile.k8s import GPU_PRODUCT_LABEL, K8sOptions, build_objects, options_from_target
from orchestrator.compile.k8s_pd import build_pair_objects
from orchestrator.compile.ray_serve import accelerator_type, pd_serve_app_config, serve_app_config
from orchestrator.engines.base import LaunchPlan
from orchestrator.errors import SpecError
from orchestrator.layout import Layout
from orchestrator.spec.models import SweepSpec
from orchestrator.spec.targets import KubernetesTarget

FORMATS = ("helm-values", "k8s", "shell", "ray-serve")
FILES = {
    "helm-values": "values.yaml",
    "k8s": "manifests.yaml",
    "shell": "launch.sh",
    "ray-serve": "ray-serve.yaml",
}
DEFAULT_IMAGES = {"vllm": "vllm/vllm-openai", "sglang": "lmsysorg/sglang"}
# The engine releases orch's flags are checked against (tests/integration/test_engine_parsers.py); the
# image a default points at when the spec names no engine version.
CHECKED_VERSIONS = {"vllm": "0.32.0", "sglang": "0.5.23"}

# orch GPU presets -> the node label NVIDIA GPU feature discovery sets (nvidia.com/gpu.product): the
# NVML product name with spaces as '-'. Presets not listed (AMD, CPU) get no product selector.
GPU_PRODUCTS = {
    "h100-sxm": "NVIDIA-H100-80GB-HBM3",
    "h200": "NVIDIA-H200",
    "a100-sxm-80gb": "NVIDIA-A100-SXM4-80GB",
    "b200": "NVIDIA-B200",
    "l40s": "NVIDIA-L40S",
}

_CHART = Path(__file__).resolve().parents[2] / "helm" / "Chart.yaml"


def chart_version(chart_yaml: Path = _CHART) -> str | None:
    """The version of the chart in helm/ the values are for; None where orch runs without its sources."""
    try:
        chart = yaml.safe_load(chart_yaml.read_text())
    except (OSError, yaml.YAMLError):
        return None
    version = chart.get("version") if isinstance(chart, dict) else None
    return str(version) if version is not None else None


def product_from_seen(gpus_seen: Iterable[str]) -> str | None:
    """The product label of the GPUs a run saw (nvidia-smi lines "NAME, MEMORY, DRIVER"), if all agree."""
    names = {line.split(",", 1)[0].strip() for line in gpus_seen if line.strip()}
    if len(names) != 1:
        return None
    label = re.sub(r"\s+", "-", names.pop())
    return label if label.startswith("NVIDIA") and len(label) <= 63 else None


def gpu_product(gpu_preset: str) -> str | None:
    """The product label of an orch GPU preset (by name or alias)."""
    from orchestrator.catalog.loader import load_gpu

    with contextlib.suppress(SpecError):
        return GPU_PRODUCTS.get(load_gpu(gpu_preset).name)
    return None


def check_pinned(image: str, where: str) -> None:
    """Refuse an image whose tag can move under a deployment: none, or latest."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = last.partition(":")[2]
    if digest:
        return
    if not tag or tag == "latest":
        repo = name.rsplit(":", 1)[0] if tag else name
        raise SpecError(
            f"{where}: image {image!r} has no pinned tag ({'latest' if tag else 'none'} moves under a "
            f"deployment); name the version you measured, e.g. {repo}:v0.32.0, or a digest @sha256:..."
        )


def default_image(spec: SweepSpec, engine: str) -> tuple[str, str]:
    """The engine's public image at the spec's engine version (else the checked one), and why."""
    if engine not in DEFAULT_IMAGES:  # the simulator has no public image: pods need one with orch in it
        raise SpecError(
            f"engine {engine} has no public image to run in pods: pass --image with a pinned tag of an image "
            "that has orch installed, or --engine vllm|sglang for the real engine's objects"
        )
    if spec.engine.version and spec.engine.name == engine:
        return f"{DEFAULT_IMAGES[engine]}:v{spec.engine.version}", f"engine.version {spec.engine.version}"
    version = CHECKED_VERSIONS[engine]
    return (
        f"{DEFAULT_IMAGES[engine]}:v{version}",
        f"{engine} {version}, the release orch's flags are checked on",
    )


def artifact_options(
    spec: SweepSpec,
    engine: str,
    name: str,
    *,
    image: str | None = None,
    namespace: str | None = None,
    spec_hash: str | None = None,
    product: str | None = None,
    router_image: str | None = None,
) -> tuple[K8sOptions, list[str]]:
    """Object options from the spec's kubernetes target (or defaults), flags winning, with notes.

    `product` is the GPU product label the pods must run on (what a run measured); default: the label of
    the spec's GPU preset, unless the target's node_selector names one already.
    """
    notes: list[str] = []
    over: dict[str, Any] = {"spec_hash": spec_hash}
    if namespace:
        over["namespace"] = namespace
    target = spec.target if isinstance(spec.target, KubernetesTarget) else None
    if router_image:  # a prefill/decode pair's router (compile/k8s_pd.py)
        check_pinned(router_image, "--router-image")
        over["router_image"] = router_image
    elif target is not None and target.router_image:
        check_pinned(target.router_image, "target.router_image")
    if image:
        check_pinned(image, "--image")
        over["image"] = image
    elif target is not None:
        check_pinned(target.image, "target.image")
    else:
        over["image"], why = default_image(spec, engine)
        notes.append(f"image {over['image']} is a default ({why}): pass --image with the tag you tested")
    chosen = product or gpu_product(spec.hardware.gpu)
    if target is not None and GPU_PRODUCT_LABEL in target.node_selector:
        chosen = None  # the target's own selector says where; do not contradict it
    elif chosen is None:
        notes.append(
            f"no {GPU_PRODUCT_LABEL} node selector for GPU {spec.hardware.gpu!r}: the pods may land on any "
            "GPU node; set target.node_selector"
        )
    over["gpu_product"] = chosen
    opts = options_from_target(target, name, **over) if target else K8sOptions(name=name, **over)
    return opts, notes


def render(fmt: str, compiled: Compiled, spec: SweepSpec, opts: K8sOptions | None) -> str | None:
    """One format's text (helm-values and k8s need opts); None for ray-serve of an engine other than vLLM.
    A prefill/decode pair's plan renders both pools and its router: Kubernetes objects per pool and the
    router's (compile/k8s_pd.py), Helm values with one unit per pool and the router (the chart renders
    each unit as it renders one layout), Ray Serve LLM's prefill/decode application."""
    plan = compiled.plan
    if fmt in ("helm-values", "k8s"):
        if opts is None:
            raise ValueError(f"render {fmt}: needs the object options")  # a bug: callers pass them
        if plan.pools:
            if fmt == "helm-values":
                return yaml.safe_dump(pair_helm_values(plan, opts), sort_keys=False)
            return yaml.safe_dump_all(build_pair_objects(plan, opts), sort_keys=False)
        layout = _one_layout(plan)
        if fmt == "helm-values":
            return yaml.safe_dump(helm_values(plan, layout, opts), sort_keys=False)
        return yaml.safe_dump_all(build_objects(plan, layout, opts), sort_keys=False)
    if fmt == "shell":
        return to_shell(plan, compiled.placement.nodes)
    if fmt == "ray-serve":
        if plan.engine != "vllm":
            return None
        if plan.pools:
            cfg = pd_serve_app_config(plan, accelerator_type(spec.hardware.gpu))
        else:
            cfg = serve_app_config(plan, _one_layout(plan), accelerator_type(spec.hardware.gpu))
        return yaml.safe_dump(cfg, sort_keys=False)
    raise SpecError(f"--format {fmt}: choose from {', '.join(FORMATS)}")


def _one_layout(plan: LaunchPlan) -> Layout:
    layout = plan.layout
    if not isinstance(layout, Layout):
        raise SpecError(f"launch plan {plan.name}: a prefill/decode pair's plan needs its pools")
    return layout
