"""Turn a LaunchPlan's per-host argv and env into what a pod runs.

On hosts, orch pins GPUs with CUDA_VISIBLE_DEVICES, gives every replica on a node its own port block and
names the leader by its address. In a pod, the device plugin picks the GPUs, every pod has its own network
namespace (so every replica uses the same container port), and the leader's address is only known at run
time: LeaderWorkerSet injects it as LWS_LEADER_ADDRESS, and Kubernetes expands ``$(VAR)`` in a container's
command from its environment.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from urllib.parse import urlsplit

from orchestrator.engines.base import PORT_STRIDE, ProcessSpec, ReplicaPlan, SecretEnv
from orchestrator.errors import SpecError

LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
WORKER_INDEX = "$(LWS_WORKER_INDEX)"
BIND_ALL = "0.0.0.0"
LOOPBACK = "127.0.0.1"

# The device plugin sets the visible GPUs in a pod; a host-side pin would name GPUs the pod may not have.
DROPPED_ENV = frozenset({"CUDA_VISIBLE_DEVICES"})
BIND_FLAGS = frozenset({"--host"})
# Env vars that name the process's own address: in a pod that is the pod IP, known only at run time
# (vLLM's NIXL side channel too: the decode side reads KV from the address the prefill side names).
OWN_ADDRESS_ENV = frozenset({"VLLM_HOST_IP", "SGLANG_HOST_IP", "HOST_IP", "VLLM_NIXL_SIDE_CHANNEL_HOST"})
# Env vars holding a port of the replica's block: moved with it, as port flags are.
PORT_ENV = frozenset({"VLLM_NIXL_SIDE_CHANNEL_PORT"})
RANK_FLAGS = frozenset({"--node-rank"})


@dataclass(frozen=True)
class PodCommand:
    """What one pod template runs: argv and plain env, identical for every pod made from the template."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    pod_ip_env: tuple[str, ...] = ()  # names set from the downward API (status.podIP)
    secret_env: tuple[SecretEnv, ...] = ()  # set from Secrets (valueFrom.secretKeyRef), never by value


def health_path(replica: ReplicaPlan) -> str:
    """The path of the engine's health URL (``/health``), which the probes call."""
    path = urlsplit(replica.health_url).path
    return path or "/"


def probe_timeout_s(replica: ReplicaPlan) -> int:
    """Whole seconds one probe may wait for the health URL: the engine's own answer time, rounded up."""
    return max(1, math.ceil(replica.health_timeout_s))


def _leader_host_port(replica: ReplicaPlan) -> tuple[str, int]:
    parts = urlsplit(replica.health_url)
    if parts.hostname is None or parts.port is None:
        raise SpecError(
            f"launch plan: health_url {replica.health_url!r} needs a host and a port, e.g. http://h:8000/health"
        )
    return parts.hostname, parts.port


def _is_port_flag(flag: str) -> bool:
    return flag == "--port" or flag.endswith("-port")


class _Rewriter:
    """Rewrites one replica's host-side values to pod-side ones."""

    def __init__(self, replica: ReplicaPlan, container_port: int, multi_node: bool) -> None:
        self.leader_host, self.base_port = _leader_host_port(replica)
        self.container_port = container_port
        # Single-node pods reach their own ranks on loopback; multi-node pods reach the leader by name.
        self.leader = LEADER_ADDRESS if multi_node else LOOPBACK

    def port(self, text: str) -> str:
        if not text.isdigit():
            return text
        offset = int(text) - self.base_port
        # Ports inside the replica's block keep their offset (http, then rpc/master, then ray).
        return str(self.container_port + offset) if 0 <= offset < PORT_STRIDE else text

    def address(self, text: str) -> str:
        if text == self.leader_host:
            return self.leader
        host, sep, port = text.rpartition(":")
        if sep and host == self.leader_host and port.isdigit():
            return f"{self.leader}:{self.port(port)}"
        return text

    def value(self, flag: str, text: str, is_worker: bool) -> str:
        if flag in BIND_FLAGS:
            return BIND_ALL
        if flag in RANK_FLAGS and is_worker:
            # One worker template serves every non-leader pod of a group; the rank comes from LWS.
            return WORKER_INDEX
        if _is_port_flag(flag):
            return self.port(text)
        return self.address(text)


def _escape(token: str) -> str:
    # Kubernetes would expand a literal "$(NAME)" in user argv; "$$" keeps it literal.
    return token.replace("$(", "$$(")


def pod_argv(argv: tuple[str, ...], rw: _Rewriter, is_worker: bool) -> tuple[str, ...]:
    out: list[str] = []
    flag = ""
    for raw in argv:
        token = _escape(raw)
        if token.startswith("--") and "=" in token:
            name, _, value = token.partition("=")
            out.append(f"{name}={rw.value(name, value, is_worker)}")
            flag = ""
        elif token.startswith("-") and not token.lstrip("-").isdigit():
            out.append(token)
            flag = token
        else:
            out.append(rw.value(flag, token, is_worker) if flag else token)
            flag = ""
    return tuple(out)


def pod_command(proc: ProcessSpec, rw: _Rewriter, is_worker: bool) -> PodCommand:
    env = tuple(
        (k, rw.port(v) if k in PORT_ENV else rw.address(_escape(v)))
        for k, v in sorted(proc.env) if k not in DROPPED_ENV | OWN_ADDRESS_ENV
    )
    own = tuple(sorted(k for k, _ in proc.env if k in OWN_ADDRESS_ENV))
    return PodCommand(pod_argv(proc.argv, rw, is_worker), env, own, proc.secret_env)


def _one_per_node(replica: ReplicaPlan) -> list[ProcessSpec]:
    by_node: dict[int, ProcessSpec] = {}
    for proc in replica.processes:
        if proc.node_index in by_node:
            raise SpecError(
                f"launch plan: replica has two processes on node {proc.node_index}; a pod runs one engine "
                "process per node, so give the engine one process per node"
            )
        by_node[proc.node_index] = proc
    return [by_node[n] for n in sorted(by_node)]


def nodes_per_replica(replica: ReplicaPlan) -> int:
    return len({p.node_index for p in replica.processes})


def gpus_per_pod(replica: ReplicaPlan) -> int:
    counts = {len(p.gpu_ids) for p in replica.processes}
    if len(counts) != 1:
        raise SpecError(
            f"launch plan: the nodes of a replica use different GPU counts {sorted(counts)}; "
            "pods of one template must ask for the same number of GPUs"
        )
    return counts.pop()


def replica_commands(replica: ReplicaPlan, container_port: int) -> tuple[PodCommand, PodCommand | None]:
    """(leader command, worker command or None for single-node replicas)."""
    procs = _one_per_node(replica)
    multi = len(procs) > 1
    rw = _Rewriter(replica, container_port, multi)
    leader = pod_command(procs[0], rw, False)
    if not multi:
        return leader, None
    cmds = [pod_command(p, rw, True) for p in procs[1:]]
    if len(set(cmds)) == 1:
        return leader, cmds[0]
    shell = _linear_worker_command(cmds)
    if shell is None:
        raise SpecError(
            "launch plan: worker nodes of a replica differ beyond --node-rank, ports, addresses and "
            "per-node rank offsets; one LeaderWorkerSet worker template cannot run them; "
            "use the Ray target for this layout"
        )
    return leader, shell


def _linear_worker_command(cmds: list[PodCommand]) -> PodCommand | None:
    """One shell command for workers whose argv differ only in integers linear in the worker index.

    vLLM's data-parallel start rank is such a value (8, 16, ... for workers 1, 2, ...); Kubernetes cannot do
    arithmetic in ``$(VAR)``, so the worker runs ``sh -c 'exec ... $((LWS_WORKER_INDEX * 8 + 0))'``.
    """
    if len({(c.env, c.pod_ip_env, c.secret_env) for c in cmds}) != 1:
        return None
    if len({len(c.argv) for c in cmds}) != 1:
        return None
    words: list[str] = []
    for column in zip(*(c.argv for c in cmds), strict=True):
        if len(set(column)) == 1:
            words.append(shlex.quote(column[0]))
            continue
        if not all(v.lstrip("-").isdigit() for v in column):
            return None
        values = [int(v) for v in column]
        step = values[1] - values[0]
        # Worker i (1-based in the group) holds values[i - 1] = step * i + base.
        base = values[0] - step
        if any(v != step * i + base for i, v in enumerate(values, start=1)):
            return None
        # "$$" reaches the shell as "$": Kubernetes would otherwise try to expand "$((" itself.
        words.append(f'"$$((LWS_WORKER_INDEX * {step} + {base}))"')
    argv = ("/bin/sh", "-c", "exec " + " ".join(words))
    return PodCommand(argv, cmds[0].env, cmds[0].pod_ip_env, cmds[0].secret_env)


def plan_commands(
    replicas: tuple[ReplicaPlan, ...], container_port: int
) -> tuple[PodCommand, PodCommand | None]:
    """The commands shared by every replica; replicas that differ after adaptation cannot share a template."""
    if not replicas:
        raise SpecError("launch plan: no replicas; the layout must have at least x1")
    first = replica_commands(replicas[0], container_port)
    for i, rep in enumerate(replicas[1:], start=1):
        if replica_commands(rep, container_port) != first:
            raise SpecError(
                f"launch plan: replica {i} runs a different command than replica 0 once ports and GPUs "
                "are adapted for pods; replicas of one Deployment must be identical"
            )
    return first
