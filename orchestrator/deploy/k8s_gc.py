"""`orch gc` on Kubernetes: delete what orch runs left in a namespace (all runs, or one).

Every object a sweep applies is labelled `orch.dev/run` and owned by the run's ConfigMap, so deleting
the ConfigMaps is enough on a cluster whose garbage collector runs; the labelled objects are deleted
too, in case their owner references never took.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from orchestrator.compile.k8s import LWS_API
from orchestrator.deploy.k8s_api import LABEL_RUN, UNREACHABLE, api_client, api_error
from orchestrator.spec.targets import KubernetesTarget


def collect_garbage(target: KubernetesTarget, run_id: str | None = None) -> list[str]:
    """Delete what orch runs left in the namespace (all runs, or one): their run ConfigMaps, which own
    every object, and the objects themselves in case their owner references never took. Returns names."""
    from kubernetes import client

    api = api_client(target)
    core: Any = client.CoreV1Api(api)
    apps: Any = client.AppsV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    ns = target.namespace
    selector = f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN
    opts = client.V1DeleteOptions(propagation_policy="Foreground")
    group, version = LWS_API.split("/")
    removed: list[str] = []

    def names(resp: Any) -> list[str]:
        return [item["metadata"]["name"] for item in json.loads(resp.data).get("items") or []]

    kinds: list[tuple[str, Any, Any]] = [
        (
            "deployment",
            lambda: apps.list_namespaced_deployment(ns, label_selector=selector, _preload_content=False),
            lambda n: apps.delete_namespaced_deployment(n, ns, body=opts),
        ),
        (
            "leaderworkerset",
            lambda: custom.list_namespaced_custom_object(
                group, version, ns, "leaderworkersets", label_selector=selector, _preload_content=False
            ),
            lambda n: custom.delete_namespaced_custom_object(
                group, version, ns, "leaderworkersets", n, body=opts
            ),
        ),
        (
            "service",
            lambda: core.list_namespaced_service(ns, label_selector=selector, _preload_content=False),
            lambda n: core.delete_namespaced_service(n, ns, body=opts),
        ),
        (
            "configmap",
            lambda: core.list_namespaced_config_map(ns, label_selector=selector, _preload_content=False),
            lambda n: core.delete_namespaced_config_map(n, ns, body=opts),
        ),
    ]
    from kubernetes.client.exceptions import ApiException

    for kind, lister, deleter in kinds:
        try:
            found = names(lister())
        except ApiException as exc:
            if kind == "leaderworkerset" and exc.status == 404:
                continue  # no LWS CRD on this cluster: nothing of that kind to remove
            raise api_error(exc, f"list {kind}s", ns) from exc
        except UNREACHABLE as exc:
            raise api_error(exc, f"list {kind}s", ns) from exc
        for name in found:
            with contextlib.suppress(ApiException):  # already gone with its owner
                deleter(name)
                removed.append(f"{kind}/{name}")
    return removed
