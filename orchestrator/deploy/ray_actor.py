"""The actor of the Ray target: holds one engine process on its node (runs on a Ray worker).

It starts the process in a new process group, under a launcher that asks Linux to kill it when the
actor's worker dies (so a crashed or killed actor leaves no engine behind), with CUDA_VISIBLE_DEVICES set
from the GPU ids Ray assigned, and stops the whole group on request. `ray` is imported lazily.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from orchestrator.deploy.base import port_is_free
from orchestrator.deploy.local import LOG_TAIL_LINES, program_argv, tail
from orchestrator.engines.base import ProcessSpec
from orchestrator.errors import DeployError
from orchestrator.extras import require_for_target

# Parent-death signal: the engine dies with its actor even when Ray kills the actor's worker outright.
_LAUNCHER = "import ctypes, os, sys; ctypes.CDLL(None).prctl(1, 9); os.execvp(sys.argv[1], sys.argv[1:])"


def ray_module() -> Any:
    require_for_target("ray")
    import ray

    return ray


class EngineProcess:
    """Holds one engine process on its node; wrapped with ray.remote when deployed."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: str, ports: list[int]):
        self.name, self.argv, self.env, self.ports = name, argv, env, ports
        self.log_path = Path(log_dir) / f"{name}.log"
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self, pin_gpus: bool) -> dict[str, Any]:
        ray = ray_module()
        host = str(ray.util.get_node_ip_address())
        busy = [p for p in self.ports if not port_is_free(p)]
        if busy:
            raise DeployError(f"{self.name}: port(s) {busy} busy on node {host}; rerun to pick other ports")
        env = {**os.environ, **self.env}
        if pin_gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in ray.get_gpu_ids())
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = program_argv(ProcessSpec(argv=tuple(self.argv)))
        if sys.platform.startswith("linux"):
            argv = [sys.executable, "-c", _LAUNCHER, *argv]
        with self.log_path.open("wb") as log:
            log.write(("$ " + " ".join(argv) + "\n").encode())
            log.flush()
            self.popen = subprocess.Popen(
                argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        return {
            "host": host,
            "pid": self.popen.pid,
            "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
            "node_id": str(ray.get_runtime_context().get_node_id()),
            "log": str(self.log_path),
        }

    def poll(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return tail(self.log_path, lines)

    def stop(self, grace_s: float) -> int | None:
        if self.popen is None:
            return None
        _killpg(self.popen.pid, signal.SIGTERM)  # the group: the engine's workers too
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=grace_s)
        _killpg(self.popen.pid, signal.SIGKILL)  # whatever is left in the group
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)
        return self.popen.returncode


def _killpg(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)  # start_new_session: the group id is the leader's pid
