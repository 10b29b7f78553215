"""k8s/: the cluster prerequisites of orch's nightly job. Core kinds pass kubernetes-validate --strict
(tier `k8s`); the rest is checked without tools: the Role grants exactly what the kubernetes target
calls, the CronJob runs gc -> sweep -> compare -> promote from a CPU pod on the results volume, the spec
loads with orch's loader and targets the cluster."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator.compile import prepare
from orchestrator.compile.k8s import build_objects
from orchestrator.layout import parse_layout
from orchestrator.spec import load_spec
from tests.support.k8s_manifests import K8S, docs, objects, one, role_grants
from tests.support.k8s_plans import missing_tool, options, vllm_plan

KUBE_VERSION = "1.32.0"


@pytest.mark.k8s
def test_every_object_is_valid_under_strict_schemas() -> None:
    beside = Path(sys.executable).parent / "kubernetes-validate"
    cli = str(beside) if beside.exists() else shutil.which("kubernetes-validate")
    if cli is None:
        missing_tool("kubernetes-validate")
    files = [str(K8S / name) for name in docs()]
    out = subprocess.run(
        [str(cli), "--strict", "-k", KUBE_VERSION, *files], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ERROR" not in out.stdout and "WARN" not in out.stdout, out.stdout
    assert out.stdout.count("passed") == len(objects())


def test_kustomization_applies_every_file_and_everything_is_in_one_namespace() -> None:
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(kust["resources"]) == sorted(docs())
    ns = one("Namespace")["metadata"]["name"]
    assert all(o["metadata"].get("namespace") == ns for o in objects() if o["kind"] != "Namespace")
    assert not [o for o in objects() if o["kind"].startswith("Cluster")]  # namespace-scoped RBAC only


# What orchestrator/deploy/k8s.py and k8s_objects.py call (create_/read_/list_/delete_namespaced_*): the
# per-run ConfigMap owns the run's objects; pods, events and logs are only read to explain a failed start.
TARGET_NEEDS = {
    ("", "configmaps"): {"create", "get", "list", "delete"},
    ("", "services"): {"create", "get", "list", "delete"},
    ("apps", "deployments"): {"create", "get", "list", "delete"},
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): {"create", "get", "list", "delete"},
    ("", "pods"): {"get", "list"},
    ("", "pods/log"): {"get", "list"},
    ("", "events"): {"get", "list"},
}


def test_role_grants_exactly_what_the_kubernetes_target_calls() -> None:
    grants = role_grants()
    assert grants == TARGET_NEEDS  # nothing more: no watch/patch, no secrets, no port-forward in-cluster
    objs = [
        *build_objects(vllm_plan("tp4x2"), parse_layout("tp4x2"), options()),
        *build_objects(vllm_plan("tp8pp2"), parse_layout("tp8pp2"), options()),
    ]
    for obj in objs:  # every object a sweep applies can be created and removed again
        key = (obj["apiVersion"].rpartition("/")[0], obj["kind"].lower() + "s")
        assert {"create", "delete"} <= grants[key], key
    binding = one("RoleBinding")
    assert binding["subjects"][0]["name"] == one("ServiceAccount")["metadata"]["name"]


def test_nightly_cronjob_sweeps_compares_and_promotes_latest() -> None:
    cron = one("CronJob")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"  # one writer of the SQLite store at a time
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == one("ServiceAccount")["metadata"]["name"]
    container = pod["containers"][0]
    script = container["args"][0]
    steps = [line.strip() for line in script.splitlines() if line.strip().startswith(("orch ", "if "))]
    assert steps[0] == "orch gc /spec/spec.yaml"  # what an interrupted night left goes first
    # Every layout measured every night: a pruned one would have no number to compare.
    assert steps[1] == 'orch sweep /spec/spec.yaml --store "$STORE" --measure-all'
    assert "STORE=/results/orch-results.db" in script
    assert "orch compare" in steps[2] and steps[3].startswith("orch promote latest --store")
    # orch runs on CPU; the engines' GPU pods are created by the sweep.
    resources = container["resources"]
    assert not any("gpu" in k for part in resources.values() for k in part), resources
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["results"] == "/results" and mounts["spec"] == "/spec"
    assert "model-cache" not in volumes and "dshm" not in volumes
    assert (
        volumes["results"]["persistentVolumeClaim"]["claimName"]
        == one("PersistentVolumeClaim")["metadata"]["name"]
    )
    assert volumes["spec"]["configMap"]["name"] == one("ConfigMap")["metadata"]["name"]


def test_the_nightly_spec_loads_and_targets_this_namespace(tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(one("ConfigMap")["data"]["spec.yaml"])
    spec = load_spec(path)
    target = spec.target
    assert target.kind == "kubernetes"
    assert target.namespace == one("Role")["metadata"]["namespace"]  # the Role covers where it deploys
    assert target.access == "service" and ":" in target.image and not target.image.endswith(":latest")
    assert [str(x) for x in spec.layouts] == ["tp8", "tp4x2", "tp8pp2"]
    kinds = set()
    for text in ("tp8", "tp4x2", "tp8pp2"):
        plan = prepare(spec, parse_layout(text), engine="vllm").plan
        kinds |= {o["kind"] for o in build_objects(plan, parse_layout(text), options())}
    assert kinds == {"Deployment", "LeaderWorkerSet", "Service"}
