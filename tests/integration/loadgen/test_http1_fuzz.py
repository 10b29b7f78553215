"""Fuzzing the load path's HTTP/1.1 parser, SSE parser and decoder (hypothesis, bounded examples).

Every answer, however broken and however cut into reads, must end (each example runs under an alarm,
which also interrupts a synchronous endless loop), must never raise, must end in a classified error
kind or a complete exchange, and must keep no more body than the response cap. Responses are drawn
both from raw bytes and from a grammar of HTTP answers with hostile values in the framing fields,
since random bytes alone rarely get past the status line.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.loadgen.decode import Sent, to_record
from orchestrator.loadgen.framing import MAX_HEAD_BYTES
from orchestrator.loadgen.http1 import Exchange, Http1Client, Origin, _Conn, _Pool
from orchestrator.loadgen.records import ERROR_KINDS
from orchestrator.loadgen.sse import SSEParser
from tests.support.alarm import alarm
from tests.support.hostile_server import RawServer

CAP = 4096  # small, so that the grammar below reaches it
TRANSPORT_KINDS = {"protocol", "too_large", "connection"}
EXAMPLE_S = 20  # one example parses a few KB: far below this even on a busy machine
#: Under CI (ORCH_CI=1) the examples are the same on every run (derandomize): a CI failure is then a
#: change in the code, not a new draw. Elsewhere each run draws new ones and keeps failures in .hypothesis/.
CI: dict[str, Any] = {"derandomize": True, "database": None} if os.environ.get("ORCH_CI") == "1" else {}
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], **CI)


# -- a grammar of (mostly broken) HTTP answers
NUMBERS = [b"0", b"5", b"-1", b"-6", b"+5", b" 5", b"5 ", b"0x5", b"5_0", b"abc", b"", b"1e3", b"\xff",
           b"99999999999999999999", b"4097", b"4096", b"\t3"]  # fmt: skip
status_lines = st.one_of(
    st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.0 200 OK", b"HTTP/1.1 100 Continue", b"HTTP/1.1 204 No",
                     b"HTTP/1.1 500 Boom", b"HTTP/1.1 2_0 OK", b"HTTP/1.1 -20 X", b"garbage", b"HTTP/1.1"]),
    st.binary(max_size=30),
)
header_values = st.one_of(st.sampled_from(NUMBERS), st.binary(max_size=20),
                          st.integers(-(10**20), 10**20).map(lambda n: str(n).encode()))
headers = st.lists(
    st.tuples(st.sampled_from([b"Content-Length", b"Transfer-Encoding", b"Connection", b"X-Junk"]),
              st.one_of(header_values,
                        st.sampled_from([b"chunked", b"close", b"keep-alive", b"gzip, chunked"]))),
    max_size=4,
)
sizes = st.one_of(
    st.integers(0, 2 * CAP).map(lambda n: f"{n:x}".encode()),
    st.sampled_from(NUMBERS), st.binary(max_size=12),
    st.integers(-(10**6), -1).map(lambda n: f"{n:x}".encode()),
)
chunks = st.lists(
    st.tuples(sizes, st.sampled_from([b"", b";ext=1", b" ; a=b"]), st.binary(max_size=80),
              st.sampled_from([b"\r\n", b"", b"\n", b"xx"])
              ).map(lambda c: c[0] + c[1] + b"\r\n" + c[2] + c[3]),
    max_size=6,
).map(b"".join)
trailers = st.sampled_from([b"0\r\n\r\n", b"0\r\nT: v\r\n\r\n", b"0\r\n", b""])


@st.composite
def answers(draw: st.DrawFn) -> bytes:
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=3000))
    fields = b"".join(k + b": " + v + b"\r\n" for k, v in draw(headers))
    head = draw(status_lines) + b"\r\n" + fields + b"\r\n"
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" * draw(st.integers(0, 2))
    body = draw(chunks) + draw(trailers) if draw(st.booleans()) else draw(st.binary(max_size=2 * CAP))
    return interim + head + body


@st.composite
def cut(draw: st.DrawFn, data: bytes) -> list[bytes]:
    points = sorted(set(draw(st.lists(st.integers(0, len(data)), max_size=8))))
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges) if b > a]


class _Transport:
    def write(self, data: bytes) -> None:
        pass

    def abort(self) -> None:
        pass


def _feed(pieces: list[bytes], close: bool) -> tuple[Exchange, _Conn]:
    async def main() -> tuple[Exchange, _Conn]:
        conn = _Conn(_Pool(Origin.parse("http://127.0.0.1:1/")))
        conn.connection_made(_Transport())  # type: ignore[arg-type]
        ex, waiter = Exchange(), asyncio.get_running_loop().create_future()
        conn.start(ex, waiter, b"", CAP)
        for piece in pieces:
            conn.data_received(piece)
            assert len(conn.buf) <= MAX_HEAD_BYTES + len(piece)
        if close:
            conn.connection_lost(None)
            assert waiter.done()  # a closed connection always ends the exchange
        return ex, conn

    return asyncio.run(main())


@FUZZ
@given(st.data())
def test_parser_never_hangs_raises_or_passes_the_cap(data: st.DataObject) -> None:
    wire = data.draw(answers())
    pieces = data.draw(cut(wire))
    with alarm(EXAMPLE_S, "parsing"):
        ex, _ = _feed(pieces, close=True)
    assert ex.complete or ex.error in TRANSPORT_KINDS, ex.error
    assert not (ex.complete and ex.error), ex
    assert sum(len(d) for _, d in ex.reads) <= CAP
    with alarm(EXAMPLE_S, "parsing"):
        rec = to_record(Sent("r", ex, 0.0, 0.0))
    assert rec.error is None or rec.error in ERROR_KINDS or re.fullmatch(r"http_-?\d+", rec.error), rec.error


@FUZZ
@given(st.data())
def test_parse_does_not_depend_on_how_reads_are_cut(data: st.DataObject) -> None:
    wire = data.draw(answers())
    with alarm(EXAMPLE_S, "parsing"):
        whole, _ = _feed([wire], close=False)
        parts, _ = _feed(data.draw(cut(wire)), close=False)
    assert (whole.status, whole.error, whole.complete) == (parts.status, parts.error, parts.complete)
    if whole.error is None:  # (an error may stop at a different read: what was kept can differ)
        assert b"".join(d for _, d in whole.reads) == b"".join(d for _, d in parts.reads)


sse_streams = st.lists(
    st.one_of(st.sampled_from([b"data: {}\n\n", b"data: [DONE]\n\n", b": c\n", b"event: x\n", b"data\n",
                               b"\r\n", b"\n", b"data: a\r\ndata: b\r\n\r\n", b"data: {\"choices\": 1}\n\n"]),
              st.binary(max_size=40)),
    max_size=12,
).map(b"".join)


@FUZZ
@given(st.data())
def test_sse_events_do_not_depend_on_how_reads_are_cut(data: st.DataObject) -> None:
    stream = data.draw(sse_streams)
    with alarm(EXAMPLE_S, "parsing"):
        one = SSEParser()
        whole = [(e.data, e.event) for e in one.feed(stream)]
        many = SSEParser()
        parts = [(e.data, e.event) for piece in data.draw(cut(stream)) for e in many.feed(piece)]
    assert whole == parts
    assert one.pending == many.pending


def test_sse_endless_line_costs_linear_time() -> None:
    """16 MiB of one line in 4 KiB reads: scanned once (a growing buffer rescanned is 32 GB of work)."""
    p = SSEParser()
    piece = b"x" * 4096
    with alarm(EXAMPLE_S, "parsing"):
        for _ in range(4096):
            assert p.feed(piece) == []
        assert p.feed(b"\n\n") == [] and p.pending == b""


@settings(FUZZ, max_examples=25)
@given(st.data())
def test_real_socket_answers_end_classified(data: st.DataObject) -> None:
    """The same grammar from a real server that closes after answering: never the 30 s timeout."""
    wire = data.draw(answers())
    pieces = data.draw(cut(wire))

    async def post(url: str) -> Exchange:
        origin = Origin.parse(url)
        async with Http1Client() as http:
            return await http.post(origin, origin.head({}), b"{}", 30.0, CAP)

    with RawServer(lambda _: (pieces, True), pause_s=0.0) as srv, alarm(60, "parsing"):
        ex = asyncio.run(post(srv.url))
    assert ex.complete or ex.error in TRANSPORT_KINDS, ex.error
    assert sum(len(d) for _, d in ex.reads) <= CAP


def test_sse_endless_event_of_tiny_data_lines_stops_at_its_limit() -> None:
    """An event that never ends (no blank line) stops at MAX_EVENT_BYTES, and decodes as malformed."""
    from orchestrator.loadgen.sse import MAX_EVENT_BYTES

    stream = b"data: x\n" * (MAX_EVENT_BYTES // 8)
    reads = [(float(i), stream[i : i + 65536]) for i in range(0, len(stream), 65536)]
    p = SSEParser()
    with alarm(EXAMPLE_S, "parsing"):
        assert [e for _, piece in reads for e in p.feed(piece)] == []
    assert p.overflowed
    rec = to_record(Sent("r", Exchange(200, reads, None, True, 1.0), 0.0, 0.0))
    assert rec.error == "malformed"
