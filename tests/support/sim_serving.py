"""orch's simulated server on a free loopback port, and a workload to drive it and virtual time alike.

Shared by tests/integration/sim/test_server.py (both paths give the same answers) and
bench/sim_served_agreement.py (how close their latencies are on this machine).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import numpy as np

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.layout import parse_layout
from orchestrator.loadgen.records import RequestRecord
from orchestrator.plan.checks import Cluster
from orchestrator.plan.inputs import PlanInputs
from orchestrator.sim.build import replica_engines
from orchestrator.sim.loops import simulate
from orchestrator.sim.virtual import SimRequest
from tests.support.engines import fixed_settings
from tests.support.ports import free_port

MODEL = "qwen2.5-72b"
# The engine both paths simulate: the server's flags and the planner inputs of virtual time.
_SERVER_ARGS = ("--model", MODEL, "--layout", "tp8", "--gpu", "h100-sxm", "--max-model-len", "8192")


def status(url: str) -> int:
    """The HTTP status of a GET, or -1 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return -1


def wait_healthy(base: str, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if status(base + "/health") == 200:
            return True
        time.sleep(0.1)
    return False


@contextlib.contextmanager
def sim_server(time_scale: float, *extra: str) -> Iterator[str]:
    """Start the simulated server (not waiting for it); yield its base URL; terminate it on exit."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.sim.server", *_SERVER_ARGS,
                             "--time-scale", str(time_scale), *extra, "--port", str(port)])
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def poisson_workload(seed: int, n: int) -> tuple[list[float], list[int], list[int]]:
    """n requests at 3/s (Poisson): arrival offsets in seconds, prompt and output token counts."""
    rng = np.random.default_rng(seed)
    offsets = [float(x) for x in np.cumsum(rng.exponential(1 / 3.0, n))]
    prompts = [int(x) for x in rng.integers(300, 900, n)]
    outputs = [int(x) for x in rng.integers(40, 80, n)]
    return offsets, prompts, outputs


def simulate_virtual(requests: list[SimRequest]) -> list[RequestRecord]:
    """The same engine as the server's, in virtual time."""
    inputs = PlanInputs(cfg=load_model(MODEL), gpu=load_gpu("h100-sxm"), cluster=Cluster(1, 8),
                        settings=fixed_settings(8192))
    records, _ = simulate(replica_engines(inputs, parse_layout("tp8")), requests)
    return records
