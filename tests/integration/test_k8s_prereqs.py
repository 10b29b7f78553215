"""k8s/: the cluster prerequisites of orch's nightly job. Core kinds pass kubernetes-validate --strict
(tier `k8s`); the rest is checked without tools: the Role covers every object orch compiles, the
CronJob runs sweep -> compare -> promote on the results volume, the spec loads with orch's loader."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from k8s_plans import missing_tool, options, vllm_plan

from orchestrator.compile.k8s import build_objects
from orchestrator.compile.k8s_ray import ray_service
from orchestrator.layout import parse_layout
from orchestrator.spec import load_spec

K8S = Path(__file__).resolve().parents[2] / "k8s"
KUBE_VERSION = "1.32.0"


def _docs() -> dict[str, list[dict[str, Any]]]:
    return {
        p.name: [d for d in yaml.safe_load_all(p.read_text()) if d]
        for p in sorted(K8S.glob("*.yaml"))
        if p.name != "kustomization.yaml"
    }


def _objects() -> list[dict[str, Any]]:
    return [d for docs in _docs().values() for d in docs]


def _one(kind: str) -> dict[str, Any]:
    (obj,) = [o for o in _objects() if o["kind"] == kind]
    return obj


@pytest.mark.k8s
def test_every_object_is_valid_under_strict_schemas() -> None:
    beside = Path(sys.executable).parent / "kubernetes-validate"
    cli = str(beside) if beside.exists() else shutil.which("kubernetes-validate")
    if cli is None:
        missing_tool("kubernetes-validate")
    files = [str(K8S / name) for name in _docs()]
    out = subprocess.run(
        [str(cli), "--strict", "-k", KUBE_VERSION, *files], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ERROR" not in out.stdout and "WARN" not in out.stdout, out.stdout
    assert out.stdout.count("passed") == len(_objects())


def test_kustomization_applies_every_file_and_everything_is_in_one_namespace() -> None:
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(kust["resources"]) == sorted(_docs())
    ns = _one("Namespace")["metadata"]["name"]
    assert all(o["metadata"].get("namespace") == ns for o in _objects() if o["kind"] != "Namespace")
    assert not [o for o in _objects() if o["kind"].startswith("Cluster")]  # namespace-scoped RBAC only


def test_role_covers_every_object_orch_compiles() -> None:
    rules = _one("Role")["rules"]

    def allowed(group: str, resource: str, verb: str) -> bool:
        return any(
            group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules
        )

    objs = [
        *build_objects(vllm_plan("tp4x2"), parse_layout("tp4x2"), options()),
        *build_objects(vllm_plan("tp8pp2"), parse_layout("tp8pp2"), options()),
        ray_service(vllm_plan("tp8"), parse_layout("tp8"), options()),
    ]
    kinds = {(o["apiVersion"].rpartition("/")[0], o["kind"].lower() + "s") for o in objs}
    assert {k for _, k in kinds} == {"deployments", "leaderworkersets", "services", "rayservices"}
    for group, resource in kinds:
        for verb in ("create", "get", "patch", "delete", "watch"):
            assert allowed(group, resource, verb), (group, resource, verb)
    for resource, verb in (("pods", "watch"), ("pods/log", "get"), ("events", "list")):
        assert allowed("", resource, verb), (resource, verb)
    binding = _one("RoleBinding")
    assert binding["subjects"][0]["name"] == _one("ServiceAccount")["metadata"]["name"]


def test_nightly_cronjob_sweeps_compares_and_promotes_latest() -> None:
    cron = _one("CronJob")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"  # one writer of the SQLite store at a time
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == _one("ServiceAccount")["metadata"]["name"]
    script = pod["containers"][0]["args"][0]
    steps = [line.strip() for line in script.splitlines() if line.strip().startswith(("orch ", "if "))]
    assert steps[0] == 'orch sweep /spec/spec.yaml --store "$STORE"'
    assert "STORE=/results/orch-results.db" in script
    assert "orch compare" in steps[1] and steps[2].startswith("orch promote latest --store")
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["results"] == "/results" and mounts["spec"] == "/spec"
    assert (
        volumes["results"]["persistentVolumeClaim"]["claimName"]
        == _one("PersistentVolumeClaim")["metadata"]["name"]
    )
    assert volumes["spec"]["configMap"]["name"] == _one("ConfigMap")["metadata"]["name"]


def test_the_nightly_spec_loads(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(_one("ConfigMap")["data"]["spec.yaml"])
    spec = load_spec(path)
    assert spec.target.kind == "local" and [str(x) for x in spec.layouts] == ["tp8", "tp4x2", "tp2x4"]
