"""Engine-neutral launch types, the Engine protocol, placement of replicas on nodes, passthrough checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from orchestrator.catalog.types import GPUSpec, ModelConfig
from orchestrator.engines.settings import EngineSettings, SettingsRequest
from orchestrator.errors import SpecError
from orchestrator.layout import Layout
from orchestrator.spec.checks import ENV_NAME, is_host

if TYPE_CHECKING:
    from orchestrator.candidate import Candidate, DisaggCandidate
    from orchestrator.disagg import DisaggLayout
    from orchestrator.engines.sim import SimOptions

Role = Literal["leader", "worker", "headless"]
# What a replica is in its deployment: an ordinary server ("serve"), a server of a prefill/decode
# pair's pool, or the router in front of a pair (the only one of those clients talk to).
ReplicaRole = Literal["serve", "prefill", "decode", "router"]
CLIENT_ROLES = ("serve", "router")

# Ports used per replica slot on one node: http = base + stride*slot, then +1 (rpc/master), +2 (ray).
PORT_STRIDE = 10


@dataclass(frozen=True)
class Placement:
    """Where a layout runs: host addresses (index 0 first), accelerators per node, the first port."""

    nodes: tuple[str, ...] = ("127.0.0.1",)
    gpus_per_node: int = 8
    base_port: int = 8000
    on_cpu: bool = False
    bind_host: str = "0.0.0.0"
    cpu_cores_per_node: int = 0  # on CPU: cores to split over local ranks; 0 = one core per rank
    # Layouts side by side (deploy/packing.py): per node of `nodes`, the GPU ids this layout may use
    # (none: the node is not its); empty: every GPU of every node.
    usable_gpus: tuple[tuple[int, ...], ...] = ()

    def node_gpus(self, node: int) -> tuple[int, ...]:
        """The GPU ids of node `node` (an index into `nodes`) this layout may use, ascending."""
        return self.usable_gpus[node] if self.usable_gpus else tuple(range(self.gpus_per_node))

    def __post_init__(self) -> None:
        if not self.nodes:
            raise SpecError("placement: at least one node address is needed")
        for node in (*self.nodes, self.bind_host):
            # Node names reach argv, generated scripts and their comments: a host name or an IP only.
            if not is_host(node):
                raise SpecError(
                    f"node address {node!r}: not a host name or IP address (e.g. 10.0.0.2, gpu-node-1)"
                )
        if self.gpus_per_node < 1:
            raise SpecError(f"placement: gpus_per_node must be >= 1, got {self.gpus_per_node}")
        if not 1 <= self.base_port <= 65535 - PORT_STRIDE:
            raise SpecError(f"placement: base_port {self.base_port} out of range")
        if self.usable_gpus and (
            len(self.usable_gpus) != len(self.nodes)
            or any(list(ids) != sorted(set(ids)) or any(not 0 <= g < self.gpus_per_node for g in ids)
                   for ids in self.usable_gpus)
        ):
            raise SpecError(
                f"placement: usable_gpus {self.usable_gpus} must list, for each of the {len(self.nodes)} "
                f"nodes, ascending GPU ids below {self.gpus_per_node}"
            )


@dataclass(frozen=True)
class SecretEnv:
    """An environment variable whose value is a secret, by reference only: plans, the store, scripts and
    manifests carry this, never the value, which is read where the process starts."""

    name: str  # the variable the engine sees, e.g. HF_TOKEN
    from_env: str  # local, Ray, scripts: the variable of orch's process (or the node's shell) holding it
    secret: str | None = None  # Kubernetes: the Secret's name (valueFrom.secretKeyRef)
    key: str = ""  # Kubernetes: the key in that Secret

    def value(self, environ: Mapping[str, str]) -> str:
        """The value, read at deploy time from environ (orch's own environment)."""
        found = environ.get(self.from_env)
        if found is None:
            raise SpecError(
                f"engine.env_from_secret.{self.name}: orch's environment has no {self.from_env}; "
                f"export {self.from_env}=... before running (the value is never stored)"
            )
        return found

    def to_dict(self) -> dict[str, Any]:
        return {"env": self.from_env, "secret": self.secret, "key": self.key}


def secret_values(secrets: tuple[SecretEnv, ...], environ: Mapping[str, str]) -> dict[str, str]:
    """{name: value} for a process's environment; the result must go nowhere but that environment."""
    return {s.name: s.value(environ) for s in secrets}


@dataclass(frozen=True)
class ProcessSpec:
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    node_index: int = 0
    gpu_ids: tuple[int, ...] = ()
    ports: tuple[int, ...] = ()
    role: Role = "leader"
    secret_env: tuple[SecretEnv, ...] = ()

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def to_dict(self) -> dict[str, Any]:
        return {
            "argv": list(self.argv),
            "env": dict(self.env),
            "secret_env": {s.name: s.to_dict() for s in self.secret_env},
            "node_index": self.node_index,
            "gpu_ids": list(self.gpu_ids),
            "ports": list(self.ports),
            "role": self.role,
        }


@dataclass(frozen=True)
class ReplicaPlan:
    processes: tuple[ProcessSpec, ...]
    health_url: str
    openai_base_url: str
    # How long one health call may take before it counts as failed (Kubernetes probes' timeoutSeconds).
    health_timeout_s: float = 5.0
    role: ReplicaRole = "serve"

    @property
    def serves_clients(self) -> bool:
        """Whether clients send requests here (an engine, or a pair's router), not to a pool behind it."""
        return self.role in CLIENT_ROLES

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "processes": [p.to_dict() for p in self.processes],
            "health_url": self.health_url,
            "openai_base_url": self.openai_base_url,
            "health_timeout_s": self.health_timeout_s,
        }
        if self.role != "serve":
            out["role"] = self.role
        return out


@dataclass(frozen=True)
class LaunchPlan:
    """How to start one candidate: its processes per replica. It carries the candidate itself, so a
    target reads the parsed layout and settings instead of re-parsing a string.

    A prefill/decode candidate's plan holds every replica of both pools (role prefill / decode) and the
    router (role router) in `replicas`, and each pool's own plan in `pools` (what per-pool objects,
    such as one Deployment per pool, are built from). A target starts and health-checks them all;
    clients talk to the router only."""

    engine: str
    candidate: Candidate | DisaggCandidate
    replicas: tuple[ReplicaPlan, ...]
    pools: tuple[LaunchPlan, ...] = ()

    @property
    def layout(self) -> Layout | DisaggLayout:
        return self.candidate.layout

    @property
    def name(self) -> str:
        """The candidate's name: what logs, process names and work directories are called."""
        return self.candidate.name

    @property
    def router(self) -> ReplicaPlan | None:
        return next((r for r in self.replicas if r.role == "router"), None)

    def replica_gpus(self, index: int) -> int:
        """The GPUs replica `index` holds: its pool's replica size (a router holds none)."""
        rep = self.replicas[index]
        if rep.role == "router":
            return 0
        for pool in self.pools:
            if rep in pool.replicas:
                return pool.replica_gpus(pool.replicas.index(rep))
        return _single(self.candidate).layout.gpus_per_replica

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "engine": self.engine,
            "layout": str(self.candidate.layout),
            "candidate": self.candidate.name,
        }
        if self.pools:  # a prefill/decode pair: each pool's layout and settings
            out["pools"] = {
                (p.replicas[0].role if p.replicas else str(i)): {
                    "layout": str(p.candidate.layout), "replicas": len(p.replicas),
                    "engine_settings": _single(p.candidate).settings.to_dict()}
                for i, p in enumerate(self.pools)}
        else:
            out["engine_settings"] = _single(self.candidate).settings.to_dict()
        out["replicas"] = [r.to_dict() for r in self.replicas]
        return out


def _single(candidate: Candidate | DisaggCandidate) -> Candidate:
    """A one-pool candidate (a pair's plan has one for each pool in `pools`)."""
    from orchestrator.candidate import Candidate  # engines load before candidates do

    if not isinstance(candidate, Candidate):
        raise TypeError(f"{candidate}: a prefill/decode pair has no single layout; use its pools")
    return candidate


@dataclass(frozen=True)
class EngineOptions:
    model: str
    served_model_name: str | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    enforce_eager: bool = False
    extra_args: tuple[str, ...] = ()
    num_redundant_experts: int = 0
    # Routed experts of the model (0: dense, or not known): decides what dp means on SGLang and lets the
    # EPLB check count physical experts as the engines do.
    num_routed_experts: int = 0
    executor: Literal["mp", "ray"] = "mp"
    a2a_backend: str | None = None  # vLLM --all2all-backend / SGLang --moe-a2a-backend
    extra_env: tuple[tuple[str, str], ...] = field(default=())
    secret_env: tuple[SecretEnv, ...] = ()  # engine.env_from_secret: references, never values
    # sim only: the model shapes and hardware the simulated server models.
    sim: SimOptions | None = None

    def __post_init__(self) -> None:
        if not self.model:
            raise SpecError("engine options: model is empty")
        if self.num_redundant_experts < 0:
            raise SpecError("engine options: num_redundant_experts must be >= 0")
        if self.num_routed_experts < 0:
            raise SpecError("engine options: num_routed_experts must be >= 0")
        if self.executor not in ("mp", "ray"):
            raise SpecError(f"engine options: executor must be 'mp' or 'ray', got {self.executor!r}")
        names = [k for k, _ in self.extra_env] + [s.name for s in self.secret_env]
        for name in names + [s.from_env for s in self.secret_env]:
            # Names reach generated shell scripts unquoted (`NAME=value cmd`): identifiers only.
            if not ENV_NAME.fullmatch(name):
                raise SpecError(f"engine env: {name!r} is not a variable name; use letters, digits and '_'")


class Engine(Protocol):
    """One serving engine: its settings rules, its limits, and its launch command."""

    name: str
    version: str  # the release whose flags and defaults this module follows
    simulated: bool  # True for the simulated engine: no weights, no devices, a simulated clock
    metrics: Mapping[str, str]  # its Prometheus names -> the fields orch reads (loadgen/engine_metrics.py)

    def resolve_settings(self, request: SettingsRequest, gpu: GPUSpec, model: ModelConfig) -> EngineSettings:
        """The request where it says something, else this engine's own default for the GPU and version."""
        ...

    def unsupported(self, layout: Layout, placement: Placement) -> list[str]:
        """Reasons it cannot serve this layout here (empty: it can)."""
        ...

    def compile_problems(self, layout: Layout, placement: Placement) -> list[str]:
        """Reasons no valid launch command exists (it may compile what it cannot serve here)."""
        ...

    def warnings(self, layout: Layout, placement: Placement) -> list[str]:
        """It compiles, but will not serve as expected (printed, not fatal)."""
        ...

    def launch_plan(self, candidate: Candidate, options: EngineOptions, placement: Placement) -> LaunchPlan:
        """Argv and environment per process, health and OpenAI URLs per replica; every setting stated."""
        ...


# Flags the layout and placement own; an extra-args passthrough must not set them.
RESERVED_FLAGS = frozenset(
    {
        "-tp", "--tensor-parallel-size", "-pp", "--pipeline-parallel-size", "-dp",
        "--data-parallel-size", "--data-parallel-size-local", "--data-parallel-address",
        "--data-parallel-rpc-port", "--data-parallel-start-rank", "--data-parallel-backend",
        "--headless", "--enable-expert-parallel", "--distributed-executor-backend",
        "--nnodes", "--node-rank", "--master-addr", "--master-port",
        "--host", "--port", "--model", "--model-path",
        "--tp-size", "--tp", "--pp-size", "--dp-size", "--dp", "--ep-size", "--ep",
        "--enable-dp-attention", "--attn-dp-size", "--dist-init-addr", "--base-gpu-id",
        "--enable-eplb", "--eplb-config", "--ep-num-redundant-experts",
    }
)  # fmt: skip


def check_extra_args(extra_args: tuple[str, ...], reserved: frozenset[str] = RESERVED_FLAGS) -> None:
    """Raise SpecError naming the first passthrough flag that fights the layout or placement."""
    for token in extra_args:
        flag = token.split("=", 1)[0]
        if flag in reserved:
            raise SpecError(
                f"engine extra_args: {flag} is set by the layout/placement; "
                "remove it from extra_args and change the layout or placement instead"
            )


@dataclass(frozen=True)
class Slot:
    """One replica's share of one node."""

    node_index: int
    host: str
    gpu_ids: tuple[int, ...]
    port: int  # http port of this replica on this node; port+1, port+2 are its side ports


def placement_problems(layout: Layout, placement: Placement) -> list[str]:
    reasons: list[str] = []
    gpr, gpn = layout.gpus_per_replica, placement.gpus_per_node
    if gpr > gpn and gpr % gpn:
        reasons.append(f"a replica needs {gpr} GPUs, not a multiple of {gpn} GPUs per node")
        return reasons
    share = " (its share of the cluster)" if placement.usable_gpus else ""
    if gpr <= gpn:
        fits = sum(len(placement.node_gpus(n)) // gpr for n in range(len(placement.nodes)))
        if fits < layout.replicas:
            if placement.usable_gpus:
                reasons.append(f"needs {layout.replicas} blocks of {gpr} GPUs on one node, placement{share} "
                               f"holds {fits}")
            else:
                nodes_needed = -(-layout.replicas // (gpn // gpr))
                reasons.append(
                    f"needs {nodes_needed} nodes of {gpn} GPUs, placement has {len(placement.nodes)}"
                )
        return reasons
    nodes_needed = (gpr // gpn) * layout.replicas
    whole = len(_whole_nodes(placement))
    if nodes_needed > whole:
        reasons.append(f"needs {nodes_needed} nodes of {gpn} GPUs, placement{share} has {whole}")
    return reasons


def _whole_nodes(placement: Placement) -> list[int]:
    return [n for n in range(len(placement.nodes)) if len(placement.node_gpus(n)) == placement.gpus_per_node]


def assign_slots(layout: Layout, placement: Placement) -> list[list[Slot]]:
    """Per replica, the node slots it uses (first slot = leader). Call placement_problems first.

    A replica that fits on one node takes the next block of its size among the node's usable GPUs
    (nodes in order); a bigger one takes whole nodes."""
    problems = placement_problems(layout, placement)
    if problems:
        raise SpecError(f"layout {layout}: " + "; ".join(problems))
    gpr, gpn = layout.gpus_per_replica, placement.gpus_per_node
    out: list[list[Slot]] = []
    if gpr <= gpn:
        blocks = [
            (n, ids[k * gpr : (k + 1) * gpr], k)
            for n in range(len(placement.nodes))
            for ids in [placement.node_gpus(n)]
            for k in range(len(ids) // gpr)
        ]
        for n, gpus, k in blocks[: layout.replicas]:
            port = placement.base_port + PORT_STRIDE * k
            out.append([Slot(n, placement.nodes[n], gpus, port)])
    else:
        span, whole = gpr // gpn, _whole_nodes(placement)
        for r in range(layout.replicas):
            slots = [
                Slot(n, placement.nodes[n], tuple(range(gpn)), placement.base_port)
                for n in whole[r * span : (r + 1) * span]
            ]
            out.append(slots)
    return out


def device_env(slot: Slot, placement: Placement, local_ranks: int) -> list[tuple[str, str]]:
    """CUDA_VISIBLE_DEVICES on GPUs; on CPU, VLLM_CPU_OMP_THREADS_BIND with one core list per local rank."""
    if not placement.on_cpu:
        return [("CUDA_VISIBLE_DEVICES", ",".join(str(g) for g in slot.gpu_ids))]
    first = slot.gpu_ids[0] if slot.gpu_ids else 0
    total = placement.cpu_cores_per_node or placement.gpus_per_node
    per_rank = max(1, total // placement.gpus_per_node)
    lists = []
    for rank in range(local_ranks):
        start = (first + rank) * per_rank
        lists.append(str(start) if per_rank == 1 else f"{start}-{start + per_rank - 1}")
    return [("VLLM_CPU_OMP_THREADS_BIND", "|".join(lists))]


def merge_env(base: list[tuple[str, str]], options: EngineOptions) -> tuple[tuple[str, str], ...]:
    env: Mapping[str, str] = dict(base) | dict(options.extra_env)
    return tuple(sorted(env.items()))
