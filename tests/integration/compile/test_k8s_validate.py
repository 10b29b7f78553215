"""The objects orch builds, validated offline: core kinds with kubernetes-validate --strict, the
LeaderWorkerSet and RayService with our own JSON Schemas (kubernetes-validate only warns on CRDs).
Tools come from .ci/setup.d/40-helm-k8s.sh."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.compile.k8s import build_objects
from orchestrator.compile.k8s_ray import ray_service
from orchestrator.layout import parse_layout
from tests.support.k8s_crd_schemas import LEADER_WORKER_SET, RAY_SERVICE, SERVE_CONFIG
from tests.support.k8s_plans import (
    missing_tool,
    options,
    real_plan,
    sglang_multi_node_plan,
    vllm_dp_plan,
    vllm_plan,
)
from tests.support.paths import ROOT

pytestmark = pytest.mark.k8s

KUBE_VERSION = "1.32.0"
LAYOUTS = ["tp8", "tp4x2", "tp8pp2"]


def _validator_cli() -> str:
    beside = Path(sys.executable).parent / "kubernetes-validate"
    found = str(beside) if beside.exists() else shutil.which("kubernetes-validate")
    if found is None:
        missing_tool("kubernetes-validate")
    assert found is not None
    return found


def _jsonschema() -> Any:
    try:
        import jsonschema
    except ImportError:
        missing_tool("jsonschema")
    return jsonschema


def _kube_validate(objs: list[dict[str, Any]], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    return subprocess.run(
        [_validator_cli(), "--strict", "-k", KUBE_VERSION, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """A CRD's embedded pod templates as standalone PodTemplate objects, which kubernetes-validate knows."""
    spec = obj["spec"]
    if obj["kind"] == "LeaderWorkerSet":
        t = spec["leaderWorkerTemplate"]
        templates = [t["leaderTemplate"], t["workerTemplate"]]
    elif obj["kind"] == "RayService":
        c = spec["rayClusterConfig"]
        templates = [c["headGroupSpec"]["template"]] + [g["template"] for g in c["workerGroupSpecs"]]
    else:
        return []
    return [
        {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"t{i}"}, "template": tmpl}
        for i, tmpl in enumerate(templates)
    ]


def _core(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for obj in objs:
        out.extend(_pod_templates(obj) or ([obj] if "x-k8s.io" not in obj["apiVersion"] else []))
    return out


@pytest.mark.parametrize("text", LAYOUTS)
def test_core_kinds_strict(text: str, tmp_path: Path) -> None:
    objs = build_objects(vllm_plan(text), parse_layout(text), options())
    core = _core(objs)
    assert {o["kind"] for o in core} == (
        {"PodTemplate", "Service"} if text == "tp8pp2" else {"Deployment", "Service"}
    )
    result = _kube_validate(core, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ERROR" not in result.stdout and "WARN" not in result.stdout, result.stdout
    assert result.stdout.count("passed") == len(core)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("text", LAYOUTS)
def test_real_engine_plans_strict(engine: str, text: str, tmp_path: Path) -> None:
    plan = real_plan(engine, text)
    if plan is None:
        pytest.skip(f"orchestrator.engines.ENGINES has no {engine!r} (engine module written in parallel)")
    result = _kube_validate(_core(build_objects(plan, parse_layout(text), options())), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_sglang_three_node_pod_templates_strict(tmp_path: Path) -> None:
    lws, svc = build_objects(sglang_multi_node_plan(3), parse_layout("tp24"), options())
    dp, _ = build_objects(vllm_dp_plan(3), parse_layout("dp24"), options())
    result = _kube_validate([*_pod_templates(lws), *_pod_templates(dp), svc], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_validator_catches_unknown_field(tmp_path: Path) -> None:
    # Proves --strict is in force: an unknown container field must fail.
    dep, _ = build_objects(vllm_plan("tp8"), parse_layout("tp8"), options())
    dep["spec"]["template"]["spec"]["containers"][0]["gpus"] = 8
    result = _kube_validate([dep], tmp_path)
    assert result.returncode != 0 and "'gpus' was unexpected" in result.stdout


@pytest.mark.parametrize("text", ["tp8pp2", "tp8pp2x2"])
def test_leader_worker_set_schema(text: str) -> None:
    js = _jsonschema()
    lws, _ = build_objects(vllm_plan(text), parse_layout(text), options())
    js.Draft7Validator.check_schema(LEADER_WORKER_SET)
    js.validate(lws, LEADER_WORKER_SET)


def test_leader_worker_set_schema_rejects() -> None:
    js = _jsonschema()
    lws, _ = build_objects(vllm_plan("tp8pp2"), parse_layout("tp8pp2"), options())
    bad_size = yaml.safe_load(yaml.safe_dump(lws))
    bad_size["spec"]["leaderWorkerTemplate"]["size"] = 0
    typo = yaml.safe_load(yaml.safe_dump(lws))
    typo["spec"]["leaderWorkerTemplate"]["workerTemplates"] = typo["spec"]["leaderWorkerTemplate"].pop(
        "workerTemplate"
    )
    for bad in (bad_size, typo):
        with pytest.raises(js.ValidationError):
            js.validate(bad, LEADER_WORKER_SET)


@pytest.mark.parametrize("text", LAYOUTS)
def test_ray_service_schema_and_pods(text: str, tmp_path: Path) -> None:
    js = _jsonschema()
    rs = ray_service(vllm_plan(text), parse_layout(text), options())
    js.Draft7Validator.check_schema(RAY_SERVICE)
    js.validate(rs, RAY_SERVICE)
    js.validate(yaml.safe_load(rs["spec"]["serveConfigV2"]), SERVE_CONFIG)
    result = _kube_validate(_pod_templates(rs), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ray_service_schema_rejects() -> None:
    js = _jsonschema()
    rs = ray_service(vllm_plan("tp8"), parse_layout("tp8"), options())
    rs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] = -1
    with pytest.raises(js.ValidationError):
        js.validate(rs, RAY_SERVICE)


@pytest.mark.parametrize(
    ("spec_name", "text", "engine"),
    [("qwen72b.yaml", "tp4x2", "vllm"), ("deepseek-v3.yaml", "tp8pp2x2", "vllm"),
     ("deepseek-v3.yaml", "dp16epx2", "sglang")],
)  # fmt: skip
def test_orch_compile_k8s_output_applies(spec_name: str, text: str, engine: str, tmp_path: Path) -> None:
    """What `orch compile --format k8s` prints (the CLI's own YAML text) passes strict validation; the
    LeaderWorkerSet also passes the CRD schema."""
    spec = ROOT / "layouts" / spec_name
    out = subprocess.run(
        [sys.executable, "-c", "from orchestrator.cli import main; main()", "compile", str(spec),
         "--layout", text, "--engine", engine, "--format", "k8s", "--image", f"{engine}/engine:v1.2.3"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    objs = [o for o in yaml.safe_load_all(out.stdout) if o]
    for obj in objs:
        if obj["kind"] == "LeaderWorkerSet":
            _jsonschema().validate(obj, LEADER_WORKER_SET)
    result = _kube_validate(_core(objs), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ERROR" not in result.stdout and "WARN" not in result.stdout, result.stdout
