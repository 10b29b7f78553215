"""One-line reasons from pod status as the kubelet and scheduler report it (shapes from real clusters)."""

from __future__ import annotations

from typing import Any

from orchestrator.deploy.k8s_explain import is_ready, not_ready_summary, pod_problem, restarts


def _pod(status: dict[str, Any], name: str = "orch-1-tp8-0") -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": status}


def _container(**kw: Any) -> dict[str, Any]:
    return {"name": "engine", "image": "vllm/vllm-openai:v0.32.0", "ready": False, "restartCount": 0, **kw}


def test_pending_and_ready_pods_have_no_problem() -> None:
    assert pod_problem(_pod({"phase": "Pending"})) is None
    ready = _pod({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]})
    assert pod_problem(ready) is None and is_ready(ready)
    assert not is_ready(_pod({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}))


def test_unschedulable_uses_the_scheduler_message_and_waits() -> None:
    msg = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg}
    problem = pod_problem(_pod({"phase": "Pending", "conditions": [cond]}))
    assert problem is not None and not problem.fatal
    assert problem.message == f"pod orch-1-tp8-0 is unschedulable: {msg}"
    # Without a message on the condition, the FailedScheduling event says it.
    bare = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    events = [{"reason": "FailedScheduling", "message": "0/4 nodes: 4 node(s) had untolerated taint"}]
    problem = pod_problem(_pod({"conditions": [bare]}), events)
    assert problem is not None and "untolerated taint" in problem.message


def test_image_pull_oom_and_crash_loop_are_fatal() -> None:
    pull = _container(state={"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}})
    problem = pod_problem(_pod({"containerStatuses": [pull]}))
    assert problem is not None and problem.fatal
    assert "cannot pull image vllm/vllm-openai:v0.32.0: Back-off pulling image" in problem.message

    oom = _container(
        restartCount=3,
        state={"waiting": {"reason": "CrashLoopBackOff"}},
        lastState={"terminated": {"reason": "OOMKilled", "exitCode": 137}},
    )
    problem = pod_problem(_pod({"containerStatuses": [oom]}))
    assert problem is not None and problem.fatal and not problem.wants_logs
    assert "OOMKilled (exit 137, 3 restarts)" in problem.message

    crash = _container(
        restartCount=2,
        state={"waiting": {"reason": "CrashLoopBackOff"}},
        lastState={"terminated": {"reason": "Error", "exitCode": 1}},
    )
    problem = pod_problem(_pod({"containerStatuses": [crash]}))
    assert problem is not None and problem.fatal and problem.wants_logs
    assert "keeps crashing (exit 1, 2 restarts)" in problem.message
    assert restarts(_pod({"containerStatuses": [crash, crash]})) == 4


def test_timeout_summary_lists_only_pods_not_ready() -> None:
    ready = _pod({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}, "a")
    loading = _pod({"phase": "Running"}, "b")
    assert not_ready_summary([ready, loading]) == "b (Running, not ready)"
    assert not_ready_summary([]) == "no pods were created"
