"""A prefill/decode pair's launch plan and its deployable forms: each pool on its own GPUs and ports
with its role's flags, the router in front; Kubernetes objects per pool and for the router, Helm values
as units, Ray Serve LLM's prefill/decode application."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.compile import prepare
from orchestrator.compile.artifacts import render
from orchestrator.compile.helm_values import pair_helm_values
from orchestrator.compile.k8s import K8sOptions
from orchestrator.compile.k8s_pd import build_pair_objects
from orchestrator.compile.ray_serve import pd_serve_app_config
from orchestrator.disagg import parse_disagg
from orchestrator.engines.pd_flags import SIDE_PORT_OFFSET
from orchestrator.errors import SpecError
from orchestrator.plan.candidates import disagg_candidate
from orchestrator.plan.from_spec import engine_settings
from orchestrator.spec.models import SweepSpec


def _spec(engine: str = "vllm", nodes: int = 1, **changes: Any) -> SweepSpec:
    data: dict[str, Any] = {
        "model": {"name": "qwen2.5-7b", "max_model_len": 8192},
        "hardware": {"gpu": "h100-sxm", "nodes": nodes},
        "engine": {"name": engine},
        "workload": {"rates_per_s": [1], "num_requests": 4},
        "layouts": ["tp8"],
    }
    data.update(changes)
    return SweepSpec.model_validate(data)


def _compiled(layout: str, engine: str = "vllm", nodes: int = 1, **changes: Any):  # type: ignore[no-untyped-def]
    spec = _spec(engine, nodes, **changes)
    cand = disagg_candidate(spec, parse_disagg(layout), engine_settings(spec))
    return spec, prepare(spec, cand, node_addrs=tuple(f"10.0.0.{i + 1}" for i in range(nodes)) if nodes > 1
                         else None)


def _flag(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_pools_get_disjoint_gpus_and_ports_and_the_router_comes_last() -> None:
    _, c = _compiled("p:tp2x2+d:tp4")
    plan = c.plan
    assert [r.role for r in plan.replicas] == ["prefill", "prefill", "decode", "router"]
    gpus = [dict(r.processes[0].env).get("CUDA_VISIBLE_DEVICES") for r in plan.replicas]
    assert gpus[3] is None  # the router holds no GPU
    held = [set(map(int, g.split(","))) for g in gpus[:3] if g]
    assert [len(h) for h in held] == [2, 2, 4] and set().union(*held) == set(range(8))
    assert held[2] == {0, 1, 2, 3}  # the larger replica is placed first
    ports = [r.processes[0].ports[0] for r in plan.replicas]
    assert len(set(ports)) == 4 and ports[-1] == max(ports)
    assert [plan.replica_gpus(i) for i in range(4)] == [2, 2, 4, 0]
    assert [p.replicas[0].role for p in plan.pools] == ["prefill", "decode"]
    router = plan.router
    assert router is not None and router.serves_clients
    assert not any(r.serves_clients for r in plan.replicas[:3])


def test_vllm_pools_carry_nixl_roles_and_side_channels() -> None:
    _, c = _compiled("p:tp2x2+d:tp4")
    reps = c.plan.replicas
    for rep, role in zip(reps[:3], ("kv_producer", "kv_producer", "kv_consumer"), strict=True):
        (proc,) = rep.processes
        kv = json.loads(_flag(proc.argv, "--kv-transfer-config"))
        assert kv == {"kv_connector": "NixlConnector", "kv_role": role, "kv_buffer_device": "cuda"}
        env = dict(proc.env)
        assert int(env["VLLM_NIXL_SIDE_CHANNEL_PORT"]) == int(_flag(proc.argv, "--port")) + SIDE_PORT_OFFSET
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.1"
    router = reps[3].processes[0].argv
    assert router[:3] == ("python", "-m", "orchestrator.router")
    urls = [router[i + 1] for i, a in enumerate(router) if a in ("--prefill", "--decode")]
    assert urls == [r.health_url.rsplit("/", 1)[0] for r in reps[:3]]
    assert _flag(router, "--protocol") == "vllm" and _flag(router, "--policy") == "least_outstanding"


def test_example_connector_pools_share_one_directory_and_a_served_launch_gets_its_own() -> None:
    spec = _spec(disagg={"transfer_backend": "ExampleConnector"})
    cand = disagg_candidate(spec, parse_disagg("p:tp1+d:tp1"), engine_settings(spec))

    def dirs(kv_dir: str | None) -> set[str]:
        plan = prepare(spec, cand, kv_dir=kv_dir).plan
        return {json.loads(_flag(r.processes[0].argv, "--kv-transfer-config"))["kv_connector_extra_config"]
                ["shared_storage_path"] for r in plan.replicas[:2]}

    assert dirs(None) == {"/tmp/orch-kv/p-tp1-d-tp1"}  # compiled output: one per candidate
    # served: the launch's own (stale KV of an earlier run must not be loaded as this one's)
    assert dirs("/runs/r1/p:tp1+d:tp1/kv") == {"/runs/r1/p:tp1+d:tp1/kv"}


def test_sglang_pools_carry_disaggregation_flags_and_its_router_the_bootstrap_ports() -> None:
    _, c = _compiled("p:tp4+d:tp4", "sglang",
                     disagg={"transfer_backend": "nixl", "router_policy": "round_robin"})
    p, d, r = c.plan.replicas
    pa, da = p.processes[0].argv, d.processes[0].argv
    assert _flag(pa, "--disaggregation-mode") == "prefill" and _flag(da, "--disaggregation-mode") == "decode"
    assert _flag(pa, "--disaggregation-transfer-backend") == "nixl"
    boot = int(_flag(pa, "--disaggregation-bootstrap-port"))
    assert boot == int(_flag(pa, "--port")) + SIDE_PORT_OFFSET and "--disaggregation-bootstrap-port" not in da
    ra = r.processes[0].argv
    assert ra[:4] == ("python3", "-m", "sglang_router.launch_router", "--pd-disaggregation")
    i = ra.index("--prefill")
    assert ra[i + 2] == str(boot) and _flag(ra, "--policy") == "round_robin"


def test_sim_pools_run_the_simulated_roles_over_the_link_between_them() -> None:
    _, one = _compiled("p:tp4+d:tp4", "sim")
    assert one.plan.replicas[0].processes[0].argv[:6] == (
        "python", "-m", "orchestrator.sim.pd_server", "--role", "prefill", "--kv-link")
    assert _flag(one.plan.replicas[1].processes[0].argv, "--kv-link") == "intra_node"
    _, two = _compiled("p:tp8+d:tp8", "sim", nodes=2)
    assert _flag(two.plan.replicas[1].processes[0].argv, "--kv-link") == "inter_node"


def test_pools_spanning_nodes_take_whole_nodes() -> None:
    _, c = _compiled("p:tp8+d:tp8", nodes=2)
    p, d, _ = c.plan.replicas
    assert p.processes[0].node_index == 0 and d.processes[0].node_index == 1
    assert dict(d.processes[0].env)["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.0.0.2"


def _opts(**kw: Any) -> K8sOptions:
    return K8sOptions(name="qwen-pd", image="vllm/vllm-openai:v0.32.0",
                      router_image="ghcr.io/acme/orch:0.1.0",
                      rdma_resources=(("rdma/ib", 1),), **kw)


def test_kubernetes_objects_per_pool_and_for_the_router() -> None:
    _, c = _compiled("p:tp2x2+d:tp4")
    objs = build_pair_objects(c.plan, _opts())
    assert [(o["kind"], o["metadata"]["name"]) for o in objs] == [
        ("Deployment", "qwen-pd-prefill"), ("Service", "qwen-pd-prefill"),
        ("Deployment", "qwen-pd-decode"), ("Service", "qwen-pd-decode"),
        ("Deployment", "qwen-pd"), ("Service", "qwen-pd")]
    prefill, decode, router = objs[0], objs[2], objs[4]
    assert prefill["spec"]["replicas"] == 2 and decode["spec"]["replicas"] == 1
    limits = prefill["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": 2, "rdma/ib": 1}
    rc = router["spec"]["template"]["spec"]["containers"][0]
    assert rc["image"] == "ghcr.io/acme/orch:0.1.0" and rc["resources"]["limits"] == {"nvidia.com/gpu": 0}
    assert "--prefill" in rc["command"] and "http://qwen-pd-prefill:8000" in rc["command"]
    assert objs[1]["spec"]["selector"] != objs[3]["spec"]["selector"]  # each Service its own pool
    env = {e["name"]: e for e in prefill["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == {
        "name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"]["value"] == str(8000 + SIDE_PORT_OFFSET)
    assert router["metadata"]["labels"]["orch.dev/layout"] == "p-tp2x2.d-tp4"


def test_sglang_router_discovers_its_pools_with_a_pod_reading_account() -> None:
    _, c = _compiled("p:tp4+d:tp4", "sglang")
    objs = build_pair_objects(c.plan, _opts())
    kinds = [o["kind"] for o in objs]
    assert kinds[4:7] == ["ServiceAccount", "Role", "RoleBinding"]
    prefill = objs[0]["spec"]["template"]
    assert prefill["metadata"]["annotations"] == {"sglang.ai/bootstrap-port": str(8000 + SIDE_PORT_OFFSET)}
    cmd = objs[7]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--service-discovery" in cmd and "app.kubernetes.io/name=qwen-pd-prefill" in cmd
    assert objs[7]["spec"]["template"]["spec"]["serviceAccountName"] == "qwen-pd"
    assert objs[5]["rules"][0]["verbs"] == ["get", "list", "watch"]


def test_a_vllm_router_needs_an_image_with_orch() -> None:
    _, c = _compiled("p:tp4+d:tp4")
    with pytest.raises(SpecError, match="pass --router-image"):
        build_pair_objects(c.plan, K8sOptions(name="qwen-pd", image="vllm/vllm-openai:v0.32.0"))


def test_helm_values_are_one_unit_per_pool_and_the_router() -> None:
    _, c = _compiled("p:tp2x2+d:tp4", "sglang")
    units = pair_helm_values(c.plan, _opts())["units"]
    assert [u["name"] for u in units] == ["qwen-pd-prefill", "qwen-pd-decode", "qwen-pd"]
    assert [u["gpusPerPod"] for u in units] == [2, 4, 0]
    assert units[0]["resources"]["extraLimits"] == {"rdma/ib": 1}
    assert units[0]["podAnnotations"] == {"sglang.ai/bootstrap-port": "8005"}
    assert units[1]["podAnnotations"] == {}
    assert units[2]["podReader"] is True and units[2]["serviceAccountName"] == "qwen-pd"


def test_ray_serve_builds_the_prefill_decode_app() -> None:
    spec, c = _compiled("p:tp2x2+d:tp4")
    (app,) = pd_serve_app_config(c.plan, "H100")["applications"]
    assert app["import_path"] == "ray.serve.llm:build_pd_openai_app"
    p, d = app["args"]["prefill_config"], app["args"]["decode_config"]
    assert p["engine_kwargs"]["kv_transfer_config"]["kv_role"] == "kv_producer"
    assert d["engine_kwargs"]["kv_transfer_config"]["kv_role"] == "kv_consumer"
    assert p["engine_kwargs"]["tensor_parallel_size"] == 2 and p["deployment_config"] == {"num_replicas": 2}
    assert "runtime_env" not in p  # Ray sets the NIXL side channel itself
    assert render("ray-serve", c, spec, None) is not None
    _, sg = _compiled("p:tp4+d:tp4", "sglang")
    assert render("ray-serve", sg, spec, None) is None  # Ray Serve LLM runs vLLM
