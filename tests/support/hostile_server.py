"""A raw TCP server on 127.0.0.1 (free port) that answers each HTTP request with exact bytes.

It runs in its own threads, one per connection, so that a busy event loop in the test (the client's)
cannot starve it. Each request gets the pieces its script returns, written in order with a short
pause between them (so they tend to arrive as separate reads); a piece is bytes, a threading.Event
to wait for (the test sets it when it has seen what came before), or an iterator of bytes written
until the client goes away (an endless body, an endless header line ...). Then the server keeps the
connection for the next request, or closes it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import TracebackType

Piece = bytes | threading.Event | Iterable[bytes]
Script = Callable[[int], tuple[Sequence[Piece], bool]]  # request number -> (pieces, close after)
PAUSE_S = 0.002
GATE_TIMEOUT_S = 60.0


def forever(piece: bytes, every_s: float = 0.0) -> Iterator[bytes]:
    """The same bytes again and again (every_s apart): a body, header or line that never ends."""
    while True:
        yield piece
        if every_s:
            time.sleep(every_s)


class RawServer:
    """`with RawServer(script) as srv:` then srv.url; srv.accepted counts connections."""

    def __init__(self, script: Script, pause_s: float = PAUSE_S) -> None:
        self.script = script
        self.pause_s = pause_s
        self.accepted = 0
        self._count = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}/v1/completions"
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)
        self._accept.start()

    def __enter__(self) -> RawServer:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._accept.join(10)
        self._sock.close()
        for t in self._threads:
            t.join(10)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.accepted += 1
            t = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _read_request(self, conn: socket.socket, buf: bytes) -> bytes | None:
        """Read one request head and body; returns the bytes after it, None when the client left."""
        while b"\r\n\r\n" not in buf:
            data = self._recv(conn)
            if not data:
                return None
            buf += data
        head, _, buf = buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        while len(buf) < length:
            data = self._recv(conn)
            if not data:
                return None
            buf += data
        return buf[length:]

    def _recv(self, conn: socket.socket) -> bytes:
        while not self._stop.is_set():
            try:
                return conn.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return b""
        return b""

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(0.2)
        buf: bytes | None = b""
        try:
            while not self._stop.is_set():
                buf = self._read_request(conn, buf or b"")
                if buf is None:
                    return
                with self._lock:
                    n = self._count
                    self._count += 1
                pieces, close = self.script(n)
                conn.settimeout(GATE_TIMEOUT_S)  # a client slow to read (a busy machine) is no close
                for piece in pieces:
                    if isinstance(piece, threading.Event):
                        piece.wait(GATE_TIMEOUT_S)
                    elif isinstance(piece, bytes):
                        conn.sendall(piece)
                        time.sleep(self.pause_s)
                    else:
                        for part in piece:  # until the client closes (or the test ends)
                            if self._stop.is_set():
                                return
                            conn.sendall(part)
                if close:
                    return
                conn.settimeout(0.2)  # reads wake up now and then to see whether the test is over
        except OSError:  # the client went away (reset, broken pipe, timed out mid-send)
            return
        finally:
            conn.close()
