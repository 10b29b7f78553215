"""Layout + LaunchPlan -> values for the chart in helm/, which then renders the objects of compile.k8s.

The values carry the pod-side command and env already adapted (compile.k8s_argv), so the chart holds no
engine knowledge: one template serves vLLM and SGLang. A test renders the chart with a real Helm and checks
the result equals ``compile.k8s.build_objects`` for the same plan.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from orchestrator.compile.k8s import (
    K8sOptions,
    is_multi_node,
    layout_label,
    plain_env,
    replica_probe,
    resources,
    secret_names,
)
from orchestrator.compile.k8s_argv import gpus_per_pod, nodes_per_replica, plan_commands
from orchestrator.engines.base import LaunchPlan
from orchestrator.errors import SpecError
from orchestrator.layout import Layout

CHART_NAME = "orch-engine"


def helm_values(plan: LaunchPlan, layout: Layout, opts: K8sOptions) -> dict[str, Any]:
    """The chart's values for one layout; its objects go to opts.namespace whatever `helm --namespace`
    says (the release's own record follows helm's flag: pass the same one)."""
    if layout != plan.layout or len(plan.replicas) != layout.replicas:
        raise SpecError(
            f"launch plan is for {plan.layout!s} with {len(plan.replicas)} replicas, not layout {layout}; "
            "build the plan from the same layout"
        )
    leader, worker = plan_commands(plan.replicas, opts.container_port)
    rep = plan.replicas[0]
    probe = replica_probe(rep)
    pod_resources = resources(gpus_per_pod(rep), opts)
    values: dict[str, Any] = {
        "name": opts.name,
        "namespace": opts.namespace,  # the chart falls back to the release's namespace when empty
        "image": opts.image,
        "imagePullPolicy": opts.image_pull_policy,
        "engine": plan.engine,
        "layout": layout_label(str(plan.layout)),
        "specHash": opts.spec_hash or "",
        "extraLabels": dict(opts.extra_labels),
        "replicas": layout.replicas,
        "nodesPerReplica": nodes_per_replica(rep),
        "gpusPerPod": gpus_per_pod(rep),
        "containerPort": opts.container_port,
        "healthPath": probe.path,
        "leader": {"command": list(leader.argv), "env": plain_env(leader, opts)},
        "worker": {
            "command": list(worker.argv) if worker else [],
            "env": plain_env(worker, opts) if worker else [],
        },
        "modelCache": {"claimName": opts.model_cache_pvc or "", "mountPath": opts.model_cache_mount},
        # engine.env_from_secret may name the HF_TOKEN Secret itself (then it is in the env above).
        "hfToken": {
            "secretName": "" if "HF_TOKEN" in secret_names(leader) else opts.hf_token_secret or "",
            "key": opts.hf_token_key,
        },
        "shmSize": opts.shm_size,
        "gpuProduct": opts.gpu_product or "",
        "nodeSelector": dict(opts.node_selector),
        "tolerations": [dict(t) for t in opts.tolerations],
        "serviceAccountName": opts.service_account or "",
        "probes": {
            "periodSeconds": opts.probe_period_s,
            "timeoutSeconds": probe.timeout_s,
            "startupFailureThreshold": math.ceil(opts.startup_budget_s / opts.probe_period_s),
            "readinessFailureThreshold": opts.readiness_failure_threshold,
        },
        "service": {"type": opts.service_type, "port": opts.service_port},
        # The chart's extension values (extraEnv, affinity, ...) stay at their empty defaults: orch sets
        # what it measured, a platform team adds its cluster's specifics on top.
        "resources": {"requests": pod_resources.get("requests", {}),
                      "extraLimits": dict(opts.rdma_resources)},
    }
    # The chart picks the kind from nodesPerReplica; keep the two decisions from drifting apart.
    assert (values["nodesPerReplica"] > 1) == is_multi_node(plan)
    return values


def pair_helm_values(plan: LaunchPlan, opts: K8sOptions) -> dict[str, Any]:
    """A prefill/decode pair's values: `units`, one per pool and one for the router, each what
    `helm_values` gives one layout (the chart renders every unit as it renders one layout; the router
    unit has no GPU and, for SGLang, a ServiceAccount allowed to read pods: `podReader`)."""
    from orchestrator.compile.k8s_argv import PodCommand
    from orchestrator.compile.k8s_pd import (
        ROUTER_PROBE_TIMEOUT_S,
        pod_annotations,
        pool_options,
        pool_role,
        router_command,
        router_options,
    )

    units = []
    for pool in plan.pools:
        role, layout = pool_role(pool), pool.layout
        if not isinstance(layout, Layout):
            raise SpecError(f"launch plan {plan.name}: its {role} pool's plan is not one layout's")
        values = helm_values(pool, layout, pool_options(opts, role))
        values["podAnnotations"] = pod_annotations(plan, role, opts)
        units.append(values)
    ropts = router_options(opts, plan.engine)
    reader = plan.engine == "sglang"
    if reader:
        ropts = replace(ropts, service_account=ropts.name)
    cmd = PodCommand(router_command(plan, opts), ())
    router = {
        "name": ropts.name, "namespace": opts.namespace, "image": ropts.image,
        "imagePullPolicy": ropts.image_pull_policy,
        "engine": plan.engine, "layout": layout_label(str(plan.layout)), "specHash": opts.spec_hash or "",
        "extraLabels": dict(ropts.extra_labels), "replicas": 1, "nodesPerReplica": 1, "gpusPerPod": 0,
        "containerPort": opts.container_port, "healthPath": "/health",
        "leader": {"command": list(cmd.argv), "env": plain_env(cmd, ropts)},
        "worker": {"command": [], "env": []},
        "modelCache": {"claimName": "", "mountPath": ropts.model_cache_mount},
        "hfToken": {"secretName": "", "key": ropts.hf_token_key},
        "shmSize": ropts.shm_size, "gpuProduct": ropts.gpu_product or "",
        "nodeSelector": dict(ropts.node_selector), "tolerations": [dict(t) for t in ropts.tolerations],
        "serviceAccountName": ropts.service_account or "", "podReader": reader,
        "probes": {"periodSeconds": ropts.probe_period_s, "timeoutSeconds": ROUTER_PROBE_TIMEOUT_S,
                   "startupFailureThreshold": math.ceil(ropts.startup_budget_s / ropts.probe_period_s),
                   "readinessFailureThreshold": ropts.readiness_failure_threshold},
        "service": {"type": ropts.service_type, "port": ropts.service_port},
        "resources": {"requests": resources(0, ropts).get("requests", {}), "extraLimits": {}},
    }
    return {"units": [*units, router]}
