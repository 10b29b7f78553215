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
from dataclasses import dataclass, field

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
                       host: str = "0.0.0.0") -> tuple[str, ...]:
    """SGLang's router in PD mode: each prefill server with its bootstrap port."""
    argv = [*SGLANG_ROUTER, "--pd-disaggregation"]
    for url, bootstrap in prefill:
        argv += ["--prefill", url, str(bootstrap)]
    for url in decode_urls:
        argv += ["--decode", url]
    return (*argv, "--host", host, "--port", str(port))
