"""Local Ray clusters for the `ray` tier: on loopback, fake GPU resources, ports chosen free by Ray/the OS.

Skips when ray is missing; with ORCH_CI=1 fails instead (no tier skipped silently). See
.ci/setup.d/50-ray.sh and ../shared notes (Ray section).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import pythonpath_env
from tests.support.ports import free_port

SETUP_HINT = "run `source .ci/setup.d/50-ray.sh` (installs ray into .venv) or pip install 'orch[ray]'"
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


# Run in a fresh Python after a sweep (argv: Ray address, GPUs the cluster declares; env: token_env's,
# which puts the repository on PYTHONPATH): prints the
# actors and placement groups left behind and the GPUs free again, as JSON. A separate process, so the
# test's own interpreter never joins the cluster it checks.
LEFTOVERS_SCRIPT = """
import json, sys
from tests.support.ray_cluster import free_gpus, leftovers, ray_or_skip
ray = ray_or_skip()
ray.init(address=sys.argv[1], logging_level="WARNING", log_to_driver=False)
actors, groups = leftovers(ray)
print(json.dumps({"actors": actors, "groups": groups, "gpus": free_gpus(ray, float(sys.argv[2]))}))
"""


def ray_or_skip() -> Any:
    os.environ.update(LOOPBACK_ENV)  # before ray is imported: every socket stays on 127.0.0.1
    try:
        import ray
    except ImportError:
        message = f"ray not importable; {SETUP_HINT}"
        if os.environ.get("ORCH_CI") == "1":
            pytest.fail(f"ORCH_CI=1 but {message}")
        pytest.skip(message)
    return ray


def leftovers(ray: Any, wait_s: float = 30.0) -> tuple[list[Any], list[str]]:
    """Named actors still alive and placement groups not removed, cluster-wide. Removal is asynchronous
    in Ray, so this waits (up to wait_s) for both lists to empty before it answers."""
    from ray.util.placement_group import placement_group_table

    deadline = time.monotonic() + wait_s
    while True:
        actors = list(ray.util.list_named_actors(all_namespaces=True))
        groups = [pg_id for pg_id, pg in placement_group_table().items() if pg["state"] != "REMOVED"]
        if (not actors and not groups) or time.monotonic() > deadline:
            return actors, groups
        time.sleep(0.2)


def free_gpus(ray: Any, want: float, wait_s: float = 30.0) -> float:
    """Unreserved GPUs, once they reach `want` (resources come back asynchronously) or wait_s passes."""
    deadline = time.monotonic() + wait_s
    while True:
        have = float(ray.available_resources().get("GPU", 0.0))
        if have >= want or time.monotonic() > deadline:
            return have
        time.sleep(0.2)


def token_env(token: str) -> dict[str, str]:
    """The environment of every process that talks to a head started with token authentication (Ray
    2.60's default): drivers, `orch sweep`, the head itself. The repository is on PYTHONPATH, so a
    driver script run with `python -c` imports tests.support."""
    return {**pythonpath_env(), **LOOPBACK_ENV, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}


def fixed_ports_freed() -> list[str]:
    """`ray start` flags that replace Ray 2.60's fixed default ports with free ones, so two test runs on
    one machine (two CI clones, same /tmp) never share them. Every other port Ray picks itself.

    - The Ray client server binds 10001 whenever grpc imports (ray[client] or ray[default]; plain `ray`,
      what CI installs, starts none). gRPC binds with SO_REUSEPORT, so a second head's server does not
      fail: both listen on 10001 and a `ray://127.0.0.1:10001` driver may reach the other run's cluster.
      Ray refuses --ray-client-server-port without grpc (scripts.py `ray start`), hence the check.
    - The dashboard agent's HTTP port is 52365 (ray[default] only; with the port taken the agent logs an
      error and serves no HTTP)."""
    flags = [f"--dashboard-agent-listen-port={free_port()}"]
    if importlib.util.find_spec("grpc") is not None:  # Ray's own test: get_ray_client_dependency_error
        flags.append(f"--ray-client-server-port={free_port()}")
    return flags


def ray_head(gpus: int, token: str) -> Iterator[str]:
    """A `ray start --head --block` on loopback with `gpus` fake GPUs, yielding its address once its
    port answers; on exit only this head is stopped (its own session), never a global `ray stop`.
    For module fixtures: `yield from ray_head(8, TOKEN)`."""
    ray_or_skip()
    port = free_port()
    ray_bin = Path(sys.executable).parent / "ray"
    proc = subprocess.Popen(
        [str(ray_bin), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
         f"--num-gpus={gpus}", "--num-cpus=16", "--include-dashboard=false", "--disable-usage-stats",
         *fixed_ports_freed()],
        env=token_env(token), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        assert proc.poll() is None, "ray start --head exited"
        time.sleep(0.2)
    yield f"127.0.0.1:{port}"
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
