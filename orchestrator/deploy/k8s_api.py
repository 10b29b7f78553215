"""What the kubernetes target and `orch gc` share: the API client, one-line API errors, object names.

Through the official ``kubernetes`` client, imported lazily inside each function.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from orchestrator.compile.k8s import LABEL_PREFIX, Obj
from orchestrator.errors import DeployError, SpecError
from orchestrator.layout import Layout
from orchestrator.spec.targets import KubernetesTarget

LABEL_RUN = LABEL_PREFIX + "run"
LWS_INSTALL = (
    "install the LeaderWorkerSet controller (kubectl apply --server-side -f "
    "https://github.com/kubernetes-sigs/lws/releases/download/v0.6.2/manifests.yaml) "
    "or sweep layouts that fit one node"
)
REQUEST_TIMEOUT_S = 30
# What a request raises when the API server cannot be reached (urllib3 wraps socket errors in HTTPError).
UNREACHABLE: tuple[type[Exception], ...] = (OSError,)
with contextlib.suppress(ImportError):
    import urllib3.exceptions

    UNREACHABLE = (OSError, urllib3.exceptions.HTTPError)


def object_name(run_id: str, layout: Layout | str) -> str:
    """A DNS label unique per run and layout: the run id's last digits keep two sweeps apart."""
    tail = "".join(ch for ch in run_id if ch.isalnum())[-6:].lower() or "run"
    return f"orch-{tail}-{layout}".lower()


def run_object_name(run_id: str) -> str:
    return "orch-run-" + "".join(ch if ch.isalnum() else "-" for ch in run_id.lower()).strip("-")


def api_client(target: KubernetesTarget) -> Any:
    """A client from the kubeconfig (KUBECONFIG or ~/.kube/config, target.context), or in-cluster config."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    # The client is used untyped: orch hands it plain dicts (the objects compile.k8s builds), which it
    # accepts at run time although its annotations name model classes.
    cfg: Any = config

    kubeconfig = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
            cfg.load_incluster_config()
            return client.ApiClient()
        return cfg.new_client_from_config(config_file=kubeconfig, context=target.context)
    except (ConfigException, OSError) as exc:
        where = f"context {target.context!r} in " if target.context else ""
        raise SpecError(
            f"target.kind kubernetes: cannot load {where}kubeconfig {kubeconfig} ({exc}); set KUBECONFIG or "
            "target.context, or run orch inside the cluster"
        ) from exc


def api_error(exc: Exception, doing: str, namespace: str) -> DeployError:
    """One line for an ApiException or a connection failure, naming the verb and resource when forbidden."""
    status = getattr(exc, "status", None)
    body: Obj = {}
    with contextlib.suppress(Exception):
        body = json.loads(getattr(exc, "body", "") or "{}")
    message = body.get("message") or getattr(exc, "reason", None) or str(exc).splitlines()[0]
    if status == 403:
        return DeployError(
            f"kubernetes: not allowed to {doing} in namespace {namespace}: {message}; grant that verb and "
            "resource to orch's service account (k8s/rbac.yaml)"
        )
    if status is None:
        return DeployError(f"kubernetes: API server unreachable while trying to {doing}: {message}")
    return DeployError(f"kubernetes: {doing} failed ({status}): {message}")


def quantities_as_strings(obj: Obj) -> Obj:
    """A copy whose container resource quantities are strings ("8", not 8): the API takes both, but the
    kubernetes client (v37) checks typed bodies and wants strings, as Quantity is in the API schema."""
    out: Obj = json.loads(json.dumps(obj))

    def fix(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("limits", "requests") and isinstance(value, dict):
                    node[key] = {k: str(v) for k, v in value.items()}
                else:
                    fix(value)
        elif isinstance(node, list):
            for item in node:
                fix(item)

    fix(out)
    return out
