"""A prefill/decode pair's LaunchPlan -> Kubernetes objects (plain dicts). Pure: no cluster access.

Each pool is an ordinary layout's objects (compile/k8s.py: a Deployment, or a LeaderWorkerSet when its
replicas span nodes, and a Service), named `<name>-prefill` / `<name>-decode`, its pods asking for the
RDMA resources the KV transfer needs (`K8sOptions.rdma_resources`, e.g. rdma/ib). The router is a
Deployment of one pod without GPUs and the Service `<name>`: the pair's front door.

How the router finds the pool servers:
- vLLM (NIXL): orch's router sends each request to the prefill Service and the answer's
  kv_transfer_params name the prefill pod itself (its pod IP is VLLM_NIXL_SIDE_CHANNEL_HOST), so the
  decode server behind the decode Service reads the KV from the right pod;
- SGLang: its router discovers the pool pods through the API (`--service-discovery` with a label
  selector per pool) and reads each prefill pod's bootstrap port from its `sglang.ai/bootstrap-port`
  annotation, so it needs a ServiceAccount allowed to list and watch pods (Role + RoleBinding here).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from orchestrator.compile.k8s import (
    LABEL_LAYOUT,
    LABEL_ROLE,
    K8sOptions,
    Obj,
    Probe,
    build_objects,
    layout_label,
    object_metadata,
    pod_spec,
    selector_labels,
    service,
)
from orchestrator.compile.k8s_argv import PodCommand
from orchestrator.engines.base import LaunchPlan
from orchestrator.engines.pd_flags import (
    SGLANG_ROUTER,
    SGLANG_ROUTER_POLICIES,
    SIDE_PORT_OFFSET,
    orch_router_argv,
)
from orchestrator.errors import SpecError
from orchestrator.layout import Layout

SGLANG_BOOTSTRAP_ANNOTATION = "sglang.ai/bootstrap-port"  # sglang_router's default annotation key
LABEL_POOL = "orch.dev/pool"
POOL_SUFFIX = {"prefill": "-prefill", "decode": "-decode"}
LONGEST_SUFFIX = max(len(s) for s in (*POOL_SUFFIX.values(), "-router"))  # names leave room for it
ROUTER_CPU, ROUTER_MEMORY_GIB = 2.0, 4.0  # an HTTP proxy: no GPU, little memory
# The router's /health asks every pool server's (orch's router waits up to 5 s on each, concurrently).
ROUTER_PROBE_TIMEOUT_S = 10


def pool_role(plan: LaunchPlan) -> str:
    role = plan.replicas[0].role if plan.replicas else ""
    if role not in POOL_SUFFIX:
        raise SpecError(f"launch plan {plan.name}: a pool's plan has prefill or decode replicas, "
                        f"not {role!r}")
    return role


def pool_options(opts: K8sOptions, role: str) -> K8sOptions:
    """The pool's objects: their own name (so selectors keep pools apart) and a pool label."""
    return replace(opts, name=opts.name + POOL_SUFFIX[role],
                   extra_labels=(*opts.extra_labels, (LABEL_POOL, role)))


def router_options(opts: K8sOptions, engine: str) -> K8sOptions:
    """The router's pod: no GPU, no model cache, no token, no RDMA; its own image."""
    image = opts.router_image or (opts.image if engine == "sglang" else None)
    if image is None:
        raise SpecError("the router of a vLLM prefill/decode pair is orch's (python -m orchestrator.router): "
                        "pass --router-image (or target.router_image) with a pinned image that has orch "
                        "installed")
    return replace(opts, image=image, model_cache_pvc=None, hf_token_secret=None, rdma_resources=(),
                   cpu_per_gpu=ROUTER_CPU, memory_per_gpu_gib=ROUTER_MEMORY_GIB, shm_size="64Mi",
                   extra_labels=(*opts.extra_labels, (LABEL_POOL, "router")))


def router_command(plan: LaunchPlan, opts: K8sOptions) -> tuple[str, ...]:
    """The router's argv in its pod: the pools by Service (vLLM) or by label selector (SGLang)."""
    cand = plan.candidate
    policy = str(getattr(cand, "router_policy", "least_outstanding"))
    port = opts.container_port
    if plan.engine == "sglang":
        def selector(role: str) -> list[str]:
            labels = selector_labels(pool_options(opts, role)) | {LABEL_ROLE: "leader"}
            return [f"{k}={v}" for k, v in labels.items()]

        return (*SGLANG_ROUTER, "--pd-disaggregation", "--service-discovery",
                "--prefill-selector", *selector("prefill"), "--decode-selector", *selector("decode"),
                "--service-discovery-namespace", opts.namespace, "--service-discovery-port", str(port),
                "--policy", SGLANG_ROUTER_POLICIES[policy], "--host", "0.0.0.0", "--port", str(port))
    urls = {role: f"http://{opts.name}{suffix}:{opts.service_port}" for role, suffix in POOL_SUFFIX.items()}
    return orch_router_argv([urls["prefill"]], [urls["decode"]], port=port, policy=policy, protocol="vllm")


def router_objects(plan: LaunchPlan, opts: K8sOptions) -> list[Obj]:
    """The router: (SGLang: a ServiceAccount allowed to read pods, named as the router), its Deployment
    and the pair's Service. The same objects the chart renders from the router's unit."""
    ropts = router_options(opts, plan.engine)
    out: list[Obj] = []
    if plan.engine == "sglang":
        ropts = replace(ropts, service_account=ropts.name)
        out += rbac_objects(plan, ropts)
    cmd = PodCommand(router_command(plan, opts), ())
    spec = pod_spec(cmd, 0, ropts, Probe("/health", ROUTER_PROBE_TIMEOUT_S))
    for container in spec["containers"]:
        if not container.get("env"):
            container.pop("env", None)  # no model, no token: the router needs none
    labels = selector_labels(ropts) | {LABEL_LAYOUT: layout_label(str(plan.layout)), LABEL_ROLE: "leader"}
    out.append({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": object_metadata(plan, ropts),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "selector": {"matchLabels": selector_labels(ropts)},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    })
    out.append(service(plan, ropts))
    return out


def rbac_objects(plan: LaunchPlan, opts: K8sOptions) -> list[Obj]:
    """What SGLang's router needs to discover the pool pods: read access to pods in its namespace."""
    meta, account = object_metadata(plan, opts), opts.name
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
         "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": opts.namespace}]},
    ]


def pod_annotations(plan: LaunchPlan, role: str, opts: K8sOptions) -> dict[str, str]:
    """SGLang's prefill pods say where their bootstrap server listens (what its router reads)."""
    if plan.engine == "sglang" and role == "prefill":
        return {SGLANG_BOOTSTRAP_ANNOTATION: str(opts.container_port + SIDE_PORT_OFFSET)}
    return {}


def _annotate(objects: list[Obj], annotations: dict[str, str]) -> None:
    for obj in objects:
        templates: list[Any] = []
        if obj["kind"] == "Deployment":
            templates = [obj["spec"]["template"]]
        elif obj["kind"] == "LeaderWorkerSet":
            templates = [obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"]]
        for t in templates:
            t["metadata"]["annotations"] = dict(annotations)


def build_pair_objects(plan: LaunchPlan, opts: K8sOptions) -> list[Obj]:
    """Every object of a pair: each pool's workload and Service, then the router's."""
    if len(plan.pools) != 2 or plan.router is None:
        raise SpecError(f"launch plan {plan.name}: not a prefill/decode pair's plan (pools and a router)")
    out: list[Obj] = []
    for pool in plan.pools:
        role, layout = pool_role(pool), pool.layout
        if not isinstance(layout, Layout):
            raise SpecError(f"launch plan {plan.name}: its {role} pool's plan is not one layout's")
        objects = build_objects(pool, layout, pool_options(opts, role))
        if annotations := pod_annotations(plan, role, opts):
            _annotate(objects, annotations)
        out += objects
    return out + router_objects(plan, opts)


__all__ = ["LABEL_POOL", "LONGEST_SUFFIX", "POOL_SUFFIX", "build_pair_objects", "pool_options",
           "router_command",
           "router_options"]
