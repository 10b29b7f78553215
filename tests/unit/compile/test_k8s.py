"""Structure of the Kubernetes objects built from LaunchPlans (tp8, tp4x2, tp8pp2 over two nodes)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from orchestrator.compile.k8s import (
    ANNOTATION_SPEC_HASH,
    LABEL_LAYOUT,
    LABEL_ROLE,
    LWS_API,
    build_objects,
    deployment,
    leader_worker_set,
    options_from_target,
)
from orchestrator.compile.k8s_ray import engine_kwargs, ray_service, serve_config
from orchestrator.engines.base import EngineOptions, LaunchPlan, Placement, ProcessSpec, ReplicaPlan
from orchestrator.engines.sglang import ENGINE as SGLANG
from orchestrator.errors import SpecError
from orchestrator.layout import parse_layout
from orchestrator.spec.targets import KubernetesTarget
from tests.support.k8s_plans import (
    MODEL,
    candidate,
    options,
    real_vllm_plan,
    sglang_multi_node_plan,
    vllm_dp_plan,
    vllm_plan,
)


def _flag(argv: list[str], name: str) -> str:
    for i, tok in enumerate(argv):
        if tok == name:
            return argv[i + 1]
        if tok.startswith(name + "="):
            return tok.split("=", 1)[1]
    raise AssertionError(f"{name} not in {argv}")


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _objects(text: str) -> list[dict[str, Any]]:
    return build_objects(vllm_plan(text), parse_layout(text), options())


def _common_pod_checks(pod: dict[str, Any], gpus: int) -> dict[str, Any]:
    spec = pod["spec"]
    assert spec["enableServiceLinks"] is False
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["dshm"]["emptyDir"]["medium"] == "Memory"
    assert vols["model-cache"]["persistentVolumeClaim"]["claimName"] == "model-cache"
    (c,) = spec["containers"]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": gpus}
    # Host CPU and memory are requested per GPU, so a pod is not the first one evicted under pressure.
    assert c["resources"]["requests"] == {"cpu": str(4 * gpus), "memory": f"{24 * gpus}Gi"}
    assert {m["mountPath"] for m in c["volumeMounts"]} == {"/dev/shm", "/models"}
    env = _env(c)
    assert "CUDA_VISIBLE_DEVICES" not in env
    # Optional: a public model needs no token, and a missing Secret must not block the pod.
    assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf-token", "key": "token", "optional": True}}
    assert env["HF_HOME"] == "/models"
    assert c["command"][:3] == ["vllm", "serve", MODEL]
    return c


def _check_probes(c: dict[str, Any]) -> None:
    assert c["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    for probe in ("startupProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}
        # vLLM's /health answers at once; above Kubernetes' default of 1 s so a busy engine is not dropped.
        assert c[probe]["timeoutSeconds"] == 5
    start = c["startupProbe"]
    assert start["failureThreshold"] * start["periodSeconds"] >= 30 * 60


def test_tp8_deployment() -> None:
    dep, svc = _objects("tp8")
    assert dep["kind"] == "Deployment" and dep["apiVersion"] == "apps/v1"
    assert dep["spec"]["replicas"] == 1
    # A new pod before an old one is gone would never schedule on a full GPU pool.
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert dep["metadata"]["labels"][LABEL_LAYOUT] == "tp8"
    assert dep["metadata"]["annotations"] == {ANNOTATION_SPEC_HASH: "0f" * 32}
    c = _common_pod_checks(dep["spec"]["template"], 8)
    _check_probes(c)
    assert _flag(c["command"], "--host") == "0.0.0.0"
    assert _flag(c["command"], "--port") == "8000"
    assert _flag(c["command"], "--tensor-parallel-size") == "8"
    # The selector must match the pod template, and the Service must select the same pods.
    tmpl_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= tmpl_labels.items()
    assert svc["kind"] == "Service"
    assert svc["spec"]["selector"].items() <= tmpl_labels.items()
    assert svc["spec"]["ports"][0]["targetPort"] == "http"


def test_tp4x2_same_port_in_every_pod() -> None:
    plan = vllm_plan("tp4x2")
    # On a host the two replicas use ports 8000 and 8010; in pods both use the container port.
    assert {_flag(list(r.processes[0].argv), "--port") for r in plan.replicas} == {"8000", "8010"}
    dep, _ = build_objects(plan, parse_layout("tp4x2"), options())
    assert dep["kind"] == "Deployment"
    assert dep["spec"]["replicas"] == 2
    c = _common_pod_checks(dep["spec"]["template"], 4)
    _check_probes(c)
    assert _flag(c["command"], "--port") == "8000"


def test_tp8pp2_leader_worker_set() -> None:
    lws, svc = _objects("tp8pp2")
    assert lws["apiVersion"] == LWS_API and lws["kind"] == "LeaderWorkerSet"
    spec = lws["spec"]
    assert spec["replicas"] == 1
    tmpl = spec["leaderWorkerTemplate"]
    assert tmpl["size"] == 2
    leader = _common_pod_checks(tmpl["leaderTemplate"], 8)
    worker = _common_pod_checks(tmpl["workerTemplate"], 8)
    _check_probes(leader)
    assert "startupProbe" not in worker and "ports" not in worker
    assert _flag(leader["command"], "--master-addr") == "$(LWS_LEADER_ADDRESS)"
    assert _flag(worker["command"], "--master-addr") == "$(LWS_LEADER_ADDRESS)"
    assert _flag(leader["command"], "--master-port") == "8001"
    assert _flag(worker["command"], "--node-rank") == "$(LWS_WORKER_INDEX)"
    assert _flag(leader["command"], "--node-rank") == "0"
    assert "--headless" in worker["command"] and "--headless" not in leader["command"]
    assert _env(worker)["VLLM_HOST_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert tmpl["leaderTemplate"]["metadata"]["labels"][LABEL_ROLE] == "leader"
    assert tmpl["workerTemplate"]["metadata"]["labels"][LABEL_ROLE] == "worker"
    # Only leaders serve HTTP, so the Service selects leaders.
    assert svc["spec"]["selector"][LABEL_ROLE] == "leader"


def test_tp8pp2x2_two_groups() -> None:
    lws, _ = build_objects(vllm_plan("tp8pp2x2"), parse_layout("tp8pp2x2"), options())
    assert lws["spec"]["replicas"] == 2
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2


def test_sglang_dist_init_addr_three_nodes() -> None:
    plan = sglang_multi_node_plan(3)
    lws, _ = build_objects(plan, parse_layout("tp24"), options())
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    assert tmpl["size"] == 3
    worker = tmpl["workerTemplate"]["spec"]["containers"][0]
    assert _flag(worker["command"], "--dist-init-addr") == "$(LWS_LEADER_ADDRESS):8001"
    assert _flag(worker["command"], "--node-rank") == "$(LWS_WORKER_INDEX)"
    assert _flag(worker["command"], "--port") == "8000"
    assert "startupProbe" not in worker


def test_sglang_probes_outwait_its_health_endpoint() -> None:
    # SGLang's health endpoints take at least 1 s (a real decode step): the probes must wait longer.
    where = Placement(nodes=("10.0.0.1",))
    plan = SGLANG.launch_plan(candidate("tp8", "sglang"), EngineOptions(model=MODEL), where)
    dep, _ = build_objects(plan, parse_layout("tp8"), options())
    c = dep["spec"]["template"]["spec"]["containers"][0]
    for probe in ("startupProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["path"] == "/health_generate"
        assert c[probe]["timeoutSeconds"] >= 5


def test_dp_start_rank_per_worker_via_shell() -> None:
    lws, _ = build_objects(vllm_dp_plan(3), parse_layout("dp24"), options())
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    worker = tmpl["workerTemplate"]["spec"]["containers"][0]["command"]
    assert worker[:2] == ["/bin/sh", "-c"]
    # Kubernetes turns "$$" into "$", so the shell computes 8 * index; the address is expanded by Kubernetes.
    assert '--data-parallel-start-rank "$$((LWS_WORKER_INDEX * 8 + 0))"' in worker[2]
    assert "--data-parallel-address '$(LWS_LEADER_ADDRESS)'" in worker[2]
    assert worker[2].startswith("exec vllm serve ")
    # Two nodes need no shell: the one worker's start rank is a constant.
    lws2, _ = build_objects(vllm_dp_plan(2), parse_layout("dp16"), options())
    cmd2 = lws2["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["command"]
    assert cmd2[0] == "vllm" and _flag(cmd2, "--data-parallel-start-rank") == "8"


def test_workers_that_differ_otherwise_are_refused() -> None:
    plan = vllm_dp_plan(3)
    rep = plan.replicas[0]
    p = rep.processes[2]
    odd = ProcessSpec((*p.argv, "--seed", "x"), p.env, p.node_index, p.gpu_ids, p.ports)
    bad = ReplicaPlan((*rep.processes[:2], odd), rep.health_url, rep.openai_base_url)
    with pytest.raises(SpecError, match="worker nodes of a replica differ"):
        leader_worker_set(LaunchPlan("vllm", candidate("dp24"), (bad,)), parse_layout("dp24"), options())


def test_dollar_in_user_argv_stays_literal() -> None:
    plan = vllm_plan("tp8")
    rep = plan.replicas[0]
    proc = rep.processes[0]
    odd = ProcessSpec((*proc.argv, "--chat-template", "x$(y)"), proc.env, 0, proc.gpu_ids, proc.ports)
    plan2 = LaunchPlan(
        plan.engine, plan.candidate, (ReplicaPlan((odd,), rep.health_url, rep.openai_base_url),)
    )
    dep = deployment(plan2, parse_layout("tp8"), options())
    assert dep["spec"]["template"]["spec"]["containers"][0]["command"][-1] == "x$$(y)"


def test_optional_parts_off() -> None:
    opts = options(
        model_cache_pvc=None, hf_token_secret=None, gpu_product=None, tolerations=(), spec_hash=None
    )
    dep, _ = build_objects(vllm_plan("tp8"), parse_layout("tp8"), opts)
    spec = dep["spec"]["template"]["spec"]
    assert "nodeSelector" not in spec and "tolerations" not in spec
    assert [v["name"] for v in spec["volumes"]] == ["dshm"]
    assert "HF_TOKEN" not in _env(spec["containers"][0])
    assert "annotations" not in dep["metadata"]


def test_options_from_target() -> None:
    target = KubernetesTarget(
        kind="kubernetes", image="img:1", namespace="llm", node_selector={"pool": "gpu"}, ready_timeout_s=3600
    )
    opts = options_from_target(target, "qwen", gpu_product="NVIDIA-H200")
    dep = deployment(vllm_plan("tp8"), parse_layout("tp8"), opts)
    pod = dep["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200", "pool": "gpu"}
    start = pod["containers"][0]["startupProbe"]
    assert start["failureThreshold"] * start["periodSeconds"] == 3600


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"name": "Bad_Name"}, "kubernetes name"),
        ({"image": ""}, "kubernetes image"),
        ({"namespace": "a.b"}, "kubernetes namespace"),
        ({"container_port": 0}, "container_port"),
        ({"gpu_product": "NVIDIA H100"}, "gpu_product"),
        ({"startup_budget_s": 0}, "startup_budget_s"),
    ],
)
def test_bad_options(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(SpecError, match=match):
        options(**kw)


def test_wrong_kind_and_layout_mismatch() -> None:
    with pytest.raises(SpecError, match="LeaderWorkerSet"):
        deployment(vllm_plan("tp8pp2"), parse_layout("tp8pp2"), options())
    with pytest.raises(SpecError, match="Deployment"):
        leader_worker_set(vllm_plan("tp8"), parse_layout("tp8"), options())
    with pytest.raises(SpecError, match="not layout tp4x2"):
        deployment(vllm_plan("tp8"), parse_layout("tp4x2"), options())


def test_replicas_that_differ_are_refused() -> None:
    plan = vllm_plan("tp4x2")
    r0, r1 = plan.replicas
    p = r1.processes[0]
    changed = ProcessSpec((*p.argv, "--seed", "7"), p.env, p.node_index, p.gpu_ids, p.ports)
    bad = LaunchPlan(
        plan.engine, plan.candidate, (r0, ReplicaPlan((changed,), r1.health_url, r1.openai_base_url))
    )
    with pytest.raises(SpecError, match="replica 1 runs a different command"):
        deployment(bad, parse_layout("tp4x2"), options())


@pytest.mark.parametrize("text", ["tp8", "tp4x2", "tp8pp2"])
def test_real_vllm_engine_plans(text: str) -> None:
    plan = real_vllm_plan(text)
    if plan is None:
        pytest.skip("orchestrator.engines.ENGINES has no 'vllm' yet (engine module written in parallel)")
    layout = parse_layout(text)
    workload, svc = build_objects(plan, layout, options())
    assert workload["kind"] == ("LeaderWorkerSet" if text == "tp8pp2" else "Deployment")
    if workload["kind"] == "Deployment":
        pods = [workload["spec"]["template"]]
    else:
        tmpl = workload["spec"]["leaderWorkerTemplate"]
        pods = [tmpl["leaderTemplate"], tmpl["workerTemplate"]]
    for pod in pods:
        c = pod["spec"]["containers"][0]
        assert "CUDA_VISIBLE_DEVICES" not in _env(c)
        assert "10.0.0.1" not in " ".join(c["command"])
        assert "10.0.0.2" not in " ".join(c["command"])
    leader = pods[0]["spec"]["containers"][0]
    assert _flag(leader["command"], "--port") == "8000"
    assert svc["spec"]["ports"][0]["targetPort"] == "http"


def test_ray_service_tp8pp2() -> None:
    rs = ray_service(vllm_plan("tp8pp2"), parse_layout("tp8pp2"), options())
    assert rs["apiVersion"] == "ray.io/v1" and rs["kind"] == "RayService"
    cluster = rs["spec"]["rayClusterConfig"]
    (group,) = cluster["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 2
    worker = group["template"]["spec"]
    assert worker["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 8}
    assert worker["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    head = cluster["headGroupSpec"]["template"]["spec"]
    assert "nodeSelector" not in head
    assert "command" not in head["containers"][0]
    serve = yaml.safe_load(rs["spec"]["serveConfigV2"])
    (llm,) = serve["applications"][0]["args"]["llm_configs"]
    assert llm["model_loading_config"] == {"model_id": "qwen2.5-72b", "model_source": MODEL}
    assert llm["engine_kwargs"] == {
        "tensor_parallel_size": 8,
        "pipeline_parallel_size": 2,
        "gpu_memory_utilization": 0.9,
        "max_model_len": 8192,
    }
    assert llm["runtime_env"] == {"env_vars": {"VLLM_LOGGING_LEVEL": "INFO"}}
    assert llm["deployment_config"]["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 1}


def test_ray_service_tp4x2_packs_one_node() -> None:
    rs = ray_service(vllm_plan("tp4x2"), parse_layout("tp4x2"), options())
    (group,) = rs["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    assert group["replicas"] == 2
    assert group["template"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 4}


def test_ray_engine_kwargs_json_values_are_mappings() -> None:
    # vLLM's EngineArgs takes eplb_config as a mapping; the JSON text of the CLI flag is refused there.
    argv = ("vllm", "serve", "m", "--enable-eplb", "--eplb-config", '{"num_redundant_experts": 32}')
    _, kwargs = engine_kwargs(argv, parse_layout("dp8ep"))
    assert kwargs["eplb_config"] == {"num_redundant_experts": 32}
    assert kwargs["enable_eplb"] is True
    with pytest.raises(SpecError, match="not valid JSON"):
        engine_kwargs(("vllm", "serve", "m", "--eplb-config", "{oops"), parse_layout("dp8ep"))


def test_ray_service_dp_layout_uses_the_dp_builder() -> None:
    rs = ray_service(vllm_plan("tp8"), parse_layout("tp8"), options())
    (app,) = yaml.safe_load(rs["spec"]["serveConfigV2"])["applications"]
    assert app["import_path"] == "ray.serve.llm:build_openai_app"
    dp = parse_layout("dp8ep")
    plan = real_vllm_plan("dp8ep")
    assert plan is not None
    (app,) = serve_config(plan, dp)["applications"]
    assert app["import_path"] == "ray.serve.llm:build_dp_openai_app"
    assert app["args"]["llm_config"]["engine_kwargs"]["data_parallel_size"] == 8


def test_ray_engine_kwargs_flags() -> None:
    argv = ("vllm", "serve", "m", "-tp", "2", "-q", "awq", "--enforce-eager", "--max-num-seqs=64")
    model, kwargs = engine_kwargs(argv, parse_layout("tp2"))
    assert model == "m"
    assert kwargs == {
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 1,
        "quantization": "awq",
        "enforce_eager": True,
        "max_num_seqs": 64,
    }
    with pytest.raises(SpecError, match="short flag '-O'"):
        engine_kwargs((*argv, "-O", "3"), parse_layout("tp2"))


def test_ray_service_refuses_sglang() -> None:
    with pytest.raises(SpecError, match="Ray Serve LLM"):
        ray_service(sglang_multi_node_plan(2), parse_layout("tp16"), options())


def test_no_yaml_anchors() -> None:
    # Shared sub-dicts would be dumped as &id001 anchors, which reviewers and some tools stumble on.
    for text in ("tp8", "tp8pp2"):
        for obj in _objects(text):
            assert "&id" not in yaml.safe_dump(obj)
    assert "&id" not in yaml.safe_dump(ray_service(vllm_plan("tp8"), parse_layout("tp8"), options()))
