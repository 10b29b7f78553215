"""The local target with real processes: health wait, early exit with the log tail, group teardown."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from orchestrator.deploy.base import deployed, free_base_port, port_is_free
from orchestrator.deploy.local import LocalProcessTarget
from orchestrator.engines.base import EngineOptions, LaunchPlan, Placement, ProcessSpec, ReplicaPlan
from orchestrator.engines.sim import ENGINE as SIM
from orchestrator.errors import DeployError, EngineDied
from orchestrator.layout import parse_layout


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper that a container may lack does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sim_replicas_become_healthy_and_are_torn_down(tmp_path: Path) -> None:
    base = free_base_port(2)
    opts = EngineOptions(
        model="qwen2.5-7b",
        sim_args=(
            "--model",
            "qwen2.5-7b",
            "--gpu",
            "h100-sxm",
            "--startup-s",
            "0.5",
            "--max-model-len",
            "4096",
        ),
    )
    plan = SIM.launch_plan(parse_layout("tp1x2"), opts, Placement(base_port=base, bind_host="127.0.0.1"))
    target = LocalProcessTarget(tmp_path)
    with deployed(target, plan, timeout_s=60) as dep:
        assert len(dep.endpoints) == 2
        pids = [h.popen.pid for h in dep.handles]  # type: ignore[attr-defined]
        assert all(_alive(p) for p in pids)
        assert not port_is_free(base) and not port_is_free(base + 10)
    time.sleep(0.2)
    assert not any(_alive(p) for p in pids)
    assert port_is_free(base)
    assert any(p.suffix == ".log" for p in tmp_path.iterdir())


def test_early_exit_reports_the_log_tail(tmp_path: Path) -> None:
    proc = ProcessSpec(
        argv=(sys.executable, "-c", "import sys; print('model weights not found'); sys.exit(3)")
    )
    plan = LaunchPlan(
        "sim", "tp1", (ReplicaPlan((proc,), "http://127.0.0.1:9/health", "http://127.0.0.1:9/v1"),)
    )
    with (
        pytest.raises(EngineDied, match="model weights not found"),
        deployed(LocalProcessTarget(tmp_path), plan, timeout_s=30),
    ):
        pass


def test_timeout_tears_down_the_whole_group(tmp_path: Path) -> None:
    # The leader starts a child in its process group; teardown must take both.
    code = (
        "import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', 'import time; "
        "time.sleep(60)']); print(c.pid, flush=True); time.sleep(60)"
    )
    proc = ProcessSpec(argv=(sys.executable, "-c", code))
    plan = LaunchPlan(
        "sim", "tp1", (ReplicaPlan((proc,), "http://127.0.0.1:9/health", "http://127.0.0.1:9/v1"),)
    )
    target = LocalProcessTarget(tmp_path, term_grace_s=2)
    with pytest.raises(DeployError, match="not healthy after 1"), deployed(target, plan, timeout_s=1):
        pass
    log = next(tmp_path.glob("*.log")).read_text().splitlines()
    child = int(log[1])
    time.sleep(0.2)
    assert not _alive(child)
