"""`orch plan` with prefill/decode pairs and `--disagg N`: tables, JSON, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import Orch
from tests.support.paths import LAYOUTS

SPEC = str(LAYOUTS / "qwen72b.yaml")


def test_pairs_beside_aggregated_layouts(orch: Orch) -> None:
    out = orch("plan", SPEC, "--layouts", "tp4x2,p:tp4+d:tp4,p:tp8+d:tp8", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [r["layout"] for r in data["rows"]] == ["tp4x2"]
    pairs = {r["layout"]: r for r in data["disaggregated"]["rows"]}
    ok = pairs["p:tp4+d:tp4"]
    assert ok["fits"] and ok["binds"] in ("prefill", "decode", "transfer")
    assert ok["capacity_rps"] == min(ok["prefill"]["rps"], ok["decode"]["rps"], ok["transfer"]["rps"])
    assert ok["transfer"]["link"] == "nvlink4"  # both pools on the one node
    assert not pairs["p:tp8+d:tp8"]["fits"]
    assert "overlap" in pairs["p:tp8+d:tp8"]["rejected_because"][0]
    table = orch("plan", SPEC, "--layouts", "p:tp4+d:tp4")
    assert table.returncode == 0, table.stderr
    assert "binds" in table.stdout and "P:D replicas" in table.stdout


def test_disagg_n_ranks_both_kinds(orch: Orch) -> None:
    out = orch("plan", SPEC, "--disagg", "16", "--prompt", "8192", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["gpus"] == 16 and data["nodes"] == 2
    kinds = {r["kind"] for r in data["rows"]}
    assert kinds == {"aggregated", "disaggregated"}
    assert all(r["gpus"] == 16 for r in data["rows"])
    table = orch("plan", SPEC, "--disagg", "0")
    assert table.returncode == 0, table.stderr
    assert "plan --disagg 8" in table.stdout


def test_bad_pairs_are_one_line_exit_2(orch: Orch) -> None:
    for args in (("--layouts", "p:tp4+q:tp4"), ("--layouts", "p:tp4"), ("--disagg", "1"), ("--disagg", "-3")):
        out = orch("plan", SPEC, *args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_simulate_takes_pairs_beside_layouts(orch: Orch) -> None:
    out = orch("simulate", SPEC, "--layouts", "tp4x2,p:tp4+d:tp4,p:tp1+d:tp4", "--rates", "3",
                "--num-requests", "40", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    points = {p["layout"]: p for p in data["points"]}
    assert set(points) == {"tp4x2", "p:tp4+d:tp4"}
    pd = points["p:tp4+d:tp4"]
    assert pd["gpus"] == 8 and pd["metrics"]["n_completed"] > 0 and pd["metrics"]["n_failed"] == 0
    (rejected,) = data["rejected_layouts"]
    assert rejected["layout"] == "p:tp1+d:tp4" and "prefill pool tp1" in rejected["reason"]
    table = orch("simulate", SPEC, "--layouts", "p:tp4+d:tp4", "--rates", "3", "--num-requests", "20")
    assert table.returncode == 0, table.stderr
    assert "KV transfers" in table.stdout


LONG = str(LAYOUTS / "qwen72b-long-prompt.yaml")


def test_compile_takes_a_pair_in_every_format(orch: Orch, tmp_path: Path) -> None:
    import yaml

    for engine in ("vllm", "sglang"):
        shell = orch("compile", LONG, "--layout", "p:tp4+d:tp4", "--engine", engine)
        assert shell.returncode == 0, shell.stderr
        assert shell.stdout.count("(prefill), leader") == 1 and "(router), leader" in shell.stdout
        j = orch("compile", LONG, "--layout", "p:tp4+d:tp4", "--engine", engine, "--format", "json")
        assert j.returncode == 0, j.stderr
        plan = json.loads(j.stdout)
        assert [r.get("role") for r in plan["replicas"]] == ["prefill", "decode", "router"]
        assert set(plan["pools"]) == {"prefill", "decode"}
        for fmt in ("k8s", "helm-values"):
            out = orch("compile", LONG, "--layout", "p:tp4+d:tp4", "--engine", engine, "--format", fmt,
                       "--router-image", "ghcr.io/acme/orch:0.1.0")
            assert out.returncode == 0, out.stderr
            docs = [d for d in yaml.safe_load_all(out.stdout) if d]
            if fmt == "k8s":
                assert {d["kind"] for d in docs} >= {"Deployment", "Service"} and len(docs) >= 6
            else:
                assert len(docs[0]["units"]) == 3
    ray = orch("compile", LONG, "--layout", "p:tp4+d:tp4", "--engine", "vllm", "--format", "ray-serve")
    assert ray.returncode == 0 and "build_pd_openai_app" in ray.stdout, ray.stderr
    no_ray = orch("compile", LONG, "--layout", "p:tp4+d:tp4", "--engine", "sglang", "--format", "ray-serve")
    assert no_ray.returncode == 2 and "Ray Serve LLM runs vLLM" in no_ray.stderr


@pytest.mark.parametrize(("command", "layout", "words"), [
    ("compile", "p:tp8+d:tp4", "the pools overlap: prefill 8 + decode 4 = 12 GPUs, the cluster has 8"),
    ("compile", "p:tp16+d:tp4", "the prefill pool tp16 needs 16 GPUs, the cluster has 8"),
    ("sweep", "p:tp8+d:tp4", "the pools overlap"),
    ("simulate", "p:tp4x2+d:tp2", "the pools overlap"),
])
def test_pairs_no_deployment_can_run_are_one_line_exit_2_and_nothing_runs(
        orch: Orch, tmp_path: Path, command: str, layout: str, words: str) -> None:
    store = tmp_path / "r.db"
    args = {"compile": ["--layout", layout, "--engine", "vllm"],
            "simulate": ["--layouts", layout, "--rates", "1"],
            "sweep": ["--layouts", layout, "--store", str(store)]}[command]
    out = orch(command, LONG, *args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert words in out.stderr and f"layout {layout}" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    if store.exists():  # the sweep opens its store first; nothing is measured or stored in it
        from orchestrator.store.db import Store

        assert Store(store).runs() == []


def test_a_transfer_backend_the_engine_lacks_is_refused(orch: Orch, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(Path(LONG).read_text() + "\ndisagg: {transfer_backend: mooncake}\n")
    out = orch("sweep", str(spec), "--layouts", "p:tp4+d:tp4", "--store", str(tmp_path / "r.db"))
    assert out.returncode == 2 and "disagg.transfer_backend" in out.stderr and "NixlConnector" in out.stderr


def test_a_virtual_sweep_of_a_pair_records_the_split_and_promotes(orch: Orch, tmp_path: Path) -> None:
    store = tmp_path / "r.db"
    out = orch("sweep", LONG, "--layouts", "p:tp4+d:tp4", "--rates", "0.5", "--num-requests", "40",
               "--store", str(store))
    assert out.returncode in (0, 3), out.stderr
    assert "prefill/decode pairs" in out.stdout and "KV transfer" in out.stdout
    from orchestrator.store.db import Store

    db = Store(store)
    (run,) = db.runs()
    (row,) = db.layouts(run.run_id)
    assert row.layout == "p:tp4+d:tp4" and row.gpus == 8
    assert row.plan is not None and row.plan["split"]["decode"]["layout"] == "tp4"
    (point,) = db.points(run.run_id, row.layout)
    assert point.metrics["kv_transfer"]["transfers"] > 0
    assert set(point.metrics["engine"]["pools"]) == {"prefill", "decode"}
    if out.returncode == 0:  # a winner to promote
        promoted = orch("promote", "latest", "--store", str(store), "--out", str(tmp_path / "art"),
                        "--format", "shell,k8s", "--engine", "sglang")
        assert promoted.returncode == 0, promoted.stderr
        assert "--disaggregation-mode" in (tmp_path / "art" / "launch.sh").read_text()
        # vLLM's pair runs orch's router: its image must be named, and then the manifests carry it
        vllm = ("promote", "latest", "--store", str(store), "--format", "k8s", "--engine", "vllm")
        refused = orch(*vllm, "--out", str(tmp_path / "v0"))
        assert refused.returncode == 2 and "--router-image" in refused.stderr
        promoted = orch(*vllm, "--out", str(tmp_path / "v1"), "--router-image", "ghcr.io/example/orch:0.1")
        assert promoted.returncode == 0, promoted.stderr
        assert "image: ghcr.io/example/orch:0.1" in (tmp_path / "v1" / "manifests.yaml").read_text()
