"""Whose server answers on a port: so that a health answer from a process orch did not start (another
server already listening there) is caught before anything is measured against it.

Linux only, from /proc: the listening sockets on the port (/proc/net/tcp, tcp6) and the sockets held
by the processes of our process groups (/proc/PID/fd). Where /proc cannot tell (another OS, another
network namespace, the port not listened on from this machine), the answer is "unknown", never a false
alarm."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Iterable
from pathlib import Path

_LISTEN = "0A"
PROC = Path("/proc")


def port_in_use(port: int, host: str) -> bool:
    """True only when binding the port fails with "address in use" (an address that is not this
    machine's, or any other failure, is not proof of a foreign server)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def listening_inodes(port: int, proc: Path = PROC) -> set[int]:
    """Socket inodes listening on `port` on any address, from /proc/net/tcp and tcp6."""
    found: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            with contextlib.suppress(ValueError):
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    found.add(int(fields[9]))
    return found


def group_pids(pgids: Iterable[int], proc: Path = PROC) -> set[int]:
    """Live processes whose process group is one of `pgids` (engines and the workers they spawned)."""
    wanted, out = set(pgids), set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) in wanted:
            out.add(int(entry.name))
    return out


def socket_inodes(pids: Iterable[int], proc: Path = PROC) -> set[int]:
    out: set[int] = set()
    for pid in pids:
        fd_dir = proc / str(pid) / "fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(fd_dir / name)
            except OSError:
                continue
            if target.startswith("socket:["):
                out.add(int(target[8:-1]))
    return out


def foreign_listener(port: int, pgids: Iterable[int], proc: Path = PROC) -> bool | None:
    """True: something listens on `port` and none of it is ours. False: one of ours listens there.
    None: /proc shows no listener (not this machine's socket, or no /proc): cannot tell."""
    listeners = listening_inodes(port, proc)
    if not listeners:
        return None
    return not listeners & socket_inodes(group_pids(pgids, proc), proc)
