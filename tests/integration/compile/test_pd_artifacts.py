"""A prefill/decode pair's deployable forms under the real tools: its Kubernetes objects pass
kubernetes-validate --strict (pool LeaderWorkerSets our LWS schema), and the Helm chart renders its
values (one unit per pool and the router) into exactly the objects compile/k8s_pd.py builds.
Tools from .ci/setup.d/40-helm-k8s.sh (ORCH_HELM, kubernetes-validate, jsonschema)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.compile import prepare
from orchestrator.compile.helm_values import pair_helm_values
from orchestrator.compile.k8s_pd import build_pair_objects
from orchestrator.disagg import parse_disagg
from orchestrator.engines import LaunchPlan
from orchestrator.plan.candidates import disagg_candidate
from orchestrator.plan.from_spec import engine_settings
from orchestrator.spec.models import SweepSpec
from tests.support.k8s_crd_schemas import LEADER_WORKER_SET
from tests.support.k8s_plans import missing_tool, options
from tests.support.paths import ROOT

CHART = ROOT / "helm"
# (engine, pair, nodes of 8 GPUs): one node; pools spanning nodes (LeaderWorkerSets); DP-attention EP.
CASES = [("vllm", "p:tp2x2+d:tp4", 1), ("sglang", "p:tp4+d:tp4", 1), ("vllm", "p:tp8pp2+d:tp8pp2", 4),
         ("sglang", "p:tp8pp2+d:tp8", 3)]


def _plan(engine: str, text: str, nodes: int) -> LaunchPlan:
    spec = SweepSpec.model_validate({
        "model": {"name": "qwen2.5-72b", "max_model_len": 8192},
        "hardware": {"gpu": "h100-sxm", "nodes": nodes},
        "engine": {"name": engine}, "workload": {"rates_per_s": [1], "num_requests": 4}, "layouts": [text]})
    cand = disagg_candidate(spec, parse_disagg(text), engine_settings(spec))
    return prepare(spec, cand, node_addrs=tuple(f"10.0.0.{i + 1}" for i in range(nodes))).plan


def _opts() -> Any:
    return options(name="qwen72b-pd", router_image="ghcr.io/acme/orch:0.1.0",
                   rdma_resources=(("rdma/ib", 1),))


@pytest.mark.k8s
@pytest.mark.parametrize(("engine", "text", "nodes"), CASES)
def test_pair_objects_pass_strict_schemas(engine: str, text: str, nodes: int, tmp_path: Path) -> None:
    cli = Path(sys.executable).parent / "kubernetes-validate"
    found = str(cli) if cli.exists() else shutil.which("kubernetes-validate")
    if found is None:
        missing_tool("kubernetes-validate")
    try:
        import jsonschema
    except ImportError:
        missing_tool("jsonschema")
    objs = build_pair_objects(_plan(engine, text, nodes), _opts())
    core = [o for o in objs if o["kind"] != "LeaderWorkerSet"]
    for lws in (o for o in objs if o["kind"] == "LeaderWorkerSet"):
        jsonschema.validate(lws, LEADER_WORKER_SET)
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all(core))
    assert found is not None
    out = subprocess.run([found, "--strict", "-k", "1.32.0", str(path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("passed") == len(core)


@pytest.mark.helm
@pytest.mark.parametrize(("engine", "text", "nodes"), CASES)
def test_the_chart_renders_the_pair_as_compile_builds_it(engine: str, text: str, nodes: int,
                                                         tmp_path: Path) -> None:
    helm = os.environ.get("ORCH_HELM")
    if not helm or not Path(helm).is_file():
        missing_tool("ORCH_HELM (a helm binary)")
    assert helm is not None
    plan, opts = _plan(engine, text, nodes), _opts()
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(pair_helm_values(plan, opts), sort_keys=False))
    lint = subprocess.run([helm, "lint", "--strict", str(CHART), "-f", str(values)], capture_output=True,
                          text=True, timeout=120)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    out = subprocess.run([helm, "template", "rel", str(CHART), "--namespace", opts.namespace,
                          "-f", str(values),
                          "--kube-version", "1.32.0", "--api-versions", "leaderworkerset.x-k8s.io/v1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rendered = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(out.stdout) if o}
    expected = {(o["kind"], o["metadata"]["name"]): o for o in build_pair_objects(plan, opts)}
    assert rendered.keys() == expected.keys()
    for key, obj in expected.items():
        assert rendered[key] == obj, f"{key} differs between the chart and compile/k8s_pd.py"
