"""`orch promote` on a real SQLite store filled through the Store API: artifacts, provenance, refusals."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.compile import prepare
from orchestrator.compile.helm_values import helm_values
from orchestrator.compile.k8s import K8sOptions, build_objects
from orchestrator.errors import NoLayoutMeetsSLO, SpecError
from orchestrator.layout import parse_layout
from orchestrator.pipeline.sweep import outcomes_from_store
from orchestrator.promote import PromoteOptions, k8s_name, promote, resolve_run
from orchestrator.selection import select
from orchestrator.spec.models import SweepSpec
from orchestrator.store.db import Store
from tests.support.cli import Orch
from tests.support.paths import ROOT

SPEC: dict[str, Any] = {
    "model": {"name": "qwen2.5-7b", "max_model_len": 4096},
    "hardware": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8},
    "engine": {"name": "sim"},
    "workload": {"input_tokens": 256, "output_tokens": 16, "rates_per_s": [2, 4], "num_requests": 16},
    "slo": {"ttft_p99_ms": 500, "itl_p99_ms": 50},
    "layouts": ["tp4x2", "tp2", "tp8"],
    "metadata": {"eval_run_id": "ev-7", "checkpoint": "rev-abc"},
}


def _metrics(ttft_p99: float, goodput: float, gpus: int) -> dict[str, Any]:
    return {
        "n_requests": 16, "n_completed": 16, "n_failed": 0, "error_rate": 0.0,
        "ttft_ms": {"p50": ttft_p99 / 2, "p90": ttft_p99 * 0.9, "p99": ttft_p99, "mean": ttft_p99 / 2},
        "itl_chunk_ms": {"p50": 10.0, "p90": 12.0, "p99": 15.0, "mean": 10.5},
        "goodput": goodput, "request_throughput": goodput, "output_throughput": goodput * 16,
        "per_gpu": {"request_throughput": goodput / gpus, "output_throughput": goodput * 16 / gpus},
    }  # fmt: skip


def _run(
    store: Store, run_id: str, *, passing: bool = True, spec: dict[str, Any] | None = None,
    gpus_seen: tuple[str, ...] = (), launch_argv: tuple[str, ...] | None = None,
) -> None:
    s = SweepSpec.model_validate(spec or SPEC)
    store.create_run(
        run_id=run_id, spec_path="layouts/x.yaml", spec_json=s.model_dump(mode="json"), spec_hash="h" * 16,
        engine=s.engine.name, engine_version="orch-sim 0", model="qwen2.5-7b", model_config_hash="c" * 16,
        orch_version="0.1.0", hardware={"hostname": "box", "gpus": list(gpus_seen)},
        metadata=dict(s.metadata),
    )  # fmt: skip
    replicas = [] if launch_argv is None else [{"processes": [{"argv": list(launch_argv)}]}]
    store.set_layout(
        run_id, "tp4x2", 8, "pending", launch={"engine": "sim", "layout": "tp4x2", "replicas": replicas}
    )
    for rate in (2.0, 4.0):
        ok = passing and rate == 2.0
        store.add_point(
            run_id, "tp4x2", f"rate={rate:g}/s", rate, ok, "pass" if ok else "fail: ttft_p99 900 > 500",
            _metrics(100.0 if ok else 900.0, rate, 8), [],
        )  # fmt: skip
    store.set_layout(run_id, "tp4x2", 8, "measured")
    store.add_point(
        run_id, "tp2", "rate=2/s", 2.0, False, "fail: ttft_p99 800 > 500", _metrics(800, 1.0, 2), []
    )
    store.set_layout(run_id, "tp2", 2, "measured")
    store.set_layout(run_id, "tp8", 8, "rejected", reason="TP 8 does not divide the 28 attention heads")
    selection = select(outcomes_from_store(store, run_id), s.objective)
    store.finish_run(run_id, "done", selection.to_dict())


@pytest.fixture
def store(tmp_path: Path) -> Store:
    st = Store(tmp_path / "r.db")
    _run(st, "20260101-000000-aaaaaa")
    return st


def test_winner_becomes_helm_values_manifests_commands_and_provenance(store: Store, tmp_path: Path) -> None:
    done = promote(store, "20260101-000000-aaaaaa", tmp_path / "out")
    names = sorted(p.name for p in done.files)
    assert names == sorted(
        ["values.yaml", "manifests.yaml", "launch.sh", "ray-serve.yaml", "PROVENANCE.json", "PROVENANCE.md"]
    )
    assert done.layout == "tp4x2" and done.engine == "vllm"  # a sim run promotes for vLLM by default
    spec = SweepSpec.model_validate(SPEC)
    # The name the sim run was measured with; the GPU product label of the spec's preset; a pinned image.
    plan = prepare(spec, parse_layout("tp4x2"), engine="vllm", served_model_name="qwen2.5-7b").plan
    opts = K8sOptions(
        name="qwen2-5-7b-tp4x2", image="vllm/vllm-openai:v0.32.0", spec_hash="h" * 16,
        gpu_product="NVIDIA-H100-80GB-HBM3",
    )  # fmt: skip
    out = tmp_path / "out"
    assert yaml.safe_load((out / "values.yaml").read_text()) == helm_values(plan, parse_layout("tp4x2"), opts)
    objs = list(yaml.safe_load_all((out / "manifests.yaml").read_text()))
    assert objs == build_objects(plan, parse_layout("tp4x2"), opts)
    assert [o["kind"] for o in objs] == ["Deployment", "Service"]
    pod = objs[0]["spec"]["template"]["spec"]
    argv = pod["containers"][0]["command"]
    assert argv[argv.index("--host") + 1] == "0.0.0.0"  # reachable through the Service, not only loopback
    assert argv[argv.index("--served-model-name") + 1] == "qwen2.5-7b"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert not pod["containers"][0]["image"].endswith(":latest")
    script = (out / "launch.sh").read_text()
    assert script.startswith("#!/usr/bin/env bash\n") and script.count("vllm serve") == 2
    # Each command binds where its comment says it is ready (or every address), never loopback under a
    # comment naming another host.
    pairs = re.findall(r"ready at http://([^:/]+):\d+.*\n.*--host (\S+)", script)
    assert len(pairs) == 2 and all(bind in (ready, "0.0.0.0") for ready, bind in pairs), script
    serve = yaml.safe_load((out / "ray-serve.yaml").read_text())
    llm = serve["applications"][0]["args"]["llm_configs"][0]
    assert llm["engine_kwargs"]["tensor_parallel_size"] == 4
    assert llm["deployment_config"] == {"num_replicas": 2} and llm["accelerator_type"] == "H100"

    prov = json.loads((out / "PROVENANCE.json").read_text())
    assert prov["run"]["run_id"] == "20260101-000000-aaaaaa" and prov["run"]["spec_hash"] == "h" * 16
    assert prov["model"]["config_hash"] == "c" * 16
    assert prov["measured"]["engine"] == "sim" and prov["artifacts"]["engine"] == "vllm"
    assert any("simulated engine" in n for n in prov["notes"])
    assert prov["layout"] == {"layout": "tp4x2", "gpus": 8, "chosen": "the winner"}
    assert prov["winning_point"]["label"] == "rate=2/s"
    assert prov["winning_point"]["metrics"] == _metrics(100.0, 2.0, 8)
    assert prov["slo"]["ttft_p99_ms"] == 500 and prov["eval_metadata"] == SPEC["metadata"]
    assert prov["measured"]["launch"]["layout"] == "tp4x2"
    chart = yaml.safe_load((ROOT / "helm" / "Chart.yaml").read_text())
    assert prov["artifacts"]["chart"] == {"name": chart["name"], "version": chart["version"]}
    assert prov["artifacts"]["served_model_name"] == "qwen2.5-7b"
    assert prov["artifacts"]["gpu_product"] == "NVIDIA-H100-80GB-HBM3"
    assert prov["artifacts"]["image"] == "vllm/vllm-openai:v0.32.0"
    assert any("is a default" in n and "--image" in n for n in prov["notes"])
    for name, digest in prov["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    md = (out / "PROVENANCE.md").read_text()
    assert "tp4x2" in md and "rev-abc" in md and "TP 8 does not divide" in md
    assert f"| Helm chart | orch-engine {chart['version']} |" in md and "NVIDIA-H100-80GB-HBM3" in md


def test_a_run_without_winner_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    st = Store(tmp_path / "r.db")
    _run(st, "20260101-000000-bbbbbb", passing=False)
    with pytest.raises(NoLayoutMeetsSLO, match="has no winner") as err:
        promote(st, "20260101-000000-bbbbbb", tmp_path / "out")
    assert err.value.exit_code == 3
    assert not (tmp_path / "out").exists()


def test_latest_is_the_newest_run(store: Store) -> None:
    _run(store, "20260102-000000-cccccc")
    assert resolve_run(store, "latest") == "20260102-000000-cccccc"


def test_layout_choice_must_be_known_and_passing(store: Store, tmp_path: Path) -> None:
    with pytest.raises(NoLayoutMeetsSLO, match="did not meet the SLO"):
        promote(store, "latest", tmp_path / "a", PromoteOptions(layout="tp2"))
    with pytest.raises(SpecError, match="not in run"):
        promote(store, "latest", tmp_path / "b", PromoteOptions(layout="tp1x8"))


def test_sglang_artifacts_skip_ray_serve_and_say_so(store: Store, tmp_path: Path) -> None:
    done = promote(
        store, "latest", tmp_path / "out", PromoteOptions(engine="sglang", formats=("shell", "ray-serve"))
    )
    assert sorted(p.name for p in done.files) == ["PROVENANCE.json", "PROVENANCE.md", "launch.sh"]
    assert any("Ray Serve LLM runs vLLM" in n for n in done.notes)
    assert "sglang" in (tmp_path / "out" / "launch.sh").read_text()


def test_bad_options_are_one_line_spec_errors() -> None:
    with pytest.raises(SpecError, match="--format yaml"):
        PromoteOptions(formats=("yaml",))
    with pytest.raises(SpecError, match="--engine sim"):
        PromoteOptions(engine="sim")


def test_object_names_are_dns_labels() -> None:
    assert k8s_name("qwen2.5-72b", "tp4x2") == "qwen2-5-72b-tp4x2"
    assert k8s_name("7b/Model", "tp8") == "m-7b-model-tp8"
    assert len(k8s_name("x" * 60, "tp8pp2")) <= 40


def test_cli_promote_latest_pin_and_exit_3(store: Store, tmp_path: Path, orch: Orch) -> None:
    db = str(store.path)
    out = orch(
        "promote", "latest", "--store", db, "--out", str(tmp_path / "o"), "--format", "helm-values,k8s"
    )
    assert out.returncode == 0, out.stderr
    assert "promoted tp4x2 from run 20260101-000000-aaaaaa for vllm" in out.stdout
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "PROVENANCE.json", "PROVENANCE.md", "manifests.yaml", "values.yaml",
    ]  # fmt: skip
    pin = yaml.safe_load(orch("promote", "latest", "--store", db, "--pin").stdout)
    assert pin["serving_layout"]["layout"] == "tp4x2" and pin["serving_layout"]["tensor_parallel_size"] == 4
    _run(store, "20260103-000000-dddddd", passing=False)
    refused = orch("promote", "latest", "--store", db, "--out", str(tmp_path / "n"))
    assert refused.returncode == 3 and "has no winner" in refused.stderr
    assert "Traceback" not in refused.stderr


def _manifest_pod(out: Path) -> dict[str, Any]:
    objs = list(yaml.safe_load_all((out / "manifests.yaml").read_text()))
    pod: dict[str, Any] = objs[0]["spec"]["template"]["spec"]
    return pod


def test_the_gpus_and_model_name_the_run_measured_are_what_the_artifacts_ask_for(tmp_path: Path) -> None:
    st = Store(tmp_path / "r.db")
    seen = ("NVIDIA H200, 143771 MiB, 570.86", "NVIDIA H200, 143771 MiB, 570.86")
    argv = ("python", "-m", "orchestrator.sim.server", "--served-model-name", "chat-7b", "--port", "9")
    _run(st, "20260101-000000-eeeeee", gpus_seen=seen, launch_argv=argv)
    done = promote(st, "latest", tmp_path / "out", PromoteOptions(formats=("k8s", "helm-values")))
    pod = _manifest_pod(tmp_path / "out")
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}  # seen, not the spec's h100
    argv_out = pod["containers"][0]["command"]
    assert argv_out[argv_out.index("--served-model-name") + 1] == "chat-7b"
    values = yaml.safe_load((tmp_path / "out" / "values.yaml").read_text())
    assert values["gpuProduct"] == "NVIDIA-H200" and "chat-7b" in values["leader"]["command"]
    assert done.provenance["artifacts"]["gpu_product"] == "NVIDIA-H200"


@pytest.mark.parametrize("image", ["vllm/vllm-openai:latest", "vllm/vllm-openai", "registry:5000/vllm"])
def test_an_image_without_a_pinned_tag_is_refused_with_the_fix(store: Store, tmp_path: Path, image: str) -> (
    None
):
    with pytest.raises(SpecError, match="no pinned tag") as err:
        promote(store, "latest", tmp_path / "out", PromoteOptions(image=image))
    assert "\n" not in str(err.value) and "v0.32.0" in str(err.value)
    assert not (tmp_path / "out").exists()


def test_pinned_tags_and_digests_are_kept(store: Store, tmp_path: Path) -> None:
    for i, image in enumerate(("registry:5000/vllm:v0.32.0", "vllm/vllm-openai@sha256:" + "a" * 64)):
        promote(store, "latest", tmp_path / str(i), PromoteOptions(image=image, formats=("k8s",)))
        assert _manifest_pod(tmp_path / str(i))["containers"][0]["image"] == image


def test_a_kubernetes_target_gives_namespace_selector_and_its_image_must_be_pinned(tmp_path: Path) -> None:
    target = {
        "kind": "kubernetes", "namespace": "llm", "image": "vllm/vllm-openai:v0.32.0",
        "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG"},
    }  # fmt: skip
    st = Store(tmp_path / "r.db")
    _run(st, "20260101-000000-ffffff", spec=SPEC | {"target": target})
    done = promote(st, "latest", tmp_path / "out", PromoteOptions(formats=("k8s",)))
    pod = _manifest_pod(tmp_path / "out")
    assert pod["nodeSelector"] == target["node_selector"]  # the target's own product label, not ours
    assert done.provenance["artifacts"]["namespace"] == "llm"
    assert not any("is a default" in n for n in done.notes)
    st2 = Store(tmp_path / "r2.db")
    _run(st2, "20260101-000000-ababab", spec=SPEC | {"target": target | {"image": "vllm/vllm-openai:latest"}})
    with pytest.raises(SpecError, match=r"target\.image: image 'vllm/vllm-openai:latest' has no pinned tag"):
        promote(st2, "latest", tmp_path / "out2")


def test_sglang_artifacts_listen_on_all_interfaces_keep_the_run_name(store: Store, tmp_path: Path) -> None:
    promote(store, "latest", tmp_path / "out", PromoteOptions(engine="sglang", formats=("k8s",)))
    pod = _manifest_pod(tmp_path / "out")
    argv = pod["containers"][0]["command"]
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    assert argv[argv.index("--served-model-name") + 1] == "qwen2.5-7b"
    assert pod["containers"][0]["image"] == "lmsysorg/sglang:v0.5.23"
