"""A free TCP port on 127.0.0.1, for the real servers the tests start (never a fixed port: several test
runs share this machine)."""

from __future__ import annotations

import socket

# Ray hands its workers ports 10002-19999 (its default min/max_worker_port); a port from there could be
# taken by a Ray worker of a test running beside, so none is handed out.
RAY_WORKER_PORTS = range(10002, 20000)


def free_port() -> int:
    """A port the OS reports free now (bind to 0, read it, close), outside Ray's worker range."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in RAY_WORKER_PORTS:
            return port
    raise OSError("no free port outside Ray's worker range 10002-19999")
