"""The load path's HTTP/1.1 client against raw TCP servers on 127.0.0.1 that write exact bytes.

The servers (tests/support/hostile_server.py) run in their own threads, so the client's event loop cannot
starve them; where a test needs two separate reads it waits for the client to have seen the first.
Hostile answers (negative or malformed chunk sizes, bad Content-Length, endless bodies, headers and
lines) must each end the request with a classified error, never by the per-request timeout, and
within the response cap.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import tracemalloc
from collections.abc import Sequence

import pytest

from orchestrator.loadgen.framing import MAX_HEAD_BYTES, MAX_LINE_BYTES
from orchestrator.loadgen.http1 import Exchange, Http1Client, Origin, _Conn, _Pool
from tests.support.alarm import alarm
from tests.support.hostile_server import Piece, RawServer, forever

GUARD_S = 60  # a request that is not over by then has hung (the timeouts below are 30 s)
CAP = 1024 * 1024  # the response cap of these tests; the default (64 MiB) is tested in cli/test_bench_cmd.py


async def _post(url: str, client: Http1Client | None = None, timeout_s: float = 30.0,
                cap: int = CAP) -> Exchange:
    origin = Origin.parse(url)
    own = client is None
    http = client or Http1Client()
    try:
        return await http.post(origin, origin.head({"Content-Type": "application/json"}), b"{}", timeout_s,
                               cap)
    finally:
        if own:
            await http.close()


def _body(ex: Exchange) -> bytes:
    return b"".join(data for _, data in ex.reads)


def _answer(
    pieces: Sequence[Piece], close: bool = False, timeout_s: float = 30.0, cap: int = CAP
) -> Exchange:
    with RawServer(lambda _: (pieces, close)) as srv, alarm(GUARD_S):
        return asyncio.run(_post(srv.url, timeout_s=timeout_s, cap=cap))


CHUNKED = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"5\r\nhello\r\n",
           b"6;ext=1\r\n world\r\n", b"0\r\n\r\n"]  # fmt: skip


def test_chunked_connection_reused() -> None:
    async def main(url: str) -> list[Exchange]:
        async with Http1Client() as http:
            return [await _post(url, http) for _ in range(3)]

    with RawServer(lambda _: (CHUNKED, False)) as srv, alarm(GUARD_S):
        exs = asyncio.run(main(srv.url))
        accepted = srv.accepted
    for ex in exs:
        assert ex.status == 200 and ex.complete and ex.error is None
        assert _body(ex) == b"hello world"
        times = [t for t, _ in ex.reads]
        assert times == sorted(times) and ex.end_s is not None and ex.end_s >= times[-1]
    assert accepted == 1  # keep-alive: one connection for three sequential requests


def test_each_read_timestamped_when_it_arrives() -> None:
    """The server holds the second chunk until the client has the first: two reads, in order."""
    gate = threading.Event()
    pieces: list[Piece] = [CHUNKED[0] + CHUNKED[1], gate, *CHUNKED[2:]]

    async def main(url: str) -> tuple[Exchange, float]:
        loop = asyncio.get_running_loop()
        origin = Origin.parse(url)
        pool = _Pool(origin)
        conn = await pool.connect()
        ex, waiter = Exchange(), loop.create_future()
        conn.start(ex, waiter, origin.head({}) + b"2\r\n\r\n{}")
        while not ex.reads:
            await asyncio.sleep(0.001)
        released = loop.time()
        gate.set()
        await asyncio.wait_for(waiter, 30)
        pool.close()
        conn._drop()
        return ex, released

    with RawServer(lambda _: (pieces, False)) as srv, alarm(GUARD_S):
        ex, _ = asyncio.run(main(srv.url))
    assert ex.complete and [d for _, d in ex.reads] == [b"hello", b" world"]
    assert ex.reads[0][0] < ex.reads[1][0]


def test_content_length_close_delimited_and_interim_response() -> None:
    a = _answer([b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab", b"cd"])
    b = _answer([b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", b"data: x\n\n"], close=True)
    c = _answer([b"HTTP/1.1 204 No Content\r\n\r\n"])  # no body, and no wait for one
    assert a.status == 200 and a.complete and _body(a) == b"abcd"
    assert b.status == 200 and b.complete and b.error is None and _body(b) == b"data: x\n\n"
    assert c.status == 204 and c.complete and c.error is None and _body(c) == b""


def test_server_closing_idle_connection_is_retried_once() -> None:
    resp = [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]

    async def main(url: str) -> tuple[Exchange, Exchange]:
        async with Http1Client() as http:
            first = await _post(url, http)
            # The server closed the connection after answering; let the close arrive first.
            for _ in range(3000):
                if not http._pools[Origin.parse(url)].idle:
                    break
                await asyncio.sleep(0.01)
            second = await _post(url, http)
        return first, second

    with RawServer(lambda _: (resp, True)) as srv, alarm(GUARD_S):
        first, second = asyncio.run(main(srv.url))
        accepted = srv.accepted
    assert first.complete and second.complete and _body(second) == b"ok"
    assert accepted == 2


OK_CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
OK_LENGTH = b"HTTP/1.1 200 OK\r\nContent-Length: "


@pytest.mark.parametrize(
    ("pieces", "close", "error"),
    [
        ([OK_CHUNKED, b"zz\r\nhello\r\n"], False, "protocol"),
        ([OK_CHUNKED, b"-6\r\nab\r\n"], False, "protocol"),  # sent the old parser backwards forever
        ([OK_CHUNKED, b"-5\r\nhello\r\n"], False, "protocol"),
        ([OK_CHUNKED, b"0x5\r\nhello\r\n"], False, "protocol"),
        ([OK_CHUNKED, b"5_0\r\nhello\r\n"], False, "protocol"),
        ([OK_CHUNKED, b"\r\nhello\r\n"], False, "protocol"),
        ([OK_CHUNKED, b"3\r\nhello\r\n"], False, "protocol"),  # data longer than its size
        ([OK_CHUNKED, b"f" * 40 + b"\r\n"], False, "protocol"),
        ([OK_CHUNKED, b"5\r\nhel"], True, "connection"),
        ([OK_LENGTH + b"10\r\n\r\nabc"], True, "connection"),
        ([OK_LENGTH + b"abc\r\n\r\nabc"], False, "protocol"),
        ([OK_LENGTH + b"-1\r\n\r\nabc"], False, "protocol"),
        ([OK_LENGTH + b"+3\r\n\r\nabc"], False, "protocol"),
        ([OK_LENGTH + b"3\r\nContent-Length: 4\r\n\r\nabcd"], False, "protocol"),
        ([OK_LENGTH + b"99999999999999999999999\r\n\r\n"], False, "protocol"),
        ([OK_LENGTH + str(CAP + 1).encode() + b"\r\n\r\n"], False, "too_large"),
        ([OK_CHUNKED, f"{CAP + 1:x}\r\n".encode()], False, "too_large"),
        ([b"garbage\r\n\r\n"], False, "protocol"),
        ([b"HTTP/1.1 2_0 OK\r\n\r\n"], False, "protocol"),
        ([b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70000], False, "protocol"),
    ],
    ids=["bad-chunk-size", "negative-chunk-size", "negative-chunk-size-2", "hex-prefix-chunk-size",
         "underscore-chunk-size", "empty-chunk-size", "chunk-longer-than-size", "chunk-size-overflow",
         "dropped-mid-chunk", "short-body", "non-numeric-length", "negative-length", "signed-length",
         "conflicting-lengths", "huge-length", "length-over-cap", "chunk-over-cap", "no-status-line",
         "bad-status-code", "head-too-large"],
)
def test_faults(pieces: list[Piece], close: bool, error: str) -> None:
    ex = _answer(pieces, close)
    assert ex.error == error and not ex.complete
    assert len(_body(ex)) <= CAP


ENDLESS = [
    ([OK_CHUNKED, forever(b"4000\r\n" + b"x" * 0x4000 + b"\r\n")], "too_large"),
    ([b"HTTP/1.1 200 OK\r\n\r\n", forever(b"data: x\n\n" * 1000)], "too_large"),  # close-delimited
    ([b"HTTP/1.0 200 OK\r\n\r\n", forever(b"y" * 65536)], "too_large"),
    ([OK_CHUNKED, b"1", forever(b"1" * 1024)], "protocol"),  # a chunk-size line that never ends
    ([OK_CHUNKED, b"1;", forever(b"e" * 1024)], "protocol"),  # ... made of extensions
    ([b"HTTP/1.1 200 OK\r\n", forever(b"X-A: b\r\n")], "protocol"),  # endless header lines
    ([b"HTTP/1.1 200 OK\r\nX: ", forever(b"a" * 1024)], "protocol"),  # one endless header line
    ([forever(b"HTTP/1.1 100 Continue\r\n\r\n")], "protocol"),  # endless interim responses
    ([OK_CHUNKED, b"2\r\nhi\r\n0\r\n", forever(b"T: x\r\n")], "protocol"),  # endless trailers
]


@pytest.mark.parametrize(("pieces", "error"), ENDLESS,
                         ids=["chunked-body", "close-body", "http10-body", "chunk-size-line", "extensions",
                              "header-lines", "header-line", "interim", "trailers"])
def test_endless_answers_end_classified_in_bounded_memory(pieces: list[Piece], error: str) -> None:
    tracemalloc.start()
    try:
        ex = _answer(pieces, timeout_s=30.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ex.error == error, ex.error  # ended by the client's limits, not by the 30 s timeout
    assert len(_body(ex)) <= CAP
    assert peak < 4 * CAP + 8 * 1024 * 1024, peak  # the cap, one read buffer and a few copies
    assert max(MAX_HEAD_BYTES, MAX_LINE_BYTES) < CAP


@pytest.mark.parametrize(
    ("head", "piece"),
    [(OK_CHUNKED, b"1\r\nx\r\n"), (OK_LENGTH + b"60000\r\n\r\n", b"x"), (b"HTTP/1.0 200 OK\r\n\r\n", b"x")],
    ids=["chunked", "content-length", "close-delimited"],
)
def test_a_body_dribbled_one_byte_per_read_meets_the_cap(head: bytes, piece: bytes) -> None:
    """Each read costs its list entry too, so tiny reads cannot grow memory 100x past the cap."""
    cap = 64 * 1024

    async def main() -> tuple[Exchange, int]:
        conn = _Conn(_Pool(Origin.parse("http://127.0.0.1:1/")))
        conn.connection_made(_Transport())  # type: ignore[arg-type]
        ex = Exchange()
        conn.start(ex, asyncio.get_running_loop().create_future(), b"", cap)
        conn.data_received(head)
        reads = 0
        while ex.error is None and reads < cap:
            conn.data_received(piece)
            reads += 1
        return ex, reads

    ex, reads = asyncio.run(main())
    assert ex.error == "too_large" and reads <= cap // 256 + 1, reads
    assert len(_body(ex)) <= cap


def test_timeout_bounds_a_request_whose_bytes_keep_arriving() -> None:
    """A stream that never ends but never passes the cap: the per-request timeout ends it."""
    trickle = forever(b"9\r\ndata: x\n\n\r\n", every_s=0.001)
    ex = _answer([OK_CHUNKED, trickle], timeout_s=0.5, cap=64 * 1024 * 1024)
    assert ex.error == "timeout" and ex.status == 200 and not ex.complete
    assert _body(ex).startswith(b"data: x\n\n")


def test_timeout_and_refused() -> None:
    slow = _answer([b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab"], timeout_s=0.3)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket closes
    refused = asyncio.run(_post(f"http://127.0.0.1:{port}/v1/completions"))
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


@pytest.mark.parametrize(
    ("line", "size"),
    [(b"0", 0), (b"1f", 31), (b"1F;name=value", 31), (b"a ; x", 10), (b"-5", -1), (b"+5", -1),
     (b" 5", -1), (b"0x5", -1), (b"5_0", -1), (b"", -1), (b";x", -1), (b"g", -1), (b"1" * 17, -1),
     (b"5;" + b"e" * 5000, -1)],
)
def test_chunk_size_lines(line: bytes, size: int) -> None:
    from orchestrator.loadgen.framing import chunk_size

    assert chunk_size(line) == size
    assert chunk_size(line) == size  # the second time from the cache of checked lines
