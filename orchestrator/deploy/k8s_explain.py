"""Why a pod is not ready, in one line, from its status and events (plain dicts as the API returns them).

The kubelet and the scheduler already say what went wrong; this only finds it and says it once: the
scheduler's Unschedulable message, image pull failures, OOMKilled, crash loops (with the last log lines
added by the caller), or a pod that runs but never passes readiness.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
_CONFIG_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})


@dataclass(frozen=True)
class PodProblem:
    pod: str
    message: str
    # Fatal: waiting longer will not help (a bad image, a crash loop); otherwise it may still resolve
    # (a cluster autoscaler adding a GPU node), so the caller gives it a grace period.
    fatal: bool
    wants_logs: bool = False


def is_ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def restarts(pod: Obj) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses)


def pod_problem(pod: Obj, events: Sequence[Obj] = ()) -> PodProblem | None:
    """What keeps the pod from running, or None while it is simply on its way (or ready)."""
    name = (pod.get("metadata") or {}).get("name", "?")
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            message = cond.get("message") or _last_event(events, "FailedScheduling") or "no node fits it"
            return PodProblem(name, f"pod {name} is unschedulable: {message}", fatal=False)
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        waiting = state.get("waiting") or {}
        reason = waiting.get("reason", "")
        last = (cs.get("lastState") or {}).get("terminated") or {}
        if reason in _PULL_REASONS:
            detail = waiting.get("message") or _last_event(events, "Failed") or reason
            return PodProblem(
                name, f"pod {name} cannot pull image {cs.get('image', '?')}: {detail}", fatal=True
            )
        if reason in _CONFIG_REASONS:
            detail = waiting.get("message", reason)
            return PodProblem(name, f"pod {name} cannot start its container: {detail}", fatal=True)
        terminated = state.get("terminated") or last
        if terminated.get("reason") == "OOMKilled":
            return PodProblem(
                name,
                f"pod {name} was OOMKilled (exit {terminated.get('exitCode', 137)}, "
                f"{cs.get('restartCount', 0)} restarts): the engine needs more host memory than the pod "
                "may use; raise the memory limit or request, or lower the engine's CPU-side caches",
                fatal=True,
            )
        if reason == "CrashLoopBackOff" or (terminated and int(cs.get("restartCount") or 0) > 0):
            code = terminated.get("exitCode", "?")
            return PodProblem(
                name,
                f"pod {name} keeps crashing (exit {code}, {cs.get('restartCount', 0)} restarts)",
                fatal=True,
                wants_logs=True,
            )
    return None


def not_ready_summary(pods: Sequence[Obj]) -> str:
    """For a timeout: each pod that is not ready with its phase, e.g. 'x-0 (Running, not ready)'."""
    parts = []
    for pod in pods:
        if is_ready(pod):
            continue
        name = (pod.get("metadata") or {}).get("name", "?")
        phase = (pod.get("status") or {}).get("phase", "Unknown")
        parts.append(f"{name} ({phase}, not ready)")
    return ", ".join(parts) or "no pods were created"


def _last_event(events: Sequence[Obj], reason: str) -> str | None:
    for event in reversed(events):
        if event.get("reason") == reason and event.get("message"):
            return str(event["message"])
    return None
