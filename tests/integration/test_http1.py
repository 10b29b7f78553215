"""The load path's HTTP/1.1 client against raw TCP servers on 127.0.0.1 that write exact bytes.

Each server answers from a script: a list of byte strings written with short pauses in between (so
they arrive as separate reads), then keep the connection, or close it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Sequence

import pytest

from orchestrator.loadgen.http1 import Exchange, Http1Client, Origin, _Conn, _Pool

Script = Callable[[int], tuple[Sequence[bytes], bool]]  # request number -> (pieces, close after)


async def _serve(script: Script) -> tuple[asyncio.Server, str, list[int]]:
    """A server that reads one request head+body at a time and answers from `script`."""
    accepted: list[int] = []
    count = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                pieces, close = script(count[0])
                count[0] += 1
                for piece in pieces:
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0.002)
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1/completions", accepted


async def _post(url: str, client: Http1Client | None = None, timeout_s: float = 5.0) -> Exchange:
    origin = Origin.parse(url)
    own = client is None
    http = client or Http1Client()
    try:
        return await http.post(origin, origin.head({"Content-Type": "application/json"}), b"{}", timeout_s)
    finally:
        if own:
            await http.close()


def _body(ex: Exchange) -> bytes:
    return b"".join(data for _, data in ex.reads)


CHUNKED = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"5\r\nhello\r\n",
           b"6;ext=1\r\n world\r\n", b"0\r\n\r\n"]  # fmt: skip


def test_chunked_reads_timestamped_and_connection_reused() -> None:
    async def main() -> None:
        server, url, accepted = await _serve(lambda _: (CHUNKED, False))
        try:
            async with Http1Client() as http:
                exs = [await _post(url, http) for _ in range(3)]
        finally:
            server.close()
        for ex in exs:
            assert ex.status == 200 and ex.complete and ex.error is None
            assert _body(ex) == b"hello world"
            times = [t for t, _ in ex.reads]
            assert len(times) == 2 and times[1] - times[0] >= 0.001  # two writes 2 ms apart: two reads
            assert ex.end_s is not None and ex.end_s >= times[-1]
        assert len(accepted) == 1  # keep-alive: one connection for three sequential requests

    asyncio.run(main())


def test_content_length_close_delimited_and_interim_response() -> None:
    async def main() -> None:
        length = [b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab", b"cd"]
        s1, url1, _ = await _serve(lambda _: (length, False))
        close_delim = [b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", b"data: x\n\n"]
        s2, url2, _ = await _serve(lambda _: (close_delim, True))
        try:
            a, b = await _post(url1), await _post(url2)
        finally:
            s1.close()
            s2.close()
        assert a.status == 200 and a.complete and _body(a) == b"abcd"
        assert b.status == 200 and b.complete and b.error is None and _body(b) == b"data: x\n\n"

    asyncio.run(main())


def test_server_closing_idle_connection_is_retried_once() -> None:
    async def main() -> None:
        # Keep-alive response, then the server closes the connection: the next request finds it dead.
        resp = [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]
        server, url, accepted = await _serve(lambda _: (resp, True))
        try:
            async with Http1Client() as http:
                first = await _post(url, http)
                await asyncio.sleep(0.05)  # let the close arrive
                second = await _post(url, http)
        finally:
            server.close()
        assert first.complete and second.complete and _body(second) == b"ok"
        assert len(accepted) == 2

    asyncio.run(main())


@pytest.mark.parametrize(
    ("pieces", "close", "error"),
    [
        ([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"zz\r\nhello\r\n"], False, "connection"),
        ([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"5\r\nhel"], True, "connection"),
        ([b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"], True, "connection"),
        ([b"garbage\r\n\r\n"], False, "connection"),
        ([b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70000], False, "connection"),
    ],
    ids=["bad-chunk-size", "dropped-mid-chunk", "short-body", "no-status-line", "head-too-large"],
)
def test_faults(pieces: list[bytes], close: bool, error: str) -> None:
    async def main() -> Exchange:
        server, url, _ = await _serve(lambda _: (pieces, close))
        try:
            return await _post(url, timeout_s=3.0)
        finally:
            server.close()

    ex = asyncio.run(main())
    assert ex.error == error and not ex.complete


def test_timeout_and_refused() -> None:
    async def main() -> tuple[Exchange, Exchange]:
        server, url, _ = await _serve(lambda _: ([b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"], False))
        try:
            slow = await _post(url, timeout_s=0.3)
        finally:
            server.close()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # nothing listens here once the socket closes
        refused = await _post(f"http://127.0.0.1:{port}/v1/completions")
        return slow, refused

    slow, refused = asyncio.run(main())
    assert slow.error == "timeout" and slow.status == 200 and _body(slow) == b"ab"
    assert refused.error == "connection" and refused.status == 0


class _Transport:
    """Just enough transport to feed a connection bytes by hand (what a socket read would deliver)."""

    def write(self, data: bytes) -> None:
        pass

    def abort(self) -> None:
        pass


def test_chunked_framing_split_at_every_byte() -> None:
    """However the bytes are cut into reads, the body and the end of the message come out the same."""
    wire = b"".join(CHUNKED) + b"HTTP/1.1 200 OK"  # the start of a stray next response must not leak in

    async def main() -> None:
        loop = asyncio.get_running_loop()
        end = len(wire) - len(b"HTTP/1.1 200 OK")
        for cut in range(1, end):
            conn = _Conn(_Pool(Origin.parse("http://127.0.0.1:1/")))
            conn.connection_made(_Transport())  # type: ignore[arg-type]
            ex, waiter = Exchange(), loop.create_future()
            conn.start(ex, waiter, b"")
            conn.data_received(wire[:cut])
            conn.data_received(wire[cut:end])
            assert ex.complete and ex.status == 200 and _body(ex) == b"hello world", cut
            assert waiter.done() and not conn.closed
            conn.data_received(wire[end:])  # bytes nobody asked for: the connection is dropped
            assert conn.closed and _body(ex) == b"hello world"

    asyncio.run(main())


def test_origin_parse_and_head() -> None:
    o = Origin.parse("https://example.com/v1/chat/completions?x=1")
    assert (o.scheme, o.host, o.port, o.path) == ("https", "example.com", 443, "/v1/chat/completions?x=1")
    head = Origin.parse("http://127.0.0.1:8000/v1/completions").head({"Authorization": "Bearer k"})
    assert head.startswith(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n")
    assert b"Authorization: Bearer k\r\n" in head and head.endswith(b"Content-Length: ")
    with pytest.raises(ValueError, match="not an http"):
        Origin.parse("ftp://x/")
