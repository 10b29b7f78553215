"""The fake Kubernetes API server (k8s_fake_apiserver.py) started for a test, and what is left on it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.support.paths import pythonpath_env

NS = "llm"
LISTS = {
    "configmaps": "api/v1",
    "services": "api/v1",
    "pods": "api/v1",
    "deployments": "apis/apps/v1",
    "leaderworkersets": "apis/leaderworkerset.x-k8s.io/v1",
    "serviceaccounts": "api/v1",
    "roles": "apis/rbac.authorization.k8s.io/v1",
    "rolebindings": "apis/rbac.authorization.k8s.io/v1",
}


class FakeApi:
    """tests/support/k8s_fake_apiserver.py in its own process (a new session: stop() takes its engines
    too), with a kubeconfig pointing at it."""

    def __init__(self, tmp: Path, *args: str) -> None:
        port_file = tmp / "port"
        port_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.k8s_fake_apiserver", "--port-file", str(port_file), *args],
            env=pythonpath_env(),
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert self.proc.poll() is None, "fake API server exited"
            assert time.monotonic() < deadline, "fake API server did not start"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port_file.read_text()}"
        self.kubeconfig = tmp / "kubeconfig"
        self.kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "ci", "user": {"token": "not-checked"}}],
                    "contexts": [
                        {"name": "fake", "context": {"cluster": "fake", "user": "ci", "namespace": NS}}
                    ],
                    "current-context": "fake",
                }
            )
        )

    def items(self, plural: str) -> list[dict[str, Any]]:
        try:
            with urllib.request.urlopen(
                f"{self.url}/{LISTS[plural]}/namespaces/{NS}/{plural}", timeout=10
            ) as r:
                return list(json.load(r)["items"])
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # the CRD is not installed on this fake cluster
                return []
            raise

    def left(self) -> dict[str, list[str]]:
        out = {p: [o["metadata"]["name"] for o in self.items(p)] for p in LISTS}
        return {k: v for k, v in out.items() if v}

    def engines_alive(self, wait_s: float = 30.0) -> int:
        """The fake's simulated engines still running (children of its process), once those whose pods
        were deleted have had up to wait_s to exit. Deleting a pod sends its engine SIGTERM and returns at
        once, as a kubelet does; on a busy runner the engine can take seconds to exit after orch is done,
        so a check made at once counted engines that were already on their way out (CI of 9e579c9)."""
        deadline = time.monotonic() + wait_s
        while True:
            alive = self._engines_now()
            if alive == 0 or time.monotonic() >= deadline:
                return alive
            time.sleep(0.2)

    def _engines_now(self) -> int:
        alive = 0
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            for pid in (task / "children").read_text().split():
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:  # it exited between the two reads
                    continue
                alive += b"orchestrator.sim.server" in cmd
        return alive

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
