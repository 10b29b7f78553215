"""Where a sweep deploys: the local, ray and kubernetes targets of a spec (a union on `kind`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from orchestrator.spec.base import SpecModel
from orchestrator.spec.checks import MAX_DURATION_S, check_host, check_runtime_env


class LocalTarget(SpecModel):
    """Processes on this machine."""

    kind: Literal["local"] = Field("local", description="Discriminator.")
    host: str = Field("127.0.0.1", description="Address the servers bind to.")
    base_port: int = Field(8000, gt=0, le=65525, description="First port; replicas count up from it.")
    workdir: str | None = Field(None, description="Directory for logs and scripts; default a temp dir.")

    @field_validator("host")
    @classmethod
    def _host(cls, host: str) -> str:
        check_host(host)
        return host


class RayTarget(SpecModel):
    """A Ray cluster; one placement group per replica."""

    kind: Literal["ray"] = Field(description="Discriminator.")
    address: str = Field("auto", description="Ray cluster address, e.g. 'ray://head:10001' or 'auto'.")
    namespace: str | None = Field(None, description="Ray namespace.")
    runtime_env: dict[str, Any] = Field(default_factory=dict, description="Ray runtime_env.")

    @field_validator("runtime_env")
    @classmethod
    def _runtime_env(cls, runtime_env: dict[str, Any]) -> dict[str, Any]:
        check_runtime_env(runtime_env)
        return runtime_env


class KubernetesTarget(SpecModel):
    """A Kubernetes cluster: a Deployment per single-node replica, a LeaderWorkerSet per multi-node one."""

    kind: Literal["kubernetes"] = Field(description="Discriminator.")
    namespace: str = Field("default", description="Namespace the engine objects are created in.")
    image: str = Field(description="Container image of the engine.")
    context: str | None = Field(None, description="kubeconfig context; default the current one.")
    service_account: str | None = Field(None, description="Service account of the engine pods.")
    node_selector: dict[str, str] = Field(default_factory=dict, description="Pod nodeSelector.")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="Pod tolerations.")
    use_helm: bool = Field(True, description="Deploy through the Helm chart (else direct objects).")
    ready_timeout_s: float = Field(
        1800.0, gt=0, le=MAX_DURATION_S, description="Time allowed for pods to become ready."
    )
    unschedulable_timeout_s: float = Field(
        300.0,
        gt=0,
        le=MAX_DURATION_S,
        description="How long a pod may stay Unschedulable (say, while an autoscaler adds a node) before "
        "the layout fails.",
    )
    access: Literal["auto", "service", "port-forward"] = Field(
        "auto",
        description="How orch reaches the engines: the Service's cluster DNS name (orch in the cluster), "
        "the API server's port-forward to each leader pod (orch outside), or auto (service when in a pod).",
    )
    router_image: str | None = Field(
        None, description="Prefill/decode pairs: the router's image (vLLM: one with orch installed, for "
        "python -m orchestrator.router; SGLang: default the engine image, which holds sglang_router).")
    rdma_resources: dict[str, int] = Field(
        default_factory=dict, description="Prefill/decode pairs: extended resources each pool pod asks for "
        "to reach the KV transfer network, e.g. {rdma/ib: 1} (the RDMA device plugin's name).")


TargetSpec = Annotated[LocalTarget | RayTarget | KubernetesTarget, Field(discriminator="kind")]
