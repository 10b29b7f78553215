"""Local target: each ProcessSpec in its own process group under a supervisor (deploy/supervise.py)
that ends the group when orch's process ends, however it ends; logs in the run directory; the ports
checked free before launch and the health answer checked to come from our own process; teardown by
process group (SIGTERM, then SIGKILL after a grace period). Never kills by name."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from orchestrator.deploy.base import Deployment, Endpoint, split_endpoints
from orchestrator.deploy.ownership import foreign_listener, port_in_use
from orchestrator.engines import LaunchPlan, ProcessSpec, secret_values
from orchestrator.errors import DeployError, EngineDied

LOG_TAIL_LINES = 15
TERM_GRACE_S = 10.0
POLL_S = 0.2
SUPERVISOR = Path(__file__).with_name("supervise.py")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0")


@dataclass
class LocalProcess:
    """A local deployment's handle: one supervised process (its group holds the engine and workers)."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path


# Engine programs may live in their own virtualenv (vLLM for CPU does, in CI): ORCH_<NAME>_BIN names it.
_PROGRAM_ENV = {"vllm": "ORCH_VLLM_BIN", "sglang": "ORCH_SGLANG_BIN", "ray": "ORCH_RAY_BIN"}


def program_argv(spec: ProcessSpec) -> list[str]:
    """The argv to exec: "python" is orch's own interpreter; an engine program may be named by
    ORCH_<NAME>_BIN (its own virtualenv), else it must be on PATH."""
    argv = list(spec.argv)
    if not argv:
        raise DeployError("empty argv in the launch plan")
    if argv[0] == "python":  # the engines say "python"; here that is orch's own interpreter
        argv[0] = sys.executable
        return argv
    var = _PROGRAM_ENV.get(argv[0])
    if var and os.environ.get(var):
        argv[0] = os.environ[var]
    elif shutil.which(argv[0]) is None:
        hint = f"; or set {var} to its path" if var else ""
        raise DeployError(f"{argv[0]}: not found on PATH; install it on this machine{hint}")
    return argv


def exit_status(code: int | None) -> str:
    """How an engine ended, from its supervisor's status (which mirrors the engine's: supervise.py):
    `exited with code 1`, or `was killed by signal 9 (SIGKILL, the out-of-memory killer's signal)`."""
    if code is None or code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "unknown signal"
    why = ", the out-of-memory killer's signal" if -code == signal.SIGKILL else ""
    return f"was killed by signal {-code} ({name}{why})"


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


class LocalProcessTarget:
    def __init__(self, workdir: str | Path, *, term_grace_s: float = TERM_GRACE_S) -> None:
        self.workdir = Path(workdir)
        self.term_grace_s = term_grace_s

    def deploy(self, plan: LaunchPlan) -> Deployment[LocalProcess]:
        self.workdir.mkdir(parents=True, exist_ok=True)
        _check_ports_free(plan)
        procs: list[LocalProcess] = []
        try:
            for r, replica in enumerate(plan.replicas):
                for i, spec in enumerate(replica.processes):
                    what = spec.role if replica.role == "serve" else f"{replica.role}-{spec.role}"
                    name = f"{plan.engine}-{_file_name(plan.name)}-r{r}-p{i}-{what}"
                    procs.append(self._start(name, spec))
        except BaseException as exc:  # Ctrl-C half way included: what started must not outlive this
            self._stop(procs)
            if isinstance(exc, OSError):
                raise DeployError(f"could not start {plan.engine} for {plan.name}: {exc}") from exc
            raise
        endpoints, backends = split_endpoints(
            plan, lambda r, rep: Endpoint(r, rep.openai_base_url, rep.health_url))
        return Deployment(plan, endpoints, str(self.workdir), tuple(procs), backends)

    def _start(self, name: str, spec: ProcessSpec) -> LocalProcess:
        log_path = self.workdir / f"{name}.log"
        argv = program_argv(spec)
        with log_path.open("wb") as log:
            log.write(("$ " + " ".join(argv) + "\n").encode())
            log.flush()
            # The supervisor leads a new session and process group that the engine joins; its stdin
            # is a pipe only this process writes to, so it sees EOF when orch ends in any way.
            popen = subprocess.Popen(
                [sys.executable, "-I", str(SUPERVISOR), f"{self.term_grace_s:g}", "--", *argv],
                # Secrets are read from orch's environment now and go only into the child's.
                env={**os.environ, **spec.env_dict, **secret_values(spec.secret_env, os.environ)},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.PIPE,
                start_new_session=True,
            )
        return LocalProcess(name, popen, log_path)

    def wait_ready(self, deployment: Deployment[LocalProcess], timeout_s: float) -> None:
        procs = list(deployment.handles)
        pending = {ep.health_url for ep in deployment.servers}
        deadline = time.monotonic() + timeout_s
        while pending:
            for p in procs:
                code = p.popen.poll()
                if code is not None:
                    raise EngineDied(
                        f"{p.name} {exit_status(code)} before it was ready; "
                        f"last log lines ({p.log_path}):\n{tail(p.log_path)}"
                    )
            for url in list(pending):
                if healthy(url):
                    _check_ours(url, procs)
                    pending.discard(url)
            if not pending:
                return
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {p.log_path}\n{tail(p.log_path)}" for p in procs[:2])
                raise DeployError(
                    f"{deployment.name}: not healthy after {timeout_s:g} s "
                    f"({', '.join(sorted(pending))}); last log lines:\n{logs}"
                )
            time.sleep(POLL_S)

    def check_alive(self, deployment: Deployment[LocalProcess]) -> None:
        for h in deployment.handles:
            if h.popen.poll() is not None:
                raise EngineDied(
                    f"{h.name} {exit_status(h.popen.returncode)} during the measurement; "
                    f"last log lines ({h.log_path}):\n{tail(h.log_path)}"
                )

    def teardown(self, deployment: Deployment[LocalProcess]) -> None:
        self._stop(list(deployment.handles))

    def _stop(self, procs: list[LocalProcess]) -> None:
        for p in procs:
            _signal_group(p.popen, signal.SIGTERM)
        deadline = time.monotonic() + self.term_grace_s
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        for p in procs:
            # Children of the engine (workers) share its process group: kill the group, not a name.
            _signal_group(p.popen, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=5)
            if p.popen.stdin is not None:
                with contextlib.suppress(OSError):
                    p.popen.stdin.close()  # the supervisor is gone; nothing left for it to guard


def _file_name(name: str) -> str:
    """A candidate's name as part of a file name: `p:tp4+d:tp4` -> `p-tp4-d-tp4`."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "candidate"


def _signal_group(popen: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, sig)  # start_new_session: the group id is the leader's pid


def _check_ports_free(plan: LaunchPlan) -> None:
    """A server already on one of the plan's ports would answer our health checks: refuse up front."""
    for replica in plan.replicas:
        url = urlsplit(replica.health_url)
        host = url.hostname or "127.0.0.1"
        ports = {p for spec in replica.processes for p in spec.ports}
        if url.port is not None:
            ports.add(url.port)
        busy = sorted(p for p in ports if port_in_use(p, host))
        if busy:
            raise DeployError(
                f"{plan.name}: port {', '.join(map(str, busy))} on {host} is already in use by "
                "another process; stop it or let orch pick free ports (it does unless a base port is set)"
            )


def _check_ours(health_url: str, procs: list[LocalProcess]) -> None:
    """The health answer must come from a process we started, not from a server that took the port."""
    url = urlsplit(health_url)
    if url.port is None or url.hostname not in LOCAL_HOSTS:
        return
    for p in procs:
        if p.popen.poll() is not None:  # ours already died: whoever answered is not ours
            raise EngineDied(
                f"{p.name} {exit_status(p.popen.returncode)}, yet {health_url} answers: another "
                f"process serves port {url.port}; last log lines ({p.log_path}):\n{tail(p.log_path)}"
            )
    if foreign_listener(url.port, [p.popen.pid for p in procs]):
        raise DeployError(
            f"{health_url} is answered by a process orch did not start (port {url.port} is held by "
            "another server); stop it or use other ports"
        )


def healthy(url: str) -> bool:
    """The health URL answers 2xx now."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return 200 <= int(resp.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False
