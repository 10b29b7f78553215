"""The chart in helm/ under a real Helm (ORCH_HELM, from .ci/setup.d/40-helm-k8s.sh): it lints strictly,
renders exactly the objects compile.k8s builds for the same layout, and its values.schema.json rejects bad
values."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.compile.helm_values import helm_values
from orchestrator.compile.k8s import build_objects
from orchestrator.layout import parse_layout
from tests.support.k8s_plans import (
    missing_tool,
    options,
    real_plan,
    sglang_multi_node_plan,
    vllm_dp_plan,
    vllm_plan,
)
from tests.support.paths import ROOT

pytestmark = pytest.mark.helm

CHART = ROOT / "helm"
LWS_API = ["--api-versions", "leaderworkerset.x-k8s.io/v1"]


@pytest.fixture(scope="module")
def helm() -> str:
    path = os.environ.get("ORCH_HELM")
    if not path or not Path(path).is_file():
        missing_tool("ORCH_HELM (a helm binary)")
    assert path is not None
    return path


def _run(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=120)


def _values_file(values: dict[str, Any], tmp_path: Path) -> Path:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def _render(helm: str, values: Path, namespace: str, *extra: str) -> list[dict[str, Any]]:
    result = _run(helm, "template", "rel", str(CHART), "--namespace", namespace, "-f", str(values), *extra)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]


def _by_kind(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {o["kind"]: o for o in objs}
    assert len(out) == len(objs), "two objects of one kind"
    return out


def test_lint_strict_defaults(helm: str) -> None:
    result = _run(helm, "lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("text", ["tp8", "tp4x2"])
def test_lint_strict_with_compiled_values(helm: str, text: str, tmp_path: Path) -> None:
    values = _values_file(helm_values(vllm_plan(text), parse_layout(text), options()), tmp_path)
    result = _run(helm, "lint", "--strict", str(CHART), "-f", str(values))
    assert result.returncode == 0, result.stdout + result.stderr


CASES = {
    "tp8": lambda: (vllm_plan("tp8"), "tp8", options()),
    "tp4x2": lambda: (vllm_plan("tp4x2"), "tp4x2", options()),
    "tp8pp2": lambda: (vllm_plan("tp8pp2"), "tp8pp2", options()),
    "dp24-shell-worker": lambda: (vllm_dp_plan(3), "dp24", options()),
    "tp8pp2x2-bare": lambda: (
        vllm_plan("tp8pp2x2"),
        "tp8pp2x2",
        options(model_cache_pvc=None, hf_token_secret=None, gpu_product=None, tolerations=(), spec_hash=None),
    ),
    "sglang-tp24-extras": lambda: (
        sglang_multi_node_plan(3),
        "tp24",
        options(
            node_selector=(("pool", "h100"),),
            service_account="engine",
            extra_labels=(("team", "inference"),),
            startup_budget_s=3600,
            service_port=80,
        ),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_chart_renders_python_objects(helm: str, case: str, tmp_path: Path) -> None:
    plan, text, opts = CASES[case]()
    layout = parse_layout(text)
    expected = _by_kind(build_objects(plan, layout, opts))
    values = _values_file(helm_values(plan, layout, opts), tmp_path)
    rendered = _by_kind(_render(helm, values, opts.namespace, "--kube-version", "1.32.0", *LWS_API))
    assert rendered.keys() == expected.keys()
    for kind, obj in expected.items():
        assert rendered[kind] == obj, f"{kind} differs between chart and compile.k8s"


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("text", ["tp8", "tp4x2", "tp8pp2"])
def test_chart_renders_real_engine_plans(helm: str, engine: str, text: str, tmp_path: Path) -> None:
    plan = real_plan(engine, text)
    if plan is None:
        pytest.skip(f"orchestrator.engines.ENGINES has no {engine!r} (engine module written in parallel)")
    layout, opts = parse_layout(text), options()
    values = _values_file(helm_values(plan, layout, opts), tmp_path)
    rendered = _by_kind(_render(helm, values, opts.namespace, *LWS_API))
    assert rendered == _by_kind(build_objects(plan, layout, opts))


@pytest.mark.parametrize("text", ["tp8", "tp8pp2"])
def test_objects_go_to_the_namespace_orch_compiled_for(helm: str, text: str, tmp_path: Path) -> None:
    # `orch compile --format helm-values --namespace llm` must put the objects in llm even when helm
    # is run with another --namespace (it used to follow helm's flag alone, ignoring orch's).
    layout, opts = parse_layout(text), options(namespace="llm")
    values = _values_file(helm_values(vllm_plan(text), layout, opts), tmp_path)
    rendered = _render(helm, values, "default", *LWS_API)
    assert {obj["metadata"]["namespace"] for obj in rendered} == {"llm"}


def test_multi_node_needs_lws_api(helm: str, tmp_path: Path) -> None:
    values = _values_file(helm_values(vllm_plan("tp8pp2"), parse_layout("tp8pp2"), options()), tmp_path)
    result = _run(helm, "template", "rel", str(CHART), "-f", str(values))
    assert result.returncode != 0
    assert "LeaderWorkerSet API" in result.stderr


BAD_VALUES = {
    "negative replicas": (["--set", "replicas=-1"], "replicas"),
    "missing image": (["--set", "image=null"], "image"),
    "empty image": (["--set", "image="], "image"),
    "typo key": (["--set", "replica=2"], "replica"),
    "port out of range": (["--set", "containerPort=70000"], "containerPort"),
    "no command": (["--set", "leader.command=null"], "command"),
    "multi-node without worker command": (["--set", "nodesPerReplica=2"], "worker"),
    "bad name": (["--set", "name=Bad_Name"], "name"),
    "typo in an extension": (["--set", "affinty.x=1"], "affinty"),
    "pull secret without name": (["--set", "imagePullSecrets[0].nam=x"], "imagePullSecrets"),
    "bad cpu request": (["--set", "resources.requests.cpu=lots"], "cpu"),
    "probe timeout zero": (["--set", "probes.timeoutSeconds=0"], "timeoutSeconds"),
}


@pytest.mark.parametrize("case", list(BAD_VALUES))
def test_schema_rejects_bad_values(helm: str, case: str) -> None:
    args, field = BAD_VALUES[case]
    result = _run(helm, "template", "rel", str(CHART), *LWS_API, *args)
    assert result.returncode != 0, f"{case}: accepted"
    assert field in result.stderr, result.stderr


def test_extension_values_reach_every_pod(helm: str, tmp_path: Path) -> None:
    # What a platform team adds on top of orch's values: RDMA for multi-node, pull secrets, affinity ...
    values = helm_values(vllm_plan("tp8pp2"), parse_layout("tp8pp2"), options())
    values |= {
        "extraEnv": [{"name": "NCCL_IB_HCA", "value": "mlx5"}],
        "extraVolumes": [{"name": "certs", "secret": {"secretName": "ca"}}],
        "extraVolumeMounts": [{"name": "certs", "mountPath": "/certs"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
        }}},
        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
        "podSecurityContext": {"fsGroup": 1000},
        "imagePullSecrets": [{"name": "registry"}],
    }
    values["resources"]["extraLimits"] = {"rdma/ib": 1}
    lws = _by_kind(_render(helm, _values_file(values, tmp_path), "llm", *LWS_API))["LeaderWorkerSet"]
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        spec = tmpl[role]["spec"]
        (c,) = spec["containers"]
        assert {"name": "NCCL_IB_HCA", "value": "mlx5"} in c["env"]
        assert c["resources"]["limits"] == {"nvidia.com/gpu": 8, "rdma/ib": 1}
        assert c["resources"]["requests"] == {"cpu": "32", "memory": "192Gi"}
        assert c["securityContext"] == values["securityContext"]
        assert {"name": "certs", "mountPath": "/certs"} in c["volumeMounts"]
        assert {"name": "certs", "secret": {"secretName": "ca"}} in spec["volumes"]
        assert spec["affinity"] == values["affinity"]
        assert spec["securityContext"] == {"fsGroup": 1000}
        assert spec["imagePullSecrets"] == [{"name": "registry"}]


@pytest.mark.parametrize("text", ["tp8", "tp8pp2"])
def test_chart_renders_secret_references(helm: str, text: str, tmp_path: Path) -> None:
    """engine.env_from_secret: the chart renders the same secretKeyRef entries as compile.k8s, and HF_TOKEN
    once (the spec's reference replaces the default hf-token Secret)."""
    from dataclasses import replace

    from orchestrator.engines.base import SecretEnv

    refs = (
        SecretEnv("HF_TOKEN", "HF_TOKEN", "hf-creds", "token"), SecretEnv("API_KEY", "API_KEY", "api", "k")
    )
    plan = vllm_plan(text)
    plan = replace(plan, replicas=tuple(
        replace(r, processes=tuple(replace(p, secret_env=refs) for p in r.processes)) for r in plan.replicas
    ))
    layout, opts = parse_layout(text), options()
    values = _values_file(helm_values(plan, layout, opts), tmp_path)
    rendered = _by_kind(_render(helm, values, opts.namespace, *LWS_API))
    assert rendered == _by_kind(build_objects(plan, layout, opts))
    text_out = yaml.safe_dump(list(rendered.values()))
    assert "hf-creds" in text_out and "name: hf-token" not in text_out
