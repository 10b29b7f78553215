"""`orch sweep` with target.kind kubernetes, end to end through the real `kubernetes` client against the
fake API server of tests/support/k8s_fake_apiserver.py (no real API server can run here; that file says
what it plays and what it does not). Every test checks what is left in the namespace and of the fake's
engines."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.store.db import Store
from tests.support.cli import ORCH
from tests.support.k8s_fake_api import NS, FakeApi
from tests.support.k8s_plans import missing_tool
from tests.support.paths import ROOT

pytestmark = pytest.mark.k8s


@pytest.fixture(autouse=True)
def _kubernetes_client() -> None:
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        missing_tool("the kubernetes client (pip install kubernetes)")

@pytest.fixture
def fake_api(tmp_path: Path) -> Iterator[Any]:
    started: list[FakeApi] = []

    def start(*args: str) -> FakeApi:
        home = tmp_path / f"api{len(started)}"
        home.mkdir()
        started.append(FakeApi(home, *args))
        return started[-1]

    yield start
    for api in started:
        api.stop()


def _spec(tmp: Path, layouts: list[str], *, nodes: int = 1, startup_s: float = 120, **target: Any) -> Path:
    # Nodes of 4 GPUs: tp4pp2 spans two of them and becomes a LeaderWorkerSet.
    spec = {
        "model": {"name": "qwen2.5-7b", "max_model_len": 4096},
        "hardware": {"gpu": "h100-sxm", "nodes": nodes, "gpus_per_node": 4},
        "engine": {"name": "vllm", "startup_s": startup_s},
        "target": {"kind": "kubernetes", "namespace": NS, "image": "vllm/vllm-openai:v0.32.0", **target},
        "workload": {
            "kind": "random",
            "input_tokens": 64,
            "output_tokens": 16,
            "arrival": "poisson",
            "rates_per_s": [4],
            "num_requests": 8,
            "seed": 0,
        },
        "slo": {"ttft_p99_ms": 60000, "itl_p99_ms": 60000},
        "layouts": layouts,
    }
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _orch(api: FakeApi, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"KUBECONFIG": str(api.kubeconfig), "PYTHONPATH": str(ROOT)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.run([*ORCH, *args], capture_output=True, text=True, env=env, timeout=timeout)


def _layouts(store: Path) -> dict[str, tuple[str, str | None]]:
    db = Store(store)
    (run,) = db.runs()
    return {row.layout: (row.status, row.reason) for row in db.layouts(run.run_id)}


def _completed(store: Path, layout: str) -> int:
    db = Store(store)
    (run,) = db.runs()
    return sum(1 for lay, _, rec in db.records(run.run_id) if lay == layout and rec.error is None)


def test_sweep_measures_deployments_and_leader_worker_sets(fake_api: Any, tmp_path: Path) -> None:
    api = fake_api("--sim-model", "qwen2.5-7b")
    store = tmp_path / "results.db"
    # tp4: one pod; tp2x2: two pods behind two port-forwards; tp4pp2: a LeaderWorkerSet leader + worker.
    spec = _spec(tmp_path, ["tp4", "tp2x2", "tp4pp2"], nodes=2)
    out = _orch(api, "sweep", "--measure-all", str(spec), "--store", str(store))
    assert out.returncode in (0, 3), out.stderr[-3000:]
    layouts = _layouts(store)
    assert {k: v[0] for k, v in layouts.items()} == {
        "tp4": "measured",
        "tp2x2": "measured",
        "tp4pp2": "measured",
    }
    for layout in layouts:
        assert _completed(store, layout) == 8, layout
    assert api.left() == {}
    assert api.engines_alive() == 0


FAILURES = {
    "unschedulable": "is unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu",
    "imagepull": "cannot pull image vllm/vllm-openai:v0.32.0",
    "oom": "was OOMKilled (exit 137",
    "crashloop": "keeps crashing (exit 1, 2 restarts); last log lines:",
    "never-ready": "not ready after 8 s",
}


@pytest.mark.parametrize("fate", sorted(FAILURES))
def test_each_failure_is_explained_and_nothing_is_left(fake_api: Any, tmp_path: Path, fate: str) -> None:
    expected = FAILURES[fate]
    api = fake_api("--fate", f"tp4={fate}")
    store = tmp_path / "results.db"
    # startup_s bounds readiness: long enough for the healthy tp2 on a busy machine, short for never-ready.
    spec = _spec(tmp_path, ["tp4", "tp2"], startup_s=8, unschedulable_timeout_s=1)
    out = _orch(api, "sweep", "--measure-all", str(spec), "--store", str(store))
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    layouts = _layouts(store)
    status, reason = layouts["tp4"]
    assert status == "failed"
    assert reason is not None and expected in reason, reason
    if fate == "crashloop":
        assert "ValueError: The model's max seq len" in reason
    # The other layout is still measured: one failure costs one layout, not the sweep.
    assert layouts["tp2"][0] == "measured", layouts["tp2"]
    assert api.left() == {}
    assert api.engines_alive() == 0


def test_cluster_without_lws_says_how_to_install_it(fake_api: Any, tmp_path: Path) -> None:
    api = fake_api("--no-lws")
    store = tmp_path / "results.db"
    out = _orch(api, "sweep", str(_spec(tmp_path, ["tp4pp2"], nodes=2)), "--store", str(store))
    assert "Traceback" not in out.stderr
    status, reason = _layouts(store)["tp4pp2"]
    assert status == "failed" and reason is not None
    assert "no LeaderWorkerSet API" in reason and "kubernetes-sigs/lws" in reason
    assert api.left() == {}


def test_missing_permission_names_verb_and_resource(fake_api: Any, tmp_path: Path) -> None:
    api = fake_api("--forbid", "create:services")
    store = tmp_path / "results.db"
    out = _orch(api, "sweep", str(_spec(tmp_path, ["tp4"])), "--store", str(store))
    assert "Traceback" not in out.stderr
    status, reason = _layouts(store)["tp4"]
    assert status == "failed" and reason is not None
    assert "not allowed to create services in namespace llm" in reason
    assert 'cannot create resource "services"' in reason
    # The Deployment created before the Service was refused is gone again, and the run's ConfigMap too.
    assert api.left() == {}


def test_no_kubeconfig_is_one_line(fake_api: Any, tmp_path: Path) -> None:
    api = fake_api()
    api.kubeconfig = tmp_path / "missing-kubeconfig"
    out = _orch(api, "sweep", str(_spec(tmp_path, ["tp4"])), "--store", str(tmp_path / "r.db"))
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "kubeconfig" in lines[0] and "KUBECONFIG" in lines[0], out.stderr


def test_interrupted_run_is_cleaned_up_by_gc(fake_api: Any, tmp_path: Path) -> None:
    api = fake_api("--fate", "tp4=never-ready")
    spec = _spec(tmp_path, ["tp4"], startup_s=600)
    env = os.environ | {"KUBECONFIG": str(api.kubeconfig), "PYTHONPATH": str(ROOT)}
    sweep = subprocess.Popen(
        [*ORCH, "sweep", str(spec), "--store", str(tmp_path / "r.db")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not api.items("pods"):
        assert time.monotonic() < deadline, "the sweep never created its pods"
        assert sweep.poll() is None
        time.sleep(0.2)
    sweep.kill()  # kill -9: no teardown runs
    sweep.wait()
    left = api.left()
    assert left.get("deployments") and left.get("configmaps"), left
    out = _orch(api, "gc", "--namespace", NS, "--json")
    assert out.returncode == 0, out.stderr
    removed = json.loads(out.stdout)["removed"]
    assert any(name.startswith("configmap/orch-run-") for name in removed), removed
    assert api.left() == {}
    # A second gc finds nothing.
    assert json.loads(_orch(api, "gc", "--namespace", NS, "--json").stdout)["removed"] == []


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_prefill_decode_pair_deploys_three_units_and_leaves_nothing(fake_api: Any, tmp_path: Path,
                                                                      engine: str) -> None:
    """Each pool's Deployment and Service, the router's Deployment and Service (SGLang's router also
    its pod-reading ServiceAccount, Role and RoleBinding): all Ready before the first request, the load
    generator talks to the router only, and teardown removes every object of all three."""
    api = fake_api("--sim-model", "qwen2.5-7b")
    store = tmp_path / "results.db"
    image = "lmsysorg/sglang:v0.5.23" if engine == "sglang" else "vllm/vllm-openai:v0.32.0"
    spec = _spec(tmp_path, ["p:tp2+d:tp2"], image=image, router_image="ghcr.io/acme/orch:0.1.0",
                 rdma_resources={"rdma/ib": 1})
    data = yaml.safe_load(spec.read_text())
    data["engine"]["name"] = engine
    spec.write_text(yaml.safe_dump(data))
    out = _orch(api, "sweep", str(spec), "--store", str(store))
    assert out.returncode in (0, 3), out.stderr[-3000:]
    assert _layouts(store) == {"p:tp2+d:tp2": ("measured", None)}
    assert _completed(store, "p:tp2+d:tp2") == 8
    db = Store(store)
    (run,) = db.runs()
    (row,) = db.layouts(run.run_id)
    assert row.plan is not None and row.plan["split"]["prefill"]["layout"] == "tp2"
    roles = [rep.get("role") for rep in (row.launch or {})["replicas"]]
    assert roles == ["prefill", "decode", "router"]
    assert api.left() == {}
    assert api.engines_alive() == 0
