"""The local target with real processes: health wait, early exit with the log tail, group teardown,
no engine left behind when orch is killed, no measuring against a server that is not ours."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.deploy.base import deployed, free_base_port, port_is_free, signals_deferred
from orchestrator.deploy.local import LocalProcessTarget
from orchestrator.deploy.ownership import foreign_listener
from orchestrator.engines import SimOptions
from orchestrator.engines.base import EngineOptions, LaunchPlan, Placement, ProcessSpec, ReplicaPlan
from orchestrator.engines.sim import ENGINE as SIM
from orchestrator.errors import DeployError, EngineDied
from tests.support.engines import candidate


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
    opts = EngineOptions(model="qwen2.5-7b", sim=SimOptions("qwen2.5-7b", "h100-sxm", startup_s=0.5))
    plan = SIM.launch_plan(candidate("tp1x2", "sim"), opts, Placement(base_port=base, bind_host="127.0.0.1"))
    target = LocalProcessTarget(tmp_path)
    with deployed(target, plan, timeout_s=60) as dep:
        assert len(dep.endpoints) == 2
        pids = [h.popen.pid for h in dep.handles]  # type: ignore[attr-defined]
        assert all(_alive(p) for p in pids)
        assert not port_is_free(base) and not port_is_free(base + 10)
        assert foreign_listener(base, pids) is False  # /proc sees that the server on the port is ours
    time.sleep(0.2)
    assert not any(_alive(p) for p in pids)
    assert port_is_free(base)
    assert any(p.suffix == ".log" for p in tmp_path.iterdir())


def test_early_exit_reports_the_log_tail(tmp_path: Path) -> None:
    proc = ProcessSpec(
        argv=(sys.executable, "-c", "import sys; print('model weights not found'); sys.exit(3)")
    )
    plan = LaunchPlan(
        "sim", candidate("tp1", "sim"), (ReplicaPlan((proc,), "http://127.0.0.1:9/health", "http://127.0.0.1:9/v1"),)
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
        "sim", candidate("tp1", "sim"), (ReplicaPlan((proc,), "http://127.0.0.1:9/health", "http://127.0.0.1:9/v1"),)
    )
    target = LocalProcessTarget(tmp_path, term_grace_s=2)
    with pytest.raises(DeployError, match="not healthy after 1"), deployed(target, plan, timeout_s=1):
        pass
    log = next(tmp_path.glob("*.log")).read_text().splitlines()
    child = int(log[1])
    time.sleep(0.2)
    assert not _alive(child)


FOREIGN_SERVER = (
    "import http.server, sys\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(200); self.send_header('Content-Length', '2'); self.end_headers()\n"
    "        self.wfile.write(b'ok')\n"
    "    def log_message(self, *a): pass\n"
    "s = http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H)\n"
    "print('up', flush=True)\n"
    "s.serve_forever()\n"
)


def _foreign_server(port: int) -> subprocess.Popen[str]:
    """Another program's HTTP server, answering 200 to every GET (a /health check included)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", FOREIGN_SERVER, str(port)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return proc


def _sim_plan(base: int) -> LaunchPlan:
    opts = EngineOptions(model="qwen2.5-7b", sim=SimOptions("qwen2.5-7b", "h100-sxm"))
    return SIM.launch_plan(candidate("tp1", "sim"), opts, Placement(base_port=base, bind_host="127.0.0.1"))


def test_a_server_already_on_the_port_is_refused_before_launch(tmp_path: Path) -> None:
    base = free_base_port(1)
    foreign = _foreign_server(base)
    try:
        with (
            pytest.raises(DeployError, match=f"port {base} on 127.0.0.1 is already in use"),
            deployed(LocalProcessTarget(tmp_path), _sim_plan(base), timeout_s=60),
        ):
            pass
        assert not list(tmp_path.glob("*.log"))  # nothing of ours was started
    finally:
        foreign.kill()
        foreign.wait()


def test_a_health_answer_from_a_server_that_is_not_ours_is_detected(tmp_path: Path) -> None:
    # Our engine never listens; another server takes its port after the launch and answers /health.
    port = free_base_port(1)
    proc = ProcessSpec(argv=(sys.executable, "-c", "import time; time.sleep(120)"))
    plan = LaunchPlan(
        "sim",
        candidate("tp1", "sim"),
        (ReplicaPlan((proc,), f"http://127.0.0.1:{port}/health", f"http://127.0.0.1:{port}/v1"),),
    )
    target = LocalProcessTarget(tmp_path, term_grace_s=2)
    dep = target.deploy(plan)
    pid = dep.handles[0].popen.pid  # type: ignore[attr-defined]
    foreign = _foreign_server(port)
    try:
        with pytest.raises(DeployError, match="answered by a process orch did not start"):
            target.wait_ready(dep, timeout_s=60)
    finally:
        target.teardown(dep)
        foreign.kill()
        foreign.wait()
    assert not _alive(pid)


def _as_ctrl_c(signum: int, frame: object) -> None:  # what the CLI installs for SIGTERM
    raise KeyboardInterrupt


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_signals_during_teardown_are_held_until_it_is_done(sig: signal.Signals) -> None:
    before = signal.signal(signal.SIGTERM, _as_ctrl_c)
    # Python's Ctrl-C handler, also when pytest runs in a background job that inherited SIGINT ignored.
    before_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        done = []
        with pytest.raises(KeyboardInterrupt), signals_deferred():
            os.kill(os.getpid(), sig)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            done.append("teardown finished")
        assert done == ["teardown finished"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
        assert signal.getsignal(signal.SIGTERM) is _as_ctrl_c
    finally:
        signal.signal(signal.SIGTERM, before)
        signal.signal(signal.SIGINT, before_int)


KILLED_PARENT = """
import sys, time
from orchestrator.deploy.local import LocalProcessTarget
from orchestrator.candidate import Candidate
from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.engines import resolve_settings
from orchestrator.engines.base import LaunchPlan, ProcessSpec, ReplicaPlan
from orchestrator.layout import parse_layout
engine = ("import os, subprocess, sys, time; "
          "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
          "print(os.getpid(), c.pid, flush=True); time.sleep(300)")
replica = ReplicaPlan((ProcessSpec(argv=(sys.executable, "-c", engine)),), "http://127.0.0.1:9/health",
                      "http://127.0.0.1:9/v1")
settings = resolve_settings("sim", load_gpu("h100-sxm"), load_model("qwen2.5-7b"))
candidate = Candidate(parse_layout("tp1"), settings)
dep = LocalProcessTarget(sys.argv[1], term_grace_s=2).deploy(LaunchPlan("sim", candidate, (replica,)))
print(dep.handles[0].popen.pid, flush=True)
time.sleep(300)
"""


def test_engines_and_their_workers_die_with_a_kill_9_of_orch(tmp_path: Path) -> None:
    orch = subprocess.Popen(
        [sys.executable, "-c", KILLED_PARENT, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert orch.stdout is not None
    supervisor = int(orch.stdout.readline())
    log = next(tmp_path.glob("*.log"))
    deadline = time.monotonic() + 60
    while len(log.read_text().splitlines()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    engine, worker = map(int, log.read_text().splitlines()[1].split())
    assert _alive(engine) and _alive(worker)
    orch.kill()  # SIGKILL: no teardown runs in orch
    orch.wait()
    deadline = time.monotonic() + 60
    while any(map(_alive, (supervisor, engine, worker))) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(map(_alive, (supervisor, engine, worker)))


def test_an_engine_log_flood_is_bounded_and_keeps_its_last_lines(tmp_path: Path) -> None:
    # An engine that logs without end (a traceback per refused connection under overload) must not
    # fill the disk: the log keeps its first and last part, says how much it left out, and the last
    # line (what a failure is read from) survives into the error.
    from orchestrator.deploy.supervise import HEAD_BYTES, TAIL_BYTES

    code = ("import sys\nline = 'Traceback: too many open files ' * 4 + '\\n'\n"
            "for _ in range(200_000): sys.stdout.write(line)\n"
            "print('the last words', flush=True); sys.exit(3)")
    proc = ProcessSpec(argv=(sys.executable, "-c", code))
    plan = LaunchPlan(
        "sim", candidate("tp1", "sim"),
        (ReplicaPlan((proc,), "http://127.0.0.1:9/health", "http://127.0.0.1:9/v1"),),
    )
    with (
        pytest.raises(EngineDied, match="the last words"),
        deployed(LocalProcessTarget(tmp_path), plan, timeout_s=120),
    ):
        pass
    (log,) = tmp_path.glob("*.log")
    size = log.stat().st_size
    assert size < HEAD_BYTES + TAIL_BYTES + 4096  # 25 MB written, about 10 MB kept
    text = log.read_text()
    assert "bytes of engine output left out here" in text
    assert text.rstrip().endswith("the last words")
