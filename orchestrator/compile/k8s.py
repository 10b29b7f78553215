"""LaunchPlan -> Kubernetes objects (plain dicts): Deployment or LeaderWorkerSet, and a Service.

Pure: no cluster access. A single-node replica becomes one pod of a Deployment (replicas = x); a replica
spanning nodes becomes one group of a LeaderWorkerSet (size = nodes per replica). The Helm chart in helm/
renders the same objects from the values of ``orchestrator.compile.helm_values``; a test holds them equal.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.compile.k8s_argv import (
    PodCommand,
    gpus_per_pod,
    health_path,
    nodes_per_replica,
    plan_commands,
    probe_timeout_s,
)
from orchestrator.engines.base import LaunchPlan, ReplicaPlan
from orchestrator.errors import SpecError
from orchestrator.layout import Layout
from orchestrator.spec.targets import KubernetesTarget

Obj = dict[str, Any]

LABEL_PREFIX = "orch.dev/"
LABEL_LAYOUT = LABEL_PREFIX + "layout"
LABEL_ENGINE = LABEL_PREFIX + "engine"
LABEL_ROLE = LABEL_PREFIX + "role"
ANNOTATION_SPEC_HASH = LABEL_PREFIX + "spec-hash"
LWS_API = "leaderworkerset.x-k8s.io/v1"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
CONTAINER = "engine"
PORT_NAME = "http"

_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
# LWS derives pod and StatefulSet names from its own (name-group-index plus a hash label); leave room.
MAX_NAME = 40


@dataclass(frozen=True)
class K8sOptions:
    """Everything about the pods that the LaunchPlan does not say. KubernetesTarget supplies what it has."""

    name: str
    image: str
    namespace: str = "default"
    container_port: int = 8000
    service_port: int = 8000
    service_type: str = "ClusterIP"
    image_pull_policy: str = "IfNotPresent"
    model_cache_pvc: str | None = "model-cache"
    model_cache_mount: str = "/models"
    hf_token_secret: str | None = "hf-token"
    hf_token_key: str = "token"
    gpu_product: str | None = None
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()
    service_account: str | None = None
    # Large checkpoints take tens of minutes to download and load; the startup probe must outwait that.
    startup_budget_s: float = 1800.0
    probe_period_s: int = 10
    readiness_failure_threshold: int = 3
    # Requests (not limits) per GPU of the pod: the engine's tokenizer, scheduler and weight loading need
    # host CPU and memory, and without requests the pod is the first the kubelet evicts under pressure.
    cpu_per_gpu: float = 4.0
    memory_per_gpu_gib: float = 24.0
    shm_size: str = "32Gi"
    spec_hash: str | None = None
    extra_labels: tuple[tuple[str, str], ...] = field(default=())
    # Prefill/decode pairs (compile/k8s_pd.py): the router's image, and the extended resources each pool
    # pod asks for to reach the KV transfer network (RDMA device plugins: rdma/ib, rdma/hca, ...).
    router_image: str | None = None
    rdma_resources: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if not (_DNS_LABEL.fullmatch(self.name) and len(self.name) <= MAX_NAME):
            raise SpecError(
                f"kubernetes name {self.name!r}: use lowercase letters, digits and '-', start with a letter, "
                f"at most {MAX_NAME} characters"
            )
        if not self.image:
            raise SpecError("kubernetes image: empty; set target.image, e.g. vllm/vllm-openai:v0.32.0")
        if not _DNS_LABEL.fullmatch(self.namespace):
            raise SpecError(f"kubernetes namespace {self.namespace!r}: must be a DNS label such as 'llm'")
        for port_name in ("container_port", "service_port"):
            port = getattr(self, port_name)
            if not 1 <= port <= 65535:
                raise SpecError(f"kubernetes {port_name} {port}: must be within 1..65535")
        if self.gpu_product is not None and not _LABEL_VALUE.fullmatch(self.gpu_product):
            raise SpecError(
                f"kubernetes gpu_product {self.gpu_product!r}: must be a node label value such as "
                "NVIDIA-H100-80GB-HBM3 (see kubectl get nodes -L nvidia.com/gpu.product)"
            )
        if self.startup_budget_s <= 0 or self.probe_period_s < 1:
            raise SpecError("kubernetes startup_budget_s and probe_period_s must be positive")
        if self.cpu_per_gpu < 0 or self.memory_per_gpu_gib < 0:
            raise SpecError("kubernetes cpu_per_gpu and memory_per_gpu_gib must be >= 0")


def options_from_target(target: KubernetesTarget, name: str, **overrides: Any) -> K8sOptions:
    """K8sOptions from the spec's kubernetes target; keyword overrides for what the spec does not carry."""
    fields: dict[str, Any] = {
        "name": name,
        "image": target.image,
        "namespace": target.namespace,
        "node_selector": tuple(sorted(target.node_selector.items())),
        "tolerations": tuple(target.tolerations),
        "service_account": target.service_account,
        "startup_budget_s": target.ready_timeout_s,
        "router_image": target.router_image,
        "rdma_resources": tuple(sorted(target.rdma_resources.items())),
    }
    fields.update(overrides)
    return K8sOptions(**fields)


def _label_value(what: str, value: str) -> str:
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        raise SpecError(f"kubernetes label {what}={value!r}: at most 63 letters, digits, '-', '_', '.'")
    return value


def layout_label(layout: str) -> str:
    """A layout as a label value: a prefill/decode pair's `p:tp4+d:tp4` reads `p-tp4.d-tp4` (labels
    allow no ':' or '+')."""
    return layout.replace(":", "-").replace("+", ".")


def selector_labels(opts: K8sOptions) -> dict[str, str]:
    """What selectors match: stable across layouts, so a new layout updates the app rather than adding one."""
    return {"app.kubernetes.io/name": opts.name, "app.kubernetes.io/component": "engine"}


def object_labels(plan: LaunchPlan, opts: K8sOptions) -> dict[str, str]:
    labels = selector_labels(opts) | {
        "app.kubernetes.io/managed-by": "orch",
        LABEL_ENGINE: _label_value("engine", plan.engine),
        LABEL_LAYOUT: _label_value("layout", layout_label(str(plan.layout))),
    }
    for key, value in opts.extra_labels:
        labels[key] = _label_value(key, value)
    return labels


def object_metadata(plan: LaunchPlan, opts: K8sOptions) -> Obj:
    meta: Obj = {"name": opts.name, "namespace": opts.namespace, "labels": object_labels(plan, opts)}
    if opts.spec_hash:
        meta["annotations"] = {ANNOTATION_SPEC_HASH: opts.spec_hash}
    return meta


def hf_token_env(opts: K8sOptions, cmd: PodCommand | None = None) -> list[Obj]:
    """HF_TOKEN by reference to a Secret: the token itself never appears in an object or in values."""
    if not opts.hf_token_secret or (cmd is not None and "HF_TOKEN" in secret_names(cmd)):
        return []  # engine.env_from_secret names the HF_TOKEN Secret itself
    # Optional: public models need no token, and a missing Secret must not keep the pod from starting.
    ref = {"name": opts.hf_token_secret, "key": opts.hf_token_key, "optional": True}
    return [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": ref}}]


def plain_env(cmd: PodCommand, opts: K8sOptions) -> list[Obj]:
    """HF_HOME on the model cache (so downloads persist), the plan's env, then the pod-IP variables."""
    env: list[Obj] = []
    if opts.model_cache_pvc and "HF_HOME" not in dict(cmd.env):
        env.append({"name": "HF_HOME", "value": opts.model_cache_mount})
    env.extend({"name": k, "value": v} for k, v in cmd.env)
    env.extend({"name": k, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} for k in cmd.pod_ip_env)
    env.extend(secret_env(cmd))
    return env


def secret_names(cmd: PodCommand) -> set[str]:
    return {s.name for s in cmd.secret_env}


def secret_env(cmd: PodCommand) -> list[Obj]:
    """engine.env_from_secret as secretKeyRef entries: the manifest names the Secret, never the value."""
    out: list[Obj] = []
    for ref in cmd.secret_env:
        if ref.secret is None:
            raise SpecError(
                f"engine.env_from_secret.{ref.name}: Kubernetes artifacts need 'secret' (the name of the "
                "Secret holding the value); add it to the reference"
            )
        out.append({"name": ref.name, "valueFrom": {"secretKeyRef": {"name": ref.secret, "key": ref.key}}})
    return out


def container_env(cmd: PodCommand, opts: K8sOptions) -> list[Obj]:
    return hf_token_env(opts, cmd) + plain_env(cmd, opts)


@dataclass(frozen=True)
class Probe:
    """The health endpoint a serving pod is probed on, and how long one call may take."""

    path: str
    timeout_s: int


def replica_probe(rep: ReplicaPlan) -> Probe:
    return Probe(health_path(rep), probe_timeout_s(rep))


def _probes(probe: Probe, opts: K8sOptions) -> Obj:
    def get() -> Obj:
        # A fresh dict per probe: shared ones would be written as YAML anchors.
        return {"path": probe.path, "port": PORT_NAME}

    failures = math.ceil(opts.startup_budget_s / opts.probe_period_s)
    return {
        # Readiness only starts once startup succeeded, so it can stay strict while loading takes long.
        "startupProbe": {
            "httpGet": get(),
            "periodSeconds": opts.probe_period_s,
            "timeoutSeconds": probe.timeout_s,
            "failureThreshold": failures,
        },
        "readinessProbe": {
            "httpGet": get(),
            "periodSeconds": opts.probe_period_s,
            "timeoutSeconds": probe.timeout_s,
            "failureThreshold": opts.readiness_failure_threshold,
        },
    }


def resources(gpus: int, opts: K8sOptions) -> Obj:
    """GPU limit plus CPU/memory requests scaled by the GPUs (a CPU-only pod, gpus=0, requests one GPU's)."""
    share = max(gpus, 1)
    cpu = opts.cpu_per_gpu * share
    requests: Obj = {}
    if cpu > 0:
        requests["cpu"] = str(int(cpu)) if cpu == int(cpu) else f"{int(cpu * 1000)}m"
    if opts.memory_per_gpu_gib > 0:
        requests["memory"] = f"{math.ceil(opts.memory_per_gpu_gib * share)}Gi"
    out: Obj = {"limits": {GPU_RESOURCE: gpus, **dict(opts.rdma_resources)}}
    if requests:
        out["requests"] = requests
    return out


def _container(cmd: PodCommand, gpus: int, opts: K8sOptions, probe: Probe | None) -> Obj:
    mounts: list[Obj] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if opts.model_cache_pvc:
        mounts.append({"name": "model-cache", "mountPath": opts.model_cache_mount})
    c: Obj = {
        "name": CONTAINER,
        "image": opts.image,
        "imagePullPolicy": opts.image_pull_policy,
        "command": list(cmd.argv),
        "env": container_env(cmd, opts),
        "resources": resources(gpus, opts),
        "volumeMounts": mounts,
    }
    if probe is not None:
        # Only the leader serves HTTP; worker ranks of a multi-node replica have no endpoint to probe.
        c["ports"] = [{"name": PORT_NAME, "containerPort": opts.container_port, "protocol": "TCP"}]
        c.update(_probes(probe, opts))
    return c


def pod_spec(cmd: PodCommand, gpus: int, opts: K8sOptions, probe: Probe | None) -> Obj:
    # NCCL and the engines' shared-memory transports need more than the default 64 MiB /dev/shm.
    volumes: list[Obj] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": opts.shm_size}}]
    if opts.model_cache_pvc:
        volumes.append({"name": "model-cache", "persistentVolumeClaim": {"claimName": opts.model_cache_pvc}})
    spec: Obj = {
        # Service links put one env var per Service of the namespace into the pod; engines read some of
        # them (e.g. a Service named "vllm" sets VLLM_PORT) and fail, so they stay off.
        "enableServiceLinks": False,
        "containers": [_container(cmd, gpus, opts, probe)],
        "volumes": volumes,
    }
    selector = dict(opts.node_selector)
    if opts.gpu_product:
        selector[GPU_PRODUCT_LABEL] = opts.gpu_product
    if selector:
        spec["nodeSelector"] = dict(sorted(selector.items()))
    if opts.tolerations:
        spec["tolerations"] = [dict(t) for t in opts.tolerations]
    if opts.service_account:
        spec["serviceAccountName"] = opts.service_account
    return spec


def _template(plan: LaunchPlan, opts: K8sOptions, role: str, spec: Obj) -> Obj:
    labels = selector_labels(opts) | {LABEL_LAYOUT: layout_label(str(plan.layout)), LABEL_ROLE: role}
    return {"metadata": {"labels": labels}, "spec": spec}


def _check_layout(plan: LaunchPlan, layout: Layout) -> None:
    if layout != plan.layout or len(plan.replicas) != layout.replicas:
        raise SpecError(
            f"launch plan is for {plan.layout!s} with {len(plan.replicas)} replicas, not layout {layout}; "
            "build the plan from the same layout"
        )


def deployment(plan: LaunchPlan, layout: Layout, opts: K8sOptions) -> Obj:
    """A Deployment of x pods, one per single-node replica."""
    _check_layout(plan, layout)
    leader, worker = plan_commands(plan.replicas, opts.container_port)
    if worker is not None:
        raise SpecError(f"layout {layout}: replicas span nodes; compile it as a LeaderWorkerSet")
    rep = plan.replicas[0]
    spec = pod_spec(leader, gpus_per_pod(rep), opts, replica_probe(rep))
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_metadata(plan, opts),
        "spec": {
            "replicas": layout.replicas,
            # The default rollout adds a pod before removing one; on a GPU pool that is full (the usual
            # state) the new pod never schedules and the rollout hangs. Replace pods one at a time.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "selector": {"matchLabels": selector_labels(opts)},
            "template": _template(plan, opts, "leader", spec),
        },
    }


def leader_worker_set(plan: LaunchPlan, layout: Layout, opts: K8sOptions) -> Obj:
    """A LeaderWorkerSet of x groups, one per multi-node replica; pod 0 of a group is the leader."""
    _check_layout(plan, layout)
    leader, worker = plan_commands(plan.replicas, opts.container_port)
    if worker is None:
        raise SpecError(f"layout {layout}: each replica fits one node; compile it as a Deployment")
    rep = plan.replicas[0]
    gpus = gpus_per_pod(rep)
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": object_metadata(plan, opts),
        "spec": {
            "replicas": layout.replicas,
            # Workers need only the leader's address, not a ready leader; and the leader cannot become
            # ready before its workers join, so LeaderReady would never start them.
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": nodes_per_replica(rep),
                # One lost rank breaks the collective of the whole group: restart the group together.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": _template(
                    plan, opts, "leader", pod_spec(leader, gpus, opts, replica_probe(rep))
                ),
                "workerTemplate": _template(plan, opts, "worker", pod_spec(worker, gpus, opts, None)),
            },
        },
    }


def service(plan: LaunchPlan, opts: K8sOptions) -> Obj:
    """A Service over the leader pods only (workers of multi-node replicas do not serve HTTP)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(plan, opts),
        "spec": {
            "type": opts.service_type,
            "selector": selector_labels(opts) | {LABEL_ROLE: "leader"},
            "ports": [
                {"name": PORT_NAME, "port": opts.service_port, "targetPort": PORT_NAME, "protocol": "TCP"}
            ],
        },
    }


def is_multi_node(plan: LaunchPlan) -> bool:
    return bool(plan.replicas) and nodes_per_replica(plan.replicas[0]) > 1


def build_objects(plan: LaunchPlan, layout: Layout, opts: K8sOptions) -> list[Obj]:
    """The objects of one layout: the workload (Deployment or LeaderWorkerSet), then its Service."""
    workload = (
        leader_worker_set(plan, layout, opts) if is_multi_node(plan) else deployment(plan, layout, opts)
    )
    return [workload, service(plan, opts)]
