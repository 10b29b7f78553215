"""What each engine's prefill and decode servers add to their argv and environment, and the routers'.

The pieces a disaggregated launch plan appends to an ordinary server's argv (engines/vllm.py,
engines/sglang.py build the rest), checked against the engines' own parsers in CI:

- vLLM 0.33: `--kv-transfer-config JSON`, the fields of vllm/config/kv_transfer.py `KVTransferConfig`
  (its parser rejects unknown fields and roles); the NIXL side channel is addressed through
  `VLLM_NIXL_SIDE_CHANNEL_HOST` / `VLLM_NIXL_SIDE_CHANNEL_PORT` (vllm/envs.py: default localhost:5600,
  plus the DP index), which must be an address the decode servers reach and one port per server on a host;
- SGLang 0.5.23: `--disaggregation-mode prefill|decode`, `--disaggregation-transfer-backend`, the prefill
  server's `--disaggregation-bootstrap-port` and optional `--disaggregation-ib-device`
  (srt/arg_groups/fields/disagg.py);
- routers: orch's (`python -m orchestrator.router`, either protocol) and SGLang's own
  (`python -m sglang_router.launch_router --pd-disaggregation --prefill URL [PORT] --decode URL`, as
  SGLang's test fixture server_fixtures/disaggregation_fixture.py starts it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from orchestrator.engines.base import ProcessSpec, ReplicaPlan, ReplicaRole
from orchestrator.errors import SpecError
from orchestrator.kv_handover import (
    SGLANG_BACKENDS,
    SGLANG_DEFAULT_BACKEND,
    VLLM_CONNECTORS,
    VLLM_DEFAULT_CONNECTOR,
)

ROLES = ("prefill", "decode")
VLLM_KV_ROLES = {"prefill": "kv_producer", "decode": "kv_consumer"}
VLLM_NIXL_SIDE_CHANNEL_PORT = 5600  # vllm/envs.py default; a server's DP ranks use PORT + dp index
SGLANG_BOOTSTRAP_PORT = 8998  # srt/arg_groups/fields/disagg.py disaggregation_bootstrap_port default
ORCH_ROUTER = ("python3", "-m", "orchestrator.router")
SGLANG_ROUTER = ("python3", "-m", "sglang_router.launch_router")


def _role(role: str) -> str:
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    return role


@dataclass(frozen=True)
class PDFlags:
    """What one server of a pool adds: argv after the ordinary flags, and environment."""

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


def vllm_kv_transfer_config(role: str, *, connector: str = VLLM_DEFAULT_CONNECTOR,
                            buffer_device: str = "cuda",
                            extra: dict[str, object] | None = None) -> dict[str, object]:
    """The KVTransferConfig of one vLLM server. `buffer_device` "cpu" stages KV through host memory
    (what vLLM for CPU supports for NIXL: nixl/utils.py `_NIXL_SUPPORTED_DEVICE`)."""
    if connector not in VLLM_CONNECTORS:
        raise SpecError(f"kv connector {connector!r}: orch compiles {', '.join(VLLM_CONNECTORS)}")
    config: dict[str, object] = {"kv_connector": connector, "kv_role": VLLM_KV_ROLES[_role(role)],
                                 "kv_buffer_device": buffer_device}
    if extra:
        config["kv_connector_extra_config"] = dict(extra)
    return config


def vllm_pd(role: str, *, side_channel_host: str, side_channel_port: int = VLLM_NIXL_SIDE_CHANNEL_PORT,
            connector: str = VLLM_DEFAULT_CONNECTOR, buffer_device: str = "cuda",
            extra: dict[str, object] | None = None) -> PDFlags:
    config = vllm_kv_transfer_config(role, connector=connector, buffer_device=buffer_device, extra=extra)
    env = {}
    if connector == "NixlConnector":
        env = {"VLLM_NIXL_SIDE_CHANNEL_HOST": side_channel_host,
               "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side_channel_port)}
    return PDFlags(("--kv-transfer-config", json.dumps(config, separators=(",", ":"))), env)


def sglang_pd(role: str, *, backend: str = SGLANG_DEFAULT_BACKEND,
              bootstrap_port: int = SGLANG_BOOTSTRAP_PORT, ib_device: str | None = None) -> PDFlags:
    if backend not in SGLANG_BACKENDS:
        raise SpecError(f"transfer backend {backend!r}: SGLang 0.5.23 has {', '.join(SGLANG_BACKENDS)}")
    argv = ["--disaggregation-mode", _role(role), "--disaggregation-transfer-backend", backend]
    if role == "prefill":  # the decode side learns the bootstrap address from each request
        argv += ["--disaggregation-bootstrap-port", str(bootstrap_port)]
    if ib_device:
        argv += ["--disaggregation-ib-device", ib_device]
    return PDFlags(tuple(argv))


def orch_router_argv(prefill_urls: Sequence[str], decode_urls: Sequence[str], *, port: int,
                     host: str = "0.0.0.0", policy: str = "least_outstanding", protocol: str = "vllm",
                     bootstrap_ports: Sequence[int] = ()) -> tuple[str, ...]:
    argv = [*ORCH_ROUTER]
    for url in prefill_urls:
        argv += ["--prefill", url]
    for url in decode_urls:
        argv += ["--decode", url]
    for p in bootstrap_ports:
        argv += ["--bootstrap-port", str(p)]
    return (*argv, "--policy", policy, "--protocol", protocol, "--host", host, "--port", str(port))


def sglang_router_argv(prefill: Sequence[tuple[str, int]], decode_urls: Sequence[str], *, port: int,
                       host: str = "0.0.0.0", policy: str | None = None) -> tuple[str, ...]:
    """SGLang's router in PD mode: each prefill server with its bootstrap port."""
    argv = [*SGLANG_ROUTER, "--pd-disaggregation"]
    for url, bootstrap in prefill:
        argv += ["--prefill", url, str(bootstrap)]
    for url in decode_urls:
        argv += ["--decode", url]
    if policy is not None:
        argv += ["--policy", policy]
    return (*argv, "--host", host, "--port", str(port))


# -- one pool's replicas as servers of a pair -------------------------------------------------------

# A pool server's side port (vLLM's NIXL side channel, SGLang's bootstrap) sits at its HTTP port + this,
# inside the replica's block of PORT_STRIDE ports (http, +1 rpc/master, +2 ray). vLLM offsets the side
# channel by the DP index of each rank (nixl scheduler: VLLM_NIXL_SIDE_CHANNEL_PORT + data_parallel_index),
# so a replica with d DP ranks on a node holds SIDE_PORT_OFFSET .. SIDE_PORT_OFFSET + d - 1: up to 5
# ranks stay inside a 10-port block; more ranks fill a node alone, where no other block follows.
SIDE_PORT_OFFSET = 5
SIM_SERVER = ("python", "-m", "orchestrator.sim.server")
SIM_PD_SERVER = ("python", "-m", "orchestrator.sim.pd_server")


def replica_port(replica: ReplicaPlan) -> int:
    """The HTTP port of a replica's server (its health URL's)."""
    port = urlsplit(replica.health_url).port
    if port is None:
        raise SpecError(f"launch plan: health URL {replica.health_url!r} names no port")
    return port


def base_url(replica: ReplicaPlan) -> str:
    """http://host:port of a replica's server, as a router addresses it."""
    parts = urlsplit(replica.health_url)
    return f"{parts.scheme}://{parts.netloc}"


@dataclass(frozen=True)
class PoolRole:
    """How one pool's servers run in a pair: the engine, the role, and the transfer between pools."""

    engine: str
    role: str
    transfer: str
    nodes: tuple[str, ...]  # the placement's node addresses, by ProcessSpec.node_index
    on_cpu: bool = False
    kv_link: str = "intra_node"  # sim: the link KV crosses (both pools on one node: NVLink)
    storage_dir: str = "/tmp/orch-kv"  # vLLM ExampleConnector: the directory both pools share

    def process(self, proc: ProcessSpec, port: int) -> ProcessSpec:
        """One server process of the pool, with its role's argv and environment."""
        side = port + SIDE_PORT_OFFSET
        argv, env = list(proc.argv), dict(proc.env)
        if self.engine == "sim":
            if tuple(argv[:3]) != SIM_SERVER:
                raise SpecError(f"engine sim: expected a {' '.join(SIM_SERVER)} command, got {argv[:3]}")
            argv = [*SIM_PD_SERVER, "--role", _role(self.role), "--kv-link", self.kv_link, *argv[3:]]
            return replace(proc, argv=tuple(argv))
        if self.engine == "vllm":
            host = self.nodes[proc.node_index] if proc.node_index < len(self.nodes) else self.nodes[0]
            extra: dict[str, object] | None = None
            if self.transfer == "ExampleConnector":
                extra = {"shared_storage_path": self.storage_dir}
            flags = vllm_pd(self.role, side_channel_host=host, side_channel_port=side,
                            connector=self.transfer, buffer_device="cpu" if self.on_cpu else "cuda",
                            extra=extra)
        elif self.engine == "sglang":
            flags = sglang_pd(self.role, backend=self.transfer, bootstrap_port=side)
        else:
            raise SpecError(f"engine {self.engine!r} has no prefill/decode disaggregation in orch")
        env.update(flags.env)
        uses_side = bool(flags.env) or "--disaggregation-bootstrap-port" in flags.argv
        ports = proc.ports + ((side,) if uses_side else ())
        return replace(proc, argv=(*argv, *flags.argv), env=tuple(sorted(env.items())), ports=ports)

    def replica(self, replica: ReplicaPlan) -> ReplicaPlan:
        port = replica_port(replica)
        procs = tuple(self.process(p, port) for p in replica.processes)
        role: ReplicaRole = "prefill" if self.role == "prefill" else "decode"
        return replace(replica, processes=procs, role=role)


def router_process(engine: str, prefill: Sequence[ReplicaPlan], decode: Sequence[ReplicaPlan], *, host: str,
                   port: int, policy: str) -> ProcessSpec:
    """The router of a pair: orch's for vLLM and the simulator (vLLM's kv_transfer_params protocol),
    SGLang's own in PD mode for SGLang (each prefill server with its bootstrap port)."""
    if engine == "sglang":
        argv = sglang_router_argv([(base_url(r), replica_port(r) + SIDE_PORT_OFFSET) for r in prefill],
                                  [base_url(r) for r in decode], port=port, host=host,
                                  policy=SGLANG_ROUTER_POLICIES[policy])
    else:
        argv = ("python", *orch_router_argv([base_url(r) for r in prefill], [base_url(r) for r in decode],
                                            port=port, host=host, policy=policy, protocol="vllm")[1:])
    return ProcessSpec(argv=argv, ports=(port,))


# SGLang's router has round_robin and power_of_two (the less loaded of two random workers), no
# least-outstanding: power_of_two is its load-aware policy (sgl-router policies).
SGLANG_ROUTER_POLICIES = {"round_robin": "round_robin", "least_outstanding": "power_of_two"}
