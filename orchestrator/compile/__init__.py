"""Compile: a spec and a candidate become the engine's LaunchPlan (`prepare`, the one launch plan every
caller uses), and a LaunchPlan becomes deployable text: shell scripts, JSON, Kubernetes objects, Helm
values, Ray Serve configs. Pure: no cluster access."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.faces import lazy_face

if TYPE_CHECKING:
    from orchestrator.compile.artifacts import FILES as FILES
    from orchestrator.compile.artifacts import FORMATS as FORMATS
    from orchestrator.compile.artifacts import artifact_options as artifact_options
    from orchestrator.compile.artifacts import chart_version as chart_version
    from orchestrator.compile.artifacts import product_from_seen as product_from_seen
    from orchestrator.compile.artifacts import render as render
    from orchestrator.compile.helm_values import CHART_NAME as CHART_NAME
    from orchestrator.compile.k8s import GPU_PRODUCT_LABEL as GPU_PRODUCT_LABEL
    from orchestrator.compile.k8s import LABEL_PREFIX as LABEL_PREFIX
    from orchestrator.compile.k8s import LABEL_ROLE as LABEL_ROLE
    from orchestrator.compile.k8s import LWS_API as LWS_API
    from orchestrator.compile.k8s import MAX_NAME as MAX_NAME
    from orchestrator.compile.k8s import K8sOptions as K8sOptions
    from orchestrator.compile.k8s import Obj as Obj
    from orchestrator.compile.k8s import build_objects as build_objects
    from orchestrator.compile.k8s import options_from_target as options_from_target
    from orchestrator.compile.k8s_pd import LONGEST_SUFFIX as LONGEST_SUFFIX
    from orchestrator.compile.k8s_pd import build_pair_objects as build_pair_objects
    from orchestrator.compile.k8s_pd import pool_options as pool_options
    from orchestrator.compile.launch import Compiled as Compiled
    from orchestrator.compile.launch import engine_options as engine_options
    from orchestrator.compile.launch import is_cpu as is_cpu
    from orchestrator.compile.launch import model_ref as model_ref
    from orchestrator.compile.launch import placement as placement
    from orchestrator.compile.launch import prepare as prepare
    from orchestrator.compile.launch import secret_env as secret_env
    from orchestrator.compile.launch import sim_options as sim_options
    from orchestrator.compile.launch import to_json as to_json
    from orchestrator.compile.shell import node_script as node_script
    from orchestrator.compile.shell import to_shell as to_shell

__getattr__, __all__ = lazy_face(__name__, {
    "artifacts": ("FILES", "FORMATS", "artifact_options", "chart_version", "product_from_seen", "render",),
    "helm_values": ("CHART_NAME",),
    "k8s": ("K8sOptions", "MAX_NAME",
        "GPU_PRODUCT_LABEL", "LABEL_PREFIX", "LABEL_ROLE", "LWS_API", "Obj", "build_objects",
        "options_from_target",
    ),
    "launch": (
        "Compiled", "engine_options", "is_cpu", "model_ref", "placement", "prepare", "secret_env",
        "sim_options", "to_json",
    ),
    "shell": ("node_script", "to_shell",),
    "k8s_pd": ("LONGEST_SUFFIX", "build_pair_objects", "pool_options",),
})  # fmt: skip
