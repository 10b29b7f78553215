"""A small keep-alive HTTP/1.1 client on asyncio protocols: the load generator's request hot path.

Why not aiohttp: measured on the 2-core machine against nginx (docs/bench.md), a plain aiohttp loop
that parses nothing cost 81-89 us of CPU per streamed 32-chunk request, this client with every
event decoded 83-97 us, of which decoding is about 50 us; its ceiling is 2x the plain loop's. It
does only what a benchmark needs: POST with a fixed header block, the status line and the framing
headers (Content-Length, Transfer-Encoding: chunked, Connection: close), and the body as it
arrives, each read timestamped with time.perf_counter() in data_received, before any parsing. SSE
and JSON are decoded later (orchestrator.loadgen.decode).

Control calls (health, metrics, models) keep using a general-purpose library; this is for the load.

A hostile or broken server cannot hang it or grow its memory: every length on the wire is checked
before it is used (orchestrator.loadgen.framing), every line it waits for has a length limit, the
body has a cap (max_response_bytes), and the per-request deadline is a timer independent of
arrivals. A violation ends the exchange with error "protocol" (not HTTP/1.1 framing) or "too_large"
(over the cap); see orchestrator.loadgen.records for every kind.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from typing import cast

from orchestrator.loadgen.exchange import Exchange, Origin
from orchestrator.loadgen.framing import (
    DEFAULT_MAX_RESPONSE_BYTES,
    MAX_HEAD_BYTES,
    MAX_LINE_BYTES,
    READ_COST_BYTES,
    SIZES_SEEN,
    chunk_size,
    parse_head,
    status_of,
)

__all__ = ["Exchange", "Http1Client", "Origin"]

_HEAD, _LENGTH, _CLOSE, _SIZE, _DATA, _CRLF, _TRAILER = range(7)


class _Conn(asyncio.Protocol):
    """One connection; carries one exchange at a time (no pipelining)."""

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.ex: Exchange | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.buf = b""
        self.state = _HEAD
        self.remaining = 0
        self.keep_alive = True
        self.closed = False
        self.reused = False
        self.got_bytes = False
        self.room = DEFAULT_MAX_RESPONSE_BYTES  # what the current exchange may still keep (bytes)
        self.head_bytes = 0  # head bytes (interim responses, trailers) of the current exchange
        self.progress_s = 0.0  # when the exchange last made progress: sent, head, a whole SSE event
        self.idle_timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        ex = self.ex
        if ex is None:  # bytes nobody asked for: the connection is no longer usable
            self._drop()
            return
        self.got_bytes = True
        ex.end_s = now
        if b"\n\n" in data or b"\r\n\r\n" in data:  # an event ended (or a head): not idle
            self.progress_s = now
        if self.state == _HEAD:
            data = self._head(data)
            if self.ex is None or self.state == _HEAD:  # finished (bodiless) or head still incomplete
                return
        if not data:
            return
        state = self.state
        if state == _LENGTH:  # the length itself was taken from the cap when the head arrived
            if len(data) > self.remaining:  # bytes past the body: framing is off, do not reuse
                self.keep_alive = False
                data = data[: self.remaining]
            self.room -= READ_COST_BYTES
            if self.room < 0:  # a body dribbled in tiny reads
                self.abort("too_large")
                return
            self.remaining -= len(data)
            ex.reads.append((now, data))
            if self.remaining == 0:
                self._finish()
        elif state == _CLOSE:
            self.room -= len(data) + READ_COST_BYTES
            if self.room < 0:  # an endless body: keep what fits, then stop
                keep = len(data) + self.room
                if keep > 0:
                    ex.reads.append((now, data[:keep]))
                self.abort("too_large")
                return
            ex.reads.append((now, data))
        else:
            self._chunked(now, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        ex = self.ex
        if ex is None:
            return
        if self.state == _CLOSE:
            ex.complete = True
        elif self.reused and not self.got_bytes:
            ex.error = "stale"  # the server had closed this idle connection: the caller retries once
        else:
            ex.error = ex.error or "connection"
        self._wake()

    # -- one exchange
    def start(self, ex: Exchange, waiter: asyncio.Future[None], request: bytes,
              max_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> None:
        self.ex, self.waiter = ex, waiter
        self.buf, self.state, self.got_bytes = b"", _HEAD, False
        self.room, self.head_bytes = max_bytes, 0
        self.progress_s = time.perf_counter()
        assert self.transport is not None
        self.transport.write(request)

    def watch_idle(self, ex: Exchange, idle_s: float) -> None:
        """End `ex` as "stalled" once idle_s passes with no progress (a head, a whole SSE event): a
        server dribbling bytes or holding a connection open cannot keep the request alive."""
        if self.ex is not ex:
            return
        quiet = time.perf_counter() - self.progress_s
        if quiet >= idle_s:
            self.abort("stalled")
            return
        loop = asyncio.get_running_loop()
        self.idle_timer = loop.call_later(idle_s - quiet, self.watch_idle, ex, idle_s)

    def stop_watching(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None

    def abort(self, error: str) -> None:
        if self.ex is not None and self.ex.error is None:
            self.ex.error = error
        self._drop()
        self._wake()

    def abort_for(self, ex: Exchange, error: str) -> None:
        """abort, but only while this connection still carries `ex` (it may serve another by now)."""
        if self.ex is ex:
            self.abort(error)

    def _head(self, data: bytes) -> bytes:
        """Parse the status line and headers; return the body bytes that followed them."""
        buf = self.buf + data if self.buf else data
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if self.head_bytes + len(buf) > MAX_HEAD_BYTES:  # endless header lines
                    self.abort("protocol")
                    return b""
                self.buf = buf
                return b""
            self.head_bytes += end + 4
            if self.head_bytes > MAX_HEAD_BYTES:  # also endless interim responses
                self.abort("protocol")
                return b""
            lines = buf[:end].split(b"\r\n")
            buf = buf[end + 4 :]
            status = status_of(lines[0])
            if status is None:
                self.abort("protocol")
                return b""
            if status >= 200:
                break
            # interim response (100 Continue, 103 Early Hints): the real one follows
        assert self.ex is not None
        self.ex.status = status
        head = parse_head(lines, status)
        if head is None:
            self.abort("protocol")
            return b""
        self.buf, self.keep_alive = b"", head.keep_alive
        if head.chunked:
            self.state = _SIZE
        elif head.length is None:
            self.state = _CLOSE
        elif head.length > self.room:
            self.abort("too_large")
            return b""
        else:
            self.room -= head.length
            self.state, self.remaining = _LENGTH, head.length
            if head.length == 0:
                self._finish()
        return buf

    def _chunked(self, now: float, data: bytes) -> None:
        """Strip chunked framing incrementally; the body bytes of this read become one entry."""
        assert self.ex is not None
        buf = self.buf + data if self.buf else data
        pos, n, out = 0, len(buf), []
        done = False
        error: str | None = None
        room = self.room - READ_COST_BYTES  # (a local: this loop is the hot path)
        while pos < n:
            state = self.state
            if state == _DATA:
                take = min(self.remaining, n - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self.remaining -= take
                if self.remaining == 0:
                    self.state = _CRLF
            elif state == _CRLF:
                if n - pos < 2:
                    break
                if not buf.startswith(b"\r\n", pos):  # the chunk was longer than its size said
                    error = "protocol"
                    break
                pos += 2
                self.state = _SIZE
            else:  # _SIZE or _TRAILER: a CRLF-terminated line
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    limit = MAX_LINE_BYTES if state == _SIZE else MAX_HEAD_BYTES - self.head_bytes
                    if n - pos > limit:  # an endless chunk-size or trailer line
                        error = "protocol"
                    break
                line, pos = buf[pos:eol], eol + 2
                if state == _TRAILER:
                    self.head_bytes += len(line) + 2
                    if not line:
                        done = True
                        break
                    if self.head_bytes > MAX_HEAD_BYTES:  # endless trailers
                        error = "protocol"
                        break
                    continue
                size = SIZES_SEEN.get(line)
                if size is None:
                    size = chunk_size(line)
                    if size < 0:
                        error = "protocol"
                        break
                if size == 0:
                    self.state = _TRAILER
                elif size > room:
                    error = "too_large"  # refused before its bytes arrive
                    break
                else:
                    room -= size
                    self.state, self.remaining = _DATA, size
        if out:
            self.ex.reads.append((now, out[0] if len(out) == 1 else b"".join(out)))
        self.room = room
        if room < 0 and error is None:  # a body dribbled in tiny reads
            error = "too_large"
        if error is not None:
            self.abort(error)
            return
        self.buf = buf[pos:]
        if done:
            self._finish()

    def _finish(self) -> None:
        assert self.ex is not None
        self.ex.complete = True
        reusable = self.keep_alive and not self.closed and not self.buf
        self._wake()
        if reusable:
            self.reused = True
            self.pool.release(self)
        else:
            self._drop()

    def _wake(self) -> None:
        waiter, self.ex, self.waiter = self.waiter, None, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _drop(self) -> None:
        self.closed = True
        self.pool.forget(self)
        if self.transport is not None:
            self.transport.abort()


class _Pool:
    """Idle keep-alive connections to one origin (most recently used first)."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.idle: list[_Conn] = []
        self.addr: tuple[str, int] | None = None
        self.ssl: ssl.SSLContext | None = ssl.create_default_context() if origin.scheme == "https" else None

    def release(self, conn: _Conn) -> None:
        self.idle.append(conn)

    def forget(self, conn: _Conn) -> None:
        if conn in self.idle:
            self.idle.remove(conn)

    async def connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        if self.addr is None:  # resolve once per pool, not per connection (getaddrinfo runs in a thread)
            infos = await loop.getaddrinfo(self.origin.host, self.origin.port, type=socket.SOCK_STREAM)
            sockaddr = infos[0][4]
            self.addr = (str(sockaddr[0]), int(sockaddr[1]))
        host, port = self.addr
        _, conn = await loop.create_connection(
            lambda: _Conn(self), host, port, ssl=self.ssl,
            server_hostname=self.origin.host if self.ssl else None,
        )
        return conn

    def close(self) -> None:
        for conn in list(self.idle):
            conn._drop()
        self.idle.clear()


class Http1Client:
    """POST requests over pooled keep-alive connections; one pool per origin. Use `async with`."""

    def __init__(self) -> None:
        self._pools: dict[Origin, _Pool] = {}

    async def post(self, origin: Origin, head: bytes, body: bytes, timeout_s: float,
                   max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                   idle_timeout_s: float | None = None) -> Exchange:
        """Send head (from Origin.head) + body; never raises for server or network faults.

        timeout_s bounds the whole exchange (connect, head, body) however the bytes arrive;
        idle_timeout_s bounds each silence (connect, the wait for the head, between whole SSE events):
        past it the exchange ends "stalled"; max_response_bytes caps the body (framing removed): a
        longer one ends with "too_large".
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        pool = self._pools.get(origin)
        if pool is None:
            pool = self._pools[origin] = _Pool(origin)
        request = head + str(len(body)).encode() + b"\r\n\r\n" + body
        for _ in range(2):  # a second try only when a reused idle connection turned out closed
            ex = Exchange()
            try:
                if pool.idle:
                    conn = pool.idle.pop()
                else:
                    by = deadline if idle_timeout_s is None else min(deadline, loop.time() + idle_timeout_s)
                    async with asyncio.timeout_at(by):
                        conn = await pool.connect()
            except TimeoutError:
                ex.error = "timeout" if loop.time() >= deadline else "stalled"
                return ex
            except OSError:
                ex.error = "connection"
                return ex
            waiter: asyncio.Future[None] = loop.create_future()
            conn.start(ex, waiter, request, max_response_bytes)
            timer = loop.call_at(deadline, conn.abort_for, ex, "timeout")
            if idle_timeout_s is not None:
                conn.idle_timer = loop.call_later(idle_timeout_s, conn.watch_idle, ex, idle_timeout_s)
            try:
                await waiter
            except asyncio.CancelledError:
                conn.abort_for(ex, "connection")
                raise
            finally:
                timer.cancel()
                conn.stop_watching()
            if ex.error != "stale":
                return ex
        ex.error = "connection"
        return ex

    async def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()

    async def __aenter__(self) -> Http1Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
