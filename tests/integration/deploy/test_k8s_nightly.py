"""The nightly job of k8s/, run as its CronJob runs it: the script from nightly-cronjob.yaml, on the spec
from sweep-spec.yaml, against the fake API server of tests/support/k8s_fake_apiserver.py, which answers 403 to
every verb the Role in rbac.yaml does not grant. So the Role is enough for gc -> sweep -> compare ->
promote, the spec's layouts deploy (Deployments and a LeaderWorkerSet) and nothing is left behind. Two
nights: the second compares with the first and moves the baseline only without a regression.

What differs from the cluster, and why: orch runs here, not in a pod, so it reaches the engines through
the API server's port-forward (access: port-forward) instead of the Service's DNS name; the fake serves
port-forward without an RBAC check (the one verb the in-cluster job does not need). The paths /results
and /spec become temporary directories, and the workload is cut to a few requests.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.store.db import Store
from tests.support.k8s_fake_api import FakeApi
from tests.support.k8s_manifests import one, role_grants
from tests.support.paths import ROOT

pytestmark = pytest.mark.k8s

# The resources the fake API server knows and the verbs it tells apart.
FAKE_RESOURCES = {
    "": ("configmaps", "services", "pods", "events"),
    "apps": ("deployments",),
    "leaderworkerset.x-k8s.io": ("leaderworkersets",),
}
FAKE_VERBS = ("create", "get", "list", "delete")


def _forbid_all_but_the_role() -> list[str]:
    grants = role_grants()
    out = []
    for group, plurals in FAKE_RESOURCES.items():
        for plural in plurals:
            for verb in FAKE_VERBS:
                if verb not in grants.get((group, plural), set()):
                    out += ["--forbid", f"{verb}:{plural}"]
    return out


def _nightly_spec(namespace: str) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(one("ConfigMap")["data"]["spec.yaml"])
    spec["target"] |= {"namespace": namespace, "access": "port-forward"}
    spec["workload"] |= {"rates_per_s": [4], "num_requests": 8, "input_tokens": 64, "output_tokens": 16}
    spec["slo"] = {"ttft_p99_ms": 60000, "itl_p99_ms": 60000}
    return spec


def test_the_nightly_job_runs_with_only_the_roles_verbs(tmp_path: Path) -> None:
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        pytest.skip("the kubernetes client is not installed (pip install -e '.[k8s]')")
    forbidden = _forbid_all_but_the_role()
    assert "--forbid" in forbidden  # the fake enforces something: pods and events are read-only
    api = FakeApi(tmp_path, "--sim-model", "qwen2.5-72b", *forbidden)
    try:
        results, spec_dir, bin_dir = tmp_path / "results", tmp_path / "spec", tmp_path / "bin"
        for d in (results, spec_dir, bin_dir):
            d.mkdir()
        # The namespace of the kubeconfig the fake's tests use; the Role's own namespace on a cluster.
        (spec_dir / "spec.yaml").write_text(yaml.safe_dump(_nightly_spec("llm")))
        orch = bin_dir / "orch"
        main = "from orchestrator.cli import main; main()"
        orch.write_text(f'#!/bin/sh\nexec {sys.executable} -c "{main}" "$@"\n')
        orch.chmod(orch.stat().st_mode | stat.S_IEXEC)
        (bin_dir / "python3").symlink_to(sys.executable)
        container = one("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
        script = container["args"][0].replace("/results", str(results)).replace("/spec/", f"{spec_dir}/")
        env = os.environ | {
            "KUBECONFIG": str(api.kubeconfig),
            "PYTHONPATH": str(ROOT),
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
        }
        env.pop("KUBERNETES_SERVICE_HOST", None)
        def night() -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["/bin/sh", "-c", script], capture_output=True, text=True, env=env, timeout=900, check=False
            )

        out = night()
        assert "forbidden" not in out.stderr.lower(), out.stderr[-3000:]
        # 3: no layout passed, which a busy machine can cause (points marked unreliable); the job then
        # stops before compare and promote, as on the cluster.
        assert out.returncode in (0, 3), out.stderr[-3000:]
        db = Store(results / "orch-results.db")
        (run,) = db.runs()
        layouts = {row.layout: row.status for row in db.layouts(run.run_id)}
        assert layouts == {"tp8": "measured", "tp4x2": "measured", "tp8pp2": "measured"}, layouts
        assert api.left() == {} and api.engines_alive() == 0
        if out.returncode != 0:
            pytest.skip("no layout passed on this busy machine; the promote and compare steps did not run")
        assert (results / "baseline-run").read_text().strip() == run.run_id
        promoted = results / "promoted" / run.run_id
        prov = json.loads((promoted / "PROVENANCE.json").read_text())
        assert prov["measured"]["target"] == "kubernetes"
        objs = list(yaml.safe_load_all((promoted / "manifests.yaml").read_text()))
        assert objs[0]["metadata"]["namespace"] == "llm"

        # The second night compares with the first. Exit 1 is a regression verdict, which simulated
        # timings on a busy machine can give; either way the comparison ran against the baseline.
        second = night()
        assert second.returncode in (0, 1, 3), second.stderr[-3000:]
        runs = [r.run_id for r in Store(results / "orch-results.db").runs()]
        assert len(runs) == 2 and runs[1] == run.run_id
        if second.returncode != 3:
            assert f"orch compare {run.run_id} -> {runs[0]}" in second.stdout, second.stdout[-2000:]
        advanced = (results / "baseline-run").read_text().strip() == runs[0]
        assert advanced is (second.returncode == 0)  # a regression keeps the old baseline
        assert api.left() == {}
    finally:
        api.stop()
