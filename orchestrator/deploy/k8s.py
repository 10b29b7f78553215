"""The kubernetes target: apply a layout's objects, wait for every pod, reach the leaders, always tear down.

Through the official ``kubernetes`` client (imported lazily). Per layout it applies what
``compile.k8s.build_objects`` builds (Deployment or LeaderWorkerSet, and a Service; the Helm chart renders
the same objects), each labelled with the run and owned by one per-run ConfigMap, so deleting that object
(``orch gc``) removes everything even when orch died. Pods are polled until Ready; what keeps one from it
(Unschedulable, image pulls, OOMKilled, crash loops with the last log lines) ends the wait with that reason.
The leaders are reached through the Service's cluster DNS name when orch runs in the cluster, else through
the API server's port-forward to each leader pod (``k8s_forward``). The client, its one-line errors and the
object names, which ``orch gc`` shares, are in ``k8s_api``; creating and deleting each kind of object, and
the per-run ConfigMap that owns them, in ``k8s_objects``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.compile.k8s import (
    LABEL_ROLE,
    MAX_NAME,
    K8sOptions,
    Obj,
    build_objects,
    options_from_target,
)
from orchestrator.compile.k8s_pd import LONGEST_SUFFIX, build_pair_objects, pool_options
from orchestrator.deploy.base import Deployment, Endpoint
from orchestrator.deploy.k8s_api import (
    LABEL_RUN,
    REQUEST_TIMEOUT_S,
    UNREACHABLE,
    api_client,
    api_error,
    object_name,
)
from orchestrator.deploy.k8s_explain import is_ready, not_ready_summary, pod_problem, restarts
from orchestrator.deploy.k8s_forward import PodForward
from orchestrator.deploy.k8s_objects import RunObjects
from orchestrator.engines import LaunchPlan
from orchestrator.engines.base import ReplicaRole
from orchestrator.errors import DeployError, EngineDied
from orchestrator.layout import Layout
from orchestrator.spec.targets import KubernetesTarget

_POLL_S = 0.5


@dataclass
class KubeHandle:
    """What a deployed layout holds on the cluster: its objects and one port-forward per leader."""

    name: str
    objects: list[Obj]
    forwards: list[PodForward] = field(default_factory=list)
    pod_restarts: dict[str, int] = field(default_factory=dict)


class KubernetesRunTarget:
    """The Target protocol on a Kubernetes cluster; one instance per layout of a run."""

    def __init__(
        self, spec: KubernetesTarget, run_id: str, workdir: Path, spec_hash: str | None = None
    ) -> None:
        from kubernetes import client

        self.spec, self.run_id, self.workdir, self.spec_hash = spec, run_id, workdir, spec_hash
        self.api = api_client(spec)
        self.core: Any = client.CoreV1Api(self.api)
        self.ns = spec.namespace
        self.objects = RunObjects(self.api, self.ns, run_id)
        self.in_cluster = spec.access == "service" or (
            spec.access == "auto" and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        )

    def _new_core_api(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(client.ApiClient(configuration=self.api.configuration))

    # -- deploy -------------------------------------------------------------------------------------
    def deploy(self, plan: LaunchPlan) -> Deployment[KubeHandle]:
        layout = plan.layout
        if not isinstance(layout, Layout):
            return self._deploy_pair(plan)
        name = object_name(self.run_id, layout)
        opts = options_from_target(
            self.spec, name, extra_labels=((LABEL_RUN, self.run_id),), spec_hash=self.spec_hash
        )
        objects = build_objects(plan, layout, opts)
        owner = self.objects.owner()
        for obj in objects:
            obj["metadata"]["ownerReferences"] = [owner]
        handle = KubeHandle(name, [])
        try:
            for obj in objects:
                self.objects.create(obj)
                handle.objects.append(obj)
        except BaseException:
            self.objects.delete_all(handle.objects)
            self.objects.delete_owner_if_idle()
            raise
        port = opts.service_port
        if self.in_cluster:
            base = f"http://{name}.{self.ns}.svc:{port}"
            endpoints: tuple[Endpoint, ...] = (Endpoint(0, base + "/v1", base + "/health"),)
        else:
            handle.forwards = [
                PodForward(self._new_core_api, self.ns, opts.container_port) for _ in range(layout.replicas)
            ]
            endpoints = tuple(
                Endpoint(
                    i,
                    f"http://127.0.0.1:{f.local_port}/v1",
                    f"http://127.0.0.1:{f.local_port}{_health(plan)}",
                )
                for i, f in enumerate(handle.forwards)
            )
        return Deployment(plan, endpoints, str(self.workdir), (handle,))

    def _deploy_pair(self, plan: LaunchPlan) -> Deployment[KubeHandle]:
        """A prefill/decode pair (compile/k8s_pd.py): one handle per pool and one for the router, all
        owned by the run's ConfigMap. Clients reach the router; the pools' leaders are backends (health
        and metrics), reached like the router: by Service DNS in the cluster, by port-forward outside."""
        name = object_name(self.run_id, pair_label(str(plan.layout)))
        if len(name) > MAX_NAME - LONGEST_SUFFIX:  # its pools' objects add -prefill / -decode
            digest = hashlib.sha1(str(plan.layout).encode()).hexdigest()[:8]
            name = object_name(self.run_id, f"pd-{digest}")
        opts = options_from_target(
            self.spec, name, extra_labels=((LABEL_RUN, self.run_id),), spec_hash=self.spec_hash
        )
        objects = build_pair_objects(plan, opts)
        owner = self.objects.owner()
        handles: dict[str, KubeHandle] = {}
        for obj in objects:
            obj["metadata"]["ownerReferences"] = [owner]
            unit = obj["metadata"]["labels"]["app.kubernetes.io/name"]
            handles.setdefault(unit, KubeHandle(unit, []))
        try:
            for obj in objects:
                self.objects.create(obj)
                handles[obj["metadata"]["labels"]["app.kubernetes.io/name"]].objects.append(obj)
        except BaseException:
            for h in handles.values():
                self.objects.delete_all(h.objects)
            self.objects.delete_owner_if_idle()
            raise
        units = [(pool_options(opts, role).name, pool, role) for pool, role in
                 ((p, p.replicas[0].role) for p in plan.pools)]
        router = handles[opts.name]
        endpoints = (self._reach(router, opts, 1, "/health", "router")[0],)
        backends = tuple(ep for unit, pool, role in units
                         for ep in self._reach(handles[unit], opts, len(pool.replicas), _health(pool), role))
        return Deployment(plan, endpoints, str(self.workdir),
                          (*(handles[u] for u, _, _ in units), router), backends)

    def _reach(self, handle: KubeHandle, opts: K8sOptions, leaders: int, health: str,
               role: ReplicaRole) -> list[Endpoint]:
        """How orch reaches one unit's leaders: its Service's DNS name in the cluster (one endpoint),
        else one port-forward per leader pod (assigned to the pods once they are Ready)."""
        if self.in_cluster:
            base = f"http://{handle.name}.{self.ns}.svc:{opts.service_port}"
            return [Endpoint(0, base + "/v1", base + health, role)]
        handle.forwards = [PodForward(self._new_core_api, self.ns, opts.container_port)
                           for _ in range(leaders)]
        return [Endpoint(i, f"http://127.0.0.1:{f.local_port}/v1", f"http://127.0.0.1:{f.local_port}{health}",
                         role) for i, f in enumerate(handle.forwards)]

    # -- wait ---------------------------------------------------------------------------------------
    def _pods(self, handle: KubeHandle) -> list[Obj]:
        from kubernetes.client.exceptions import ApiException

        selector = ",".join(f"{k}={v}" for k, v in selector_labels_of(handle).items())
        try:
            resp = self.core.list_namespaced_pod(
                self.ns, label_selector=selector, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
            )
            return list(json.loads(resp.data).get("items") or [])
        except ApiException as exc:
            raise api_error(exc, "list pods", self.ns) from exc
        except UNREACHABLE as exc:
            raise api_error(exc, "list pods", self.ns) from exc

    def _events(self, pod: str) -> list[Obj]:
        with contextlib.suppress(Exception):
            resp = self.core.list_namespaced_event(
                self.ns, field_selector=f"involvedObject.name={pod}", _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_S,
            )  # fmt: skip
            return list(json.loads(resp.data).get("items") or [])
        return []

    def _last_log_lines(self, pod: str, lines: int = 5) -> str:
        with contextlib.suppress(Exception):
            text = self.core.read_namespaced_pod_log(
                pod, self.ns, container="engine", tail_lines=lines, previous=False,
                _request_timeout=REQUEST_TIMEOUT_S,
            )  # fmt: skip
            return " | ".join(line.strip() for line in str(text).splitlines() if line.strip())
        return ""

    def wait_ready(self, deployment: Deployment[KubeHandle], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for handle in deployment.handles:  # a prefill/decode pair: each pool, then its router
            self._wait_handle(handle, timeout_s, deadline)
        for ep in deployment.servers:
            _wait_health(ep.health_url, deadline)

    def _wait_handle(self, handle: KubeHandle, timeout_s: float, deadline: float) -> None:
        expected = _expected_pods(handle)
        unschedulable_since: float | None = None
        pods: list[Obj] = []
        while time.monotonic() < deadline:
            pods = self._pods(handle)
            waiting = False
            for pod in pods:
                problem = pod_problem(pod, self._events(pod["metadata"]["name"]) if not is_ready(pod) else ())
                if problem is None:
                    continue
                if problem.fatal:
                    tail = self._last_log_lines(problem.pod) if problem.wants_logs else ""
                    raise DeployError(problem.message + (f"; last log lines: {tail}" if tail else ""))
                waiting = True
                unschedulable_since = unschedulable_since or time.monotonic()
                if time.monotonic() - unschedulable_since > self.spec.unschedulable_timeout_s:
                    raise DeployError(problem.message)
            if not waiting:
                unschedulable_since = None
            if len(pods) >= expected and all(is_ready(p) for p in pods):
                break
            time.sleep(_POLL_S)
        else:
            raise DeployError(
                f"kubernetes: {handle.name} not ready after {timeout_s:.0f} s: {not_ready_summary(pods)}; "
                "the engine may still be loading (raise target.ready_timeout_s) or never pass its probe"
            )
        handle.pod_restarts = {p["metadata"]["name"]: restarts(p) for p in pods}
        leaders = sorted(p["metadata"]["name"] for p in pods if _role(p) == "leader")
        for forward, pod in zip(handle.forwards, leaders, strict=False):
            forward.pod = pod

    def check_alive(self, deployment: Deployment[KubeHandle]) -> None:
        """Between load points: a pod that restarted or went unready makes the measurement invalid."""
        for handle in deployment.handles:
            for pod in self._pods(handle):
                name = pod["metadata"]["name"]
                if restarts(pod) > handle.pod_restarts.get(name, 0) or not is_ready(pod):
                    problem = pod_problem(pod)
                    raise EngineDied(problem.message if problem else f"pod {name} is no longer ready")

    # -- teardown -----------------------------------------------------------------------------------
    def teardown(self, deployment: Deployment[KubeHandle]) -> None:
        handles = list(deployment.handles)
        for handle in handles:
            for forward in handle.forwards:
                forward.close()
            self.objects.delete_all(handle.objects)
        deadline = time.monotonic() + 120
        for handle in handles:
            while time.monotonic() < deadline:
                try:
                    if not self._pods(handle):
                        break
                except DeployError:
                    break
                time.sleep(_POLL_S)
        self.objects.delete_owner_if_idle()

def pair_label(layout: str) -> str:
    """A pair's layout in object names: `p:tp4+d:tp4` -> `p-tp4-d-tp4`."""
    return layout.replace(":", "-").replace("+", "-")


def selector_labels_of(handle: KubeHandle) -> dict[str, str]:
    meta = handle.objects[0]["metadata"] if handle.objects else {"labels": {}}
    keys = ("app.kubernetes.io/name", "app.kubernetes.io/component")
    return {k: meta["labels"][k] for k in keys if k in meta["labels"]} or {
        "app.kubernetes.io/name": handle.name
    }


def _expected_pods(handle: KubeHandle) -> int:
    for obj in handle.objects:
        if obj["kind"] == "Deployment":
            return int(obj["spec"]["replicas"])
        if obj["kind"] == "LeaderWorkerSet":
            return int(obj["spec"]["replicas"]) * int(obj["spec"]["leaderWorkerTemplate"]["size"])
    return 0


def _role(pod: Obj) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE, ""))


def _handle(deployment: Deployment[KubeHandle]) -> KubeHandle:
    (handle,) = deployment.handles
    return handle


def _health(plan: LaunchPlan) -> str:
    from urllib.parse import urlsplit

    return urlsplit(plan.replicas[0].health_url).path or "/health"


def _wait_health(url: str, deadline: float) -> None:
    """Ready pods answer through the forward; a few tries absorb the forward's first connection."""
    last = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                if resp.status == 200:
                    return
                last = f"HTTP {resp.status}"
        except OSError as exc:
            last = str(exc)
        time.sleep(_POLL_S)
    raise DeployError(f"kubernetes: pods are Ready but {url} does not answer: {last}")

