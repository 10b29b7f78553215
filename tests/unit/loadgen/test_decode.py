"""Decoding an ended exchange: which chunks are token arrivals, and the failure kinds."""

import json

from orchestrator.loadgen.decode import Backlog, Sent, to_record
from orchestrator.loadgen.exchange import Exchange


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chat(content: str | None, done_tokens: int | None, role: bool = False) -> bytes:
    delta: dict[str, str] = {"role": "assistant"} if role else {}
    if content is not None:
        delta["content"] = content
    obj: dict[str, object] = {"choices": [{"index": 0, "delta": delta}]}
    if done_tokens is not None:
        obj["usage"] = {"prompt_tokens": 5, "completion_tokens": done_tokens}
    return _event(obj)


def _sent(reads: list[tuple[float, bytes]], status: int = 200, error: str | None = None) -> Sent:
    ex = Exchange(status, reads, error, error is None, reads[-1][0] if reads else None)
    return Sent("r", ex, sent_s=0.0, scheduled_s=0.0)


def test_token_arrivals_follow_per_chunk_usage() -> None:
    # role-only delta (no token), a token that decodes to no text yet (half a UTF-8 character), two
    # tokens in one chunk, then the usage-only chunk and [DONE]
    reads = [(0.010, _chat("", 0, role=True)), (0.020, _chat("", 1)), (0.030, _chat("ab", 3)),
             (0.031, _event({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}})),
             (0.032, b"data: [DONE]\n\n")]
    rec = to_record(_sent(reads))
    assert rec.ok and rec.chunk_times_s == (0.020, 0.030) and rec.chunk_tokens == (1, 2)
    assert rec.ttft_s == 0.020 and rec.output_tokens == 3 and rec.prompt_tokens == 5
    assert rec.done_s == 0.032


def test_without_per_chunk_usage_text_marks_arrivals() -> None:
    reads = [(0.01, _chat("", None, role=True)), (0.02, _chat("a", None)), (0.03, _chat("b", None)),
             (0.04, b"data: [DONE]\n\n")]
    rec = to_record(_sent(reads))
    assert rec.chunk_times_s == (0.02, 0.03) and rec.output_tokens is None
    assert rec.output_tokens_source == "fallback" and rec.n_output_tokens == 2


def test_failure_kinds() -> None:
    ok_chunk = (0.01, _chat("a", 1))
    assert to_record(_sent([ok_chunk])).error == "truncated"  # ended cleanly without [DONE]
    assert to_record(_sent([ok_chunk, (0.02, b"data: {not json\n\n")])).error == "malformed"
    assert to_record(_sent([ok_chunk, (0.02, b"data: [1, 2]\n\n")])).error == "malformed"
    err = _event({"error": {"code": 503, "message": "overloaded"}})
    assert to_record(_sent([ok_chunk, (0.02, err)])).error == "http_503"
    assert to_record(_sent([(0.01, b"{}")], status=404)).error == "http_404"
    dropped = to_record(_sent([ok_chunk], error="connection"))
    assert dropped.error == "connection" and dropped.chunk_times_s == (0.01,)


def test_backlog_decodes_in_order_within_its_byte_bound() -> None:
    got: list[str] = []

    class Sink:
        def append(self, rec: object) -> None:
            got.append(rec.request_id)  # type: ignore[attr-defined]

    reads = [(0.01, _chat("a", 1)), (0.02, b"data: [DONE]\n\n")]
    size = sum(len(b) for _, b in reads)
    backlog = Backlog(Sink(), max_bytes=2 * size)
    for k in range(3):
        backlog.add(k, Sent(f"r{k}", Exchange(200, list(reads), None, True, 0.02), 0.0, 0.0))
    assert got == ["r0"] and len(backlog) == 2  # the third add passed the bound: the oldest decoded
    backlog.drain()
    assert got == ["r0", "r1", "r2"] and sorted(backlog.records) == [0, 1, 2]
