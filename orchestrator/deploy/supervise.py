"""The supervisor the local target puts between orch and each engine process, so that engines die
with orch however orch ends, `kill -9` included.

orch starts this file (by path, in a new session) with a pipe on its stdin whose only write end orch
holds. It starts the engine in its own process group (no new session), so a signal orch sends to the
group reaches the supervisor, the engine and every worker the engine spawned. Then it waits:
- the engine exits: end what the engine left in the group, then exit the way the engine did (same
  code, same signal), so orch sees the engine's status as its own child's;
- stdin reaches EOF while the engine runs: the kernel closes the pipe when orch's process ends,
  whatever killed it. SIGTERM to the group, a grace period, SIGKILL to the group (itself included).

Why not only PR_SET_PDEATHSIG on the engine: it reaches the engine alone (its workers survive) and
it fires when the forking *thread* ends, not the process. It is still set on the engine here (this
process is single-threaded), for the case where the supervisor itself is killed.

Standard library only, and run with `python -I`: it must start fast and not import orch.
Usage: python -I supervise.py GRACE_S -- ARGV...
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1
POLL_S = 0.2
HEAD_BYTES = 8 << 20  # engine output kept from the start of the log ...
TAIL_BYTES = 2 << 20  # ... and from its end; what lies between is counted, not kept


def _ignore(signum: int, frame: object) -> None:
    """SIGTERM/SIGINT to the group are for the engine; a caught (not ignored) signal returns to its
    default in the engine at exec, so the engine still ends on them."""


def _death_signal_setter() -> Callable[[], None] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):  # not Linux: the pipe alone has to do
        return None
    parent = os.getpid()

    def preexec() -> None:  # runs in the forked child, before exec
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


class _BoundedLog:
    """The engine's output into this process's stdout (the log file), at most HEAD_BYTES from the
    start and TAIL_BYTES from the end: an engine that logs a traceback per refused connection under
    overload cannot fill the disk, and the last lines (what a failure is diagnosed from) are kept."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd
        self.written = 0
        self.elided = 0
        self.tail = bytearray()

    def fds(self) -> list[int]:
        return [] if self.fd is None else [self.fd]

    def pump(self) -> None:
        assert self.fd is not None
        try:
            data = os.read(self.fd, 1 << 16)
        except OSError:
            data = b""
        if not data:  # every writer closed it (the engine and its workers ended)
            os.close(self.fd)
            self.fd = None
            return
        room = HEAD_BYTES - self.written
        if room > 0:
            _write_all(data[:room])
            self.written += min(room, len(data))
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > TAIL_BYTES:
                cut = len(self.tail) - TAIL_BYTES
                self.elided += cut
                del self.tail[:cut]

    def close(self) -> None:
        """Whatever is still readable, then the kept tail after a line saying what was left out."""
        while self.fd is not None and select.select([self.fd], [], [], 0)[0]:
            self.pump()
        if self.elided:
            _write_all(f"\n[orch: {self.elided:,} bytes of engine output left out here: the log keeps the "
                       f"first {HEAD_BYTES:,} and the last {TAIL_BYTES:,}]\n".encode())
        _write_all(bytes(self.tail))
        self.tail.clear()
        self.elided = 0


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(1, view)
        except OSError:  # the log cannot be written (disk full): the engine must still run
            return
        view = view[n:]


def _end_group(grace_s: float, child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(0, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(POLL_S / 2)
    os.killpg(0, signal.SIGKILL)  # the engine's workers too; this process ends here


def _exit_like(code: int) -> None:
    """Exit as the engine did: its code, or killed by its signal. SIGKILL and SIGSTOP cannot have a
    handler (setting one raises): they are already at their default, so only the kill is needed."""
    if code >= 0:
        sys.exit(code)
    with contextlib.suppress(OSError, ValueError):
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
    sys.exit(128 - code)  # a signal whose default is not to end the process


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: supervise.py GRACE_S -- ARGV...", file=sys.stderr)
        sys.exit(2)
    grace_s, cmd = float(argv[1]), argv[3:]
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _ignore)
    preexec = _death_signal_setter()
    try:
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, preexec_fn=preexec)
    except OSError as exc:
        print(f"orch: could not start {cmd[0]}: {exc}", file=sys.stderr, flush=True)
        sys.exit(127)
    assert child.stdout is not None
    log = _BoundedLog(child.stdout.fileno())
    while True:
        ready, _, _ = select.select([0, *log.fds()], [], [], POLL_S)
        if log.fd in ready:
            log.pump()
        code = child.poll()
        if code is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(0, signal.SIGTERM)  # workers the engine left behind; this process ignores it
            log.close()
            _exit_like(code)
        if 0 in ready and not os.read(0, 4096):
            log.close()
            _end_group(grace_s, child)  # orch is gone


if __name__ == "__main__":
    main(sys.argv)
