"""Ray target: one placement group per replica, one actor per ProcessSpec that starts the engine process.

A replica that fits on one node gets one bundle (strategy PACK); a replica spanning nodes gets one bundle
per node (STRICT_SPREAD), each {"GPU": GPUs used on that node, "CPU": actors on that node}. Each actor
starts its process in a new process group with CUDA_VISIBLE_DEVICES set from the GPU ids Ray assigned to
it, and reports its node address; the endpoints point there. The driver polls health. Teardown stops
each process group, kills the actors and removes the placement groups, on failure too. `ray` is
imported lazily: orch installs and runs without it (extra `[ray]`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from orchestrator.deploy.base import Deployment, Endpoint, split_endpoints
from orchestrator.deploy.local import TERM_GRACE_S, exit_status, healthy
from orchestrator.deploy.ray_actor import EngineProcess, ray_module
from orchestrator.deploy.ray_placement import ReplicaBundles, replica_bundles, substitute_hosts
from orchestrator.engines import LaunchPlan, ReplicaPlan, secret_values
from orchestrator.errors import DeployError, EngineDied

__all__ = ["RayActor", "RayReplica", "RayTarget", "replica_bundles", "substitute_hosts"]

POLL_S = 0.25
PG_TIMEOUT_S = 60.0
ACTOR_START_TIMEOUT_S = 120.0
ACTOR_CALL_TIMEOUT_S = 30.0
CONNECT_PROBE_S = 5.0


# -- the driver side -------------------------------------------------------------------------------
@dataclass(frozen=True)
class RayActor:
    name: str
    handle: Any
    info: dict[str, Any]


@dataclass(frozen=True)
class RayReplica:
    index: int
    placement_group: Any
    strategy: str
    bundles: tuple[dict[str, float], ...]
    actors: tuple[RayActor, ...]


@dataclass
class _Partial:  # what deploy created so far, for cleanup when it fails half-way
    groups: list[Any] = field(default_factory=list)
    actors: list[Any] = field(default_factory=list)


class RayTarget:
    def __init__(
        self,
        workdir: str | Path,
        *,
        address: str = "auto",
        namespace: str | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        gpus_per_node: int = 8,
        on_cpu: bool = False,
        node_names: Sequence[str] = (),
        pg_timeout_s: float = PG_TIMEOUT_S,
        term_grace_s: float = TERM_GRACE_S,
    ) -> None:
        self.workdir = Path(workdir)
        self.address, self.namespace = address, namespace
        self.runtime_env = dict(runtime_env or {})
        self.gpus_per_node, self.on_cpu = gpus_per_node, on_cpu
        self.node_names = tuple(node_names)
        self.pg_timeout_s, self.term_grace_s = pg_timeout_s, term_grace_s

    def connect(self) -> Any:
        ray = ray_module() if _ray_initialized() else None
        if ray is None:
            probe_address(self.address)  # ray.init retries an unreachable address for minutes
            if _loopback(self.address):
                # Else Ray swaps 127.0.0.1 for this machine's other address and waits there for minutes;
                # it reads this when ray is first imported.
                os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
            ray = ray_module()
        if not ray.is_initialized():
            try:
                ray.init(
                    address=self.address, namespace=self.namespace, runtime_env=self.runtime_env or None,
                    logging_level="WARNING", log_to_driver=False,
                )  # fmt: skip
            except (ConnectionError, RuntimeError, ValueError) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise DeployError(
                    f"target.address: no Ray cluster answered at {self.address!r} ({first}); start one "
                    "with `ray start --head` or set target.address to its GCS address (host:port); a cluster "
                    "with token authentication also needs RAY_AUTH_MODE=token and RAY_AUTH_TOKEN here"
                ) from None
        return ray

    # -- deploy -----------------------------------------------------------------------------------
    def deploy(self, plan: LaunchPlan) -> Deployment[RayReplica]:
        ray = self.connect()
        shapes = [
            replica_bundles(r, plan.replica_gpus(i), self.gpus_per_node, self.on_cpu)
            for i, r in enumerate(plan.replicas)
        ]
        self._check_capacity(ray, shapes, plan.name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        uid = secrets.token_hex(3)
        made = _Partial()
        try:
            groups = self._place(ray, plan, shapes, uid, made)
            replicas = [
                self._start(ray, plan, r, shape, pg, uid, made)
                for r, (shape, pg) in enumerate(zip(shapes, groups, strict=True))
            ]
        except BaseException:
            self._cleanup(ray, made.actors, made.groups)
            raise
        endpoints, backends = split_endpoints(
            plan, lambda r, rep: _endpoint(r, rep, replicas[r].actors[0].info["host"]))
        return Deployment(plan, endpoints, str(self.workdir), tuple(replicas), backends)

    def _check_capacity(self, ray: Any, shapes: list[ReplicaBundles], layout: str) -> None:
        if self.on_cpu:
            return
        need = sum(b.get("GPU", 0.0) for s in shapes for b in s.bundles)
        have = float(ray.cluster_resources().get("GPU", 0.0))
        if need > have:
            raise DeployError(
                f"{layout}: needs {need:g} GPUs, the Ray cluster at {self.address!r} has {have:g}; "
                "add nodes or pick a smaller layout"
            )
        per_node = max((b.get("GPU", 0.0) for s in shapes for b in s.bundles), default=0.0)
        nodes = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get("GPU", 0) >= per_node]
        spread = max(len(s.bundles) for s in shapes)
        if spread > len(nodes):
            raise DeployError(
                f"{layout}: a replica needs {spread} nodes with {per_node:g} GPUs each, the Ray cluster has "
                f"{len(nodes)}; add nodes or pick a layout that fits one node"
            )

    def _place(
        self, ray: Any, plan: LaunchPlan, shapes: list[ReplicaBundles], uid: str, made: _Partial
    ) -> list[Any]:
        from ray.util.placement_group import placement_group

        for r, shape in enumerate(shapes):
            made.groups.append(
                placement_group(
                    list(shape.bundles), strategy=shape.strategy, name=f"orch-{uid}-{plan.name}-r{r}"
                )
            )
        try:
            ray.get([pg.ready() for pg in made.groups], timeout=self.pg_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise DeployError(
                f"{plan.name}: placement groups not placed after {self.pg_timeout_s:g} s "
                f"(bundles {[list(s.bundles) for s in shapes][:2]}, cluster free: "
                f"{ray.available_resources()}); free GPUs or pick a smaller layout"
            ) from None
        return list(made.groups)

    def _start(
        self, ray: Any, plan: LaunchPlan, r: int, shape: ReplicaBundles, pg: Any, uid: str, made: _Partial
    ) -> RayReplica:
        from ray.util.placement_group import placement_group_table
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        replica = plan.replicas[r]
        node_ip = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
        on_node = placement_group_table(pg)["bundles_to_node_id"]
        hosts = {
            self.node_names[n]: node_ip[on_node[b]]
            for n, b in shape.bundle_of_node.items()
            if n < len(self.node_names) and on_node.get(b) in node_ip
        }
        actor_cls = ray.remote(EngineProcess)
        pending = []
        for slot in shape.actors:
            proc = replica.processes[slot.process]
            name = f"orch-{uid}-{plan.engine}-{plan.name}-r{r}-p{slot.process}-{proc.role}"
            handle = actor_cls.options(
                name=name, num_cpus=1, num_gpus=slot.num_gpus, max_restarts=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=pg, placement_group_bundle_index=slot.bundle
                ),
            ).remote(
                name,
                [substitute_hosts(a, hosts) for a in proc.argv],
                # Secrets travel to the actor's process env only (read from orch's env, never stored).
                {k: substitute_hosts(v, hosts) for k, v in proc.env}
                | secret_values(proc.secret_env, os.environ),
                str(self.workdir),
                list(proc.ports),
            )  # fmt: skip
            made.actors.append(handle)
            pending.append((name, handle, handle.start.remote(pin_gpus=slot.num_gpus > 0)))
        actors = []
        for name, handle, ref in pending:
            try:
                info = ray.get(ref, timeout=ACTOR_START_TIMEOUT_S)
            except ray.exceptions.RayError as exc:
                raise DeployError(f"{name}: could not start: {_cause(exc)}") from None
            actors.append(RayActor(name, handle, info))
        return RayReplica(r, pg, shape.strategy, shape.bundles, tuple(actors))

    # -- readiness, liveness ----------------------------------------------------------------------
    def wait_ready(self, deployment: Deployment[RayReplica], timeout_s: float) -> None:
        pending = {ep.health_url for ep in deployment.servers}
        deadline = time.monotonic() + timeout_s
        while pending:
            self.check_alive(deployment, "before it was ready")
            for url in list(pending):
                if healthy(url):
                    pending.discard(url)
            if not pending:
                return
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {a.name}\n{self._tail(a)}" for a in _actors(deployment)[:2])
                raise DeployError(
                    f"{deployment.name}: not healthy after {timeout_s:g} s "
                    f"({', '.join(sorted(pending))}); last log lines:\n{logs}"
                )
            time.sleep(POLL_S)

    def check_alive(self, deployment: Deployment[RayReplica], when: str = "during the measurement") -> None:
        ray = ray_module()
        for a in _actors(deployment):
            try:
                code = ray.get(a.handle.poll.remote(), timeout=ACTOR_CALL_TIMEOUT_S)
            except ray.exceptions.RayError as exc:
                raise EngineDied(f"{a.name}: its Ray actor is gone {when}: {_cause(exc)}") from None
            if code is not None:
                raise EngineDied(
                    f"{a.name} {exit_status(code)} {when}; last log lines ({a.info['log']} on "
                    f"{a.info['host']}):\n{self._tail(a)}"
                )

    def _tail(self, actor: RayActor) -> str:
        ray = ray_module()
        try:
            return str(ray.get(actor.handle.tail.remote(), timeout=ACTOR_CALL_TIMEOUT_S))
        except ray.exceptions.RayError:
            return "(no log: actor gone)"

    # -- teardown ---------------------------------------------------------------------------------
    def teardown(self, deployment: Deployment[RayReplica]) -> None:
        replicas = list(deployment.handles)
        ray = ray_module()
        self._cleanup(
            ray, [a.handle for r in replicas for a in r.actors], [r.placement_group for r in replicas]
        )

    def _cleanup(self, ray: Any, actors: list[Any], groups: list[Any]) -> None:
        from ray.util.placement_group import remove_placement_group

        stops = []
        for handle in actors:
            with contextlib.suppress(Exception):
                stops.append(handle.stop.remote(self.term_grace_s))
        with contextlib.suppress(Exception):
            ray.wait(stops, num_returns=len(stops), timeout=self.term_grace_s + 10)
        for handle in actors:
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)
        for pg in groups:
            with contextlib.suppress(Exception):
                remove_placement_group(pg)


def _ray_initialized() -> bool:
    mod = sys.modules.get("ray")
    return bool(mod is not None and mod.is_initialized())


def _loopback(address: str) -> bool:
    host = address.removeprefix("ray://").rpartition(":")[0]
    return host == "localhost" or host.startswith("127.")


def probe_address(address: str, timeout_s: float = CONNECT_PROBE_S) -> None:
    """Fail fast, with the fix, when a host:port (or ray://host:port) address does not accept connections."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if address in ("auto", "local") or not sep or not port.isdigit():
        return
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise DeployError(
            f"target.address: nothing answers at {address!r} ({exc.strerror or exc}); start the cluster "
            "with `ray start --head --port=PORT` or set target.address to its GCS address (host:port)"
        ) from None


def _actors(deployment: Deployment[RayReplica]) -> list[RayActor]:
    return [a for h in deployment.handles for a in h.actors]


def _cause(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    text = str(cause if cause is not None else exc).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def _with_host(url: str, host: str) -> str:
    parts = urlsplit(url)
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def _endpoint(index: int, replica: ReplicaPlan, host: str) -> Endpoint:
    return Endpoint(index, _with_host(replica.openai_base_url, host), _with_host(replica.health_url, host))
