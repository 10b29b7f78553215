"""A loopback port carried to one pod's port through the API server's port-forward (as kubectl does).

When orch runs outside the cluster it cannot reach pod IPs or Service names, so each leader pod gets a
local listener on 127.0.0.1; every accepted connection opens its own port-forward stream
(``kubernetes.stream.portforward``, a WebSocket to the API server) and bytes are copied both ways by two
threads. The pod is named once it is ready, so the listener (and the endpoint URL) can exist before.
Each stream gets its own API client: ``portforward`` swaps the client's request function while it runs,
so a client shared with other threads (or another stream) would send their calls down the WebSocket path.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Any


class PodForward:
    def __init__(self, new_core_api: Callable[[], Any], namespace: str, remote_port: int) -> None:
        self._new_core, self._namespace, self._remote_port = new_core_api, namespace, remote_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.local_port: int = self._listener.getsockname()[1]
        self.pod: str | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name=f"port-forward :{self.local_port}", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._carry, args=(conn,), daemon=True).start()

    def _carry(self, conn: socket.socket) -> None:
        from kubernetes.stream import portforward

        with self._lock:
            self._open.add(conn)
        try:
            if self.pod is None:
                return  # not ready yet: the client sees a closed connection and retries
            core = self._new_core()
            pf = portforward(
                core.connect_get_namespaced_pod_portforward,
                self.pod, self._namespace, ports=str(self._remote_port),
            )  # fmt: skip
            remote = pf.socket(self._remote_port)
            remote.setblocking(True)
            back = threading.Thread(target=_copy, args=(remote, conn), daemon=True)
            back.start()
            _copy(conn, remote)
            back.join(timeout=30)
            pf.close()
        except Exception:
            pass
        finally:
            with self._lock:
                self._open.discard(conn)
            with contextlib.suppress(OSError):
                conn.close()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for conn in list(self._open):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)


def _copy(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)
