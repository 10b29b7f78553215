"""The kubernetes target's writes to the cluster: create and delete each kind of object a layout applies
(Deployment, LeaderWorkerSet, Service, and a pair router's ServiceAccount/Role/RoleBinding), and the
per-run ConfigMap that owns them all, so that deleting it (``orch gc``) removes the run even when orch
died. deploy/k8s.py deploys, waits and tears down through these, and reads pods, events and logs itself.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from orchestrator.compile.k8s import LWS_API, Obj
from orchestrator.deploy.k8s_api import (
    LABEL_RUN,
    LWS_INSTALL,
    REQUEST_TIMEOUT_S,
    UNREACHABLE,
    api_error,
    quantities_as_strings,
    run_object_name,
)
from orchestrator.errors import DeployError


class RunObjects:
    """One run's objects in one namespace, through the typed APIs of one API client."""

    def __init__(self, api: Any, ns: str, run_id: str) -> None:
        from kubernetes import client

        self.ns, self.run_id = ns, run_id
        self.core: Any = client.CoreV1Api(api)
        self.apps: Any = client.AppsV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)
        self.rbac: Any = client.RbacAuthorizationV1Api(api)

    def owner(self) -> Obj:
        """The per-run ConfigMap every object is owned by (get or create); its ownerReference."""
        name = run_object_name(self.run_id)
        body = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": name, "labels": {LABEL_RUN: self.run_id, "app.kubernetes.io/managed-by": "orch"}
            },
            "data": {"run": self.run_id, "note": "delete this ConfigMap to remove every object of the run"},
        }  # fmt: skip
        from kubernetes.client.exceptions import ApiException

        try:
            got = self.core.create_namespaced_config_map(self.ns, body, _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:
            if exc.status != 409:
                raise api_error(exc, "create configmaps", self.ns) from exc
            got = self.core.read_namespaced_config_map(name, self.ns, _request_timeout=REQUEST_TIMEOUT_S)
        except UNREACHABLE as exc:
            raise api_error(exc, "create configmaps", self.ns) from exc
        return {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": got.metadata.uid}

    def create(self, obj: Obj) -> None:
        from kubernetes.client.exceptions import ApiException

        kind = obj["kind"]
        obj = quantities_as_strings(obj)
        try:
            if kind == "Deployment":
                self.apps.create_namespaced_deployment(self.ns, obj, _request_timeout=REQUEST_TIMEOUT_S)
            elif kind == "Service":
                self.core.create_namespaced_service(self.ns, obj, _request_timeout=REQUEST_TIMEOUT_S)
            elif kind == "LeaderWorkerSet":
                group, version = LWS_API.split("/")
                self.custom.create_namespaced_custom_object(
                    group, version, self.ns, "leaderworkersets", obj, _request_timeout=REQUEST_TIMEOUT_S
                )
            elif kind == "ServiceAccount":  # a pair's router that discovers its pools (SGLang's)
                self.core.create_namespaced_service_account(self.ns, obj, _request_timeout=REQUEST_TIMEOUT_S)
            elif kind == "Role":
                self.rbac.create_namespaced_role(self.ns, obj, _request_timeout=REQUEST_TIMEOUT_S)
            elif kind == "RoleBinding":
                self.rbac.create_namespaced_role_binding(self.ns, obj, _request_timeout=REQUEST_TIMEOUT_S)
            else:
                raise DeployError(f"kubernetes target: cannot apply a {kind}")
        except ApiException as exc:
            if kind == "LeaderWorkerSet" and exc.status == 404:
                raise DeployError(
                    f"kubernetes: the cluster has no LeaderWorkerSet API ({LWS_API}), which multi-node "
                    f"layouts need: {LWS_INSTALL}"
                ) from exc
            if exc.status == 409:
                raise DeployError(
                    f"kubernetes: {kind} {obj['metadata']['name']} already exists in {self.ns} (left by an "
                    "interrupted run?); remove it with `orch gc`"
                ) from exc
            raise api_error(exc, f"create {kind.lower()}s", self.ns) from exc
        except UNREACHABLE as exc:
            raise api_error(exc, f"create {kind.lower()}s", self.ns) from exc

    def delete_all(self, objects: list[Obj]) -> None:
        """Delete each object, last created first; one that fails does not stop the rest (what is left is
        still owned by the run's ConfigMap, which `orch gc` deletes)."""
        from kubernetes import client

        opts = client.V1DeleteOptions(propagation_policy="Foreground")
        for obj in reversed(objects):
            name, kind = obj["metadata"]["name"], obj["kind"]
            with contextlib.suppress(Exception):
                if kind == "Deployment":
                    self.apps.delete_namespaced_deployment(
                        name, self.ns, body=opts, _request_timeout=REQUEST_TIMEOUT_S
                    )
                elif kind == "Service":
                    self.core.delete_namespaced_service(
                        name, self.ns, body=opts, _request_timeout=REQUEST_TIMEOUT_S
                    )
                elif kind == "LeaderWorkerSet":
                    group, version = LWS_API.split("/")
                    self.custom.delete_namespaced_custom_object(
                        group, version, self.ns, "leaderworkersets", name, body=opts,
                        _request_timeout=REQUEST_TIMEOUT_S,
                    )  # fmt: skip
                elif kind == "ServiceAccount":
                    self.core.delete_namespaced_service_account(
                        name, self.ns, body=opts, _request_timeout=REQUEST_TIMEOUT_S)
                elif kind == "Role":
                    self.rbac.delete_namespaced_role(
                        name, self.ns, body=opts, _request_timeout=REQUEST_TIMEOUT_S)
                elif kind == "RoleBinding":
                    self.rbac.delete_namespaced_role_binding(
                        name, self.ns, body=opts, _request_timeout=REQUEST_TIMEOUT_S)

    def delete_owner_if_idle(self) -> None:
        """Delete the run's ConfigMap once the run has no Deployment left: the run's other layouts are
        owned by it too."""
        selector = f"{LABEL_RUN}={self.run_id}"
        with contextlib.suppress(Exception):
            left = self.apps.list_namespaced_deployment(
                self.ns, label_selector=selector, _preload_content=False
            )
            if json.loads(left.data).get("items"):
                return
            self.core.delete_namespaced_config_map(run_object_name(self.run_id), self.ns)
