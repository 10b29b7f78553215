"""Request traces of the field, streamed: read only as far as the requests used.

Formats (`fmt`, or "auto": told apart by the first record's fields):
- mooncake: JSON lines `{"timestamp": ms, "input_length": N, "output_length": M, "hash_ids": [...]}`
  (Mooncake's FAST'25 traces). Each hash id names one 512-token block of the prompt, chained (the
  same id at the same place means the same block and everything before it); the last block holds the
  remainder. Prompts are built so that their blocks repeat exactly where the ids repeat: block `h`
  reads the same wherever it appears (loadgen/texts.py), and a shorter last block is the start of it.
- azure: the Azure LLM inference traces' CSV `TIMESTAMP,ContextTokens,GeneratedTokens` (timestamps
  as `2023-11-16 18:15:46.6805900`).
- burstgpt: BurstGPT's CSV `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`
  (timestamps in seconds). Rows with 0 response tokens are requests that failed in the original
  service: skipped, and counted.
- orch: orch's own JSON lines `{"arrival_s": s, "input_tokens": N, "output_tokens": M}`.

Arrival offsets count from the first request, divided by `time_scale` (2: twice as fast). Reading
stops after `limit` requests or at the first request at or past `until_s` (scaled), so memory and
time follow the requests used, not the file: the first 200 requests of a 10-million-line trace are
read in milliseconds (bench/trace_stream.py measures it).

Bad input is one line and exit 2, raised before anything is sent (the requests used are read before
the load point starts, so nothing measured is lost): a malformed line (its line number), a negative
or non-finite timestamp, token counts that are not positive, hash ids without an input length (or
too few or too many of them for it), and timestamps that go backwards; token counts above MAX_TOKENS
(a 1e9-token length would build gigabytes of prompt), an arrival more than MAX_DURATION_S after the
first (the load generator would wait for it), and bytes that are not UTF-8 text. Out-of-order timestamps are
refused, not sorted: sorting would need the whole file, and a trace's order is its arrival order.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from orchestrator.errors import SpecError
from orchestrator.loadgen.client import RequestSpec
from orchestrator.loadgen.content import Content
from orchestrator.loadgen.texts import PromptMaker, Tokenizer
from orchestrator.spec.checks import MAX_DURATION_S, MAX_TOKENS

TraceFormat = Literal["auto", "mooncake", "azure", "burstgpt", "orch"]
TRACE_FORMATS: tuple[TraceFormat, ...] = ("auto", "mooncake", "azure", "burstgpt", "orch")
MOONCAKE_BLOCK_TOKENS = 512
_HASH_SALT = 0x3C0FFEE5EED  # segment keys of trace blocks: the hash id under a salt


@dataclass(frozen=True)
class TraceRequest:
    arrival_s: float  # from the first request, scaled
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class TraceRead:
    format: str
    requests: tuple[TraceRequest, ...]
    skipped: int = 0  # rows of requests that failed in the traced service (BurstGPT)
    lines_read: int = 0

    def note(self) -> str | None:
        if not self.skipped:
            return None
        return f"{self.skipped} trace row(s) of requests that failed in the traced service skipped"


def _open(path: Path) -> io.TextIOWrapper:
    try:
        return path.open(encoding="utf-8", errors="surrogateescape", newline="")
    except OSError as exc:
        raise SpecError(f"dataset_path: cannot read {str(path)!r}: {exc.strerror}") from None


def _utf8_lines(path: Path, f: io.TextIOWrapper) -> Iterator[str]:
    """The file's lines; bytes that are not UTF-8 (a binary file, a wrong encoding) end in one line
    naming the file, the line and the byte, not a UnicodeDecodeError (_open keeps them as surrogates,
    so the line number is the line's own, not that of the chunk the decoder was reading)."""
    for lineno, line in enumerate(f, 1):
        try:
            line.encode("utf-8")
        except UnicodeEncodeError as exc:
            byte = ord(line[exc.start]) - 0xDC00
            raise SpecError(f"{path}:{lineno}: not UTF-8 text (byte 0x{byte:02x}); a trace is JSON lines or "
                            "a CSV with a header, in UTF-8") from None
        yield line


def detect_format(path: Path) -> TraceFormat:
    """The format of a trace file from its first non-empty line."""
    with _open(path) as f:
        for line in _utf8_lines(path, f):
            text = line.strip()
            if not text:
                continue
            if text.startswith("{"):
                try:
                    obj = json.loads(text)
                except ValueError:
                    raise SpecError(
                        f"{path}:1: not JSON; a trace is JSON lines or a CSV with a header") from None
                keys = set(obj) if isinstance(obj, dict) else set()
                if keys & {"input_length", "hash_ids", "output_length"}:
                    return "mooncake"
                if keys & {"arrival_s", "input_tokens"}:
                    return "orch"
                raise SpecError(f"{path}:1: JSON fields {sorted(keys)} are no trace format orch knows; "
                                "expected mooncake (timestamp, input_length, ...) or orch (arrival_s, ...)")
            header = {h.strip() for h in text.split(",")}
            if "ContextTokens" in header:
                return "azure"
            if "Request tokens" in header:
                return "burstgpt"
            raise SpecError(f"{path}:1: a CSV header with {sorted(header)} is no trace format orch knows; "
                            "expected Azure (TIMESTAMP,ContextTokens,GeneratedTokens) or BurstGPT")
    raise SpecError(f"dataset_path: {str(path)!r} holds no trace lines")


def read_trace(path: str | Path, *, fmt: TraceFormat = "auto", limit: int | None = None,
               until_s: float | None = None, time_scale: float = 1.0) -> TraceRead:
    """The trace's first requests: at most `limit`, and only those arriving before `until_s`."""
    p = Path(path)
    if not time_scale > 0 or not math.isfinite(time_scale):
        raise SpecError(f"time_scale must be a positive number, not {time_scale}")
    kind = detect_format(p) if fmt == "auto" else fmt
    rows = {"mooncake": _mooncake, "orch": _orch, "azure": _azure, "burstgpt": _burstgpt}[kind]
    out: list[TraceRequest] = []
    t0: float | None = None
    last: tuple[float, int] | None = None
    skipped = lines = 0
    with _open(p) as f:
        for lineno, t, n_in, n_out, ids in rows(p, f):
            lines = lineno
            if n_in is None:  # a row the trace marks as failed
                skipped += 1
                continue
            if not math.isfinite(t) or t < 0:
                raise SpecError(f"{p}:{lineno}: timestamp {t} must be a finite number >= 0")
            if last is not None and t < last[0]:
                raise SpecError(f"{p}:{lineno}: timestamp {t:g} comes before line {last[1]}'s {last[0]:g}; "
                                "a trace must be in arrival order (sort it by timestamp first)")
            last = (t, lineno)
            t0 = t if t0 is None else t0
            offset = (t - t0) / time_scale
            if until_s is not None and offset >= until_s:
                break
            if offset > MAX_DURATION_S:  # the load generator would wait that long for it
                raise SpecError(f"{p}:{lineno}: arrives {offset:.4g} s after the first request, more than "
                                f"the {MAX_DURATION_S:,.0f} s (a week) orch waits; check the timestamp's "
                                "unit, or cut the trace (workload.duration_s)")
            out.append(TraceRequest(offset, n_in, n_out, ids))
            if limit is not None and len(out) >= limit:
                break
    if not out:
        raise SpecError(f"dataset_path: {str(p)!r} holds no trace requests ({kind} format)")
    return TraceRead(kind, tuple(out), skipped, lines)


Row = tuple[int, float, int | None, int, tuple[int, ...]]


def _positive(p: Path, lineno: int, name: str, value: Any) -> int:
    if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            or value != int(value) or value < 1):
        raise SpecError(f"{p}:{lineno}: {name} must be a positive whole number of tokens, not {value!r}")
    if value > MAX_TOKENS:
        raise SpecError(f"{p}:{lineno}: {name} {value:.4g} is more than {MAX_TOKENS:,} tokens, longer than "
                        "any model's context; check the column")
    return int(value)


def _json_lines(p: Path, f: io.TextIOWrapper, fmt: str, example: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in enumerate(_utf8_lines(p, f), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            raise SpecError(f"{p}:{lineno}: not a {fmt} trace line (a JSON object such as {example})")
        yield lineno, obj


def _mooncake(p: Path, f: io.TextIOWrapper) -> Iterator[Row]:
    example = '{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47]}'
    for lineno, obj in _json_lines(p, f, "mooncake", example):
        if "input_length" not in obj:
            what = "hash_ids without input_length" if "hash_ids" in obj else "no input_length"
            raise SpecError(f"{p}:{lineno}: {what}; a mooncake line needs timestamp, input_length, "
                            "output_length (and hash_ids of its 512-token blocks)")
        try:
            t = float(obj["timestamp"]) / 1000.0
        except (KeyError, TypeError, ValueError):
            raise SpecError(f"{p}:{lineno}: a mooncake line needs a numeric timestamp (ms)") from None
        n_in = _positive(p, lineno, "input_length", obj["input_length"])
        n_out = _positive(p, lineno, "output_length", obj.get("output_length"))
        ids = obj.get("hash_ids", [])
        if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
            raise SpecError(f"{p}:{lineno}: hash_ids must be a list of integers")
        blocks = math.ceil(n_in / MOONCAKE_BLOCK_TOKENS)
        if ids and len(ids) != blocks:
            raise SpecError(f"{p}:{lineno}: {len(ids)} hash_ids for input_length {n_in}; it takes "
                            f"{blocks} blocks of {MOONCAKE_BLOCK_TOKENS} tokens")
        yield lineno, t, n_in, n_out, tuple(ids)


def _orch(p: Path, f: io.TextIOWrapper) -> Iterator[Row]:
    example = '{"arrival_s": 0.5, "input_tokens": 512, "output_tokens": 128}'
    for lineno, obj in _json_lines(p, f, "orch", example):
        try:
            t = float(obj["arrival_s"])
            n_in, n_out = obj["input_tokens"], obj["output_tokens"]
        except (KeyError, TypeError, ValueError):
            raise SpecError(f"{p}:{lineno}: a trace line needs arrival_s, input_tokens and output_tokens "
                            f"(e.g. {example})") from None
        yield (lineno, t, _positive(p, lineno, "input_tokens", n_in),
               _positive(p, lineno, "output_tokens", n_out), ())


def _csv_rows(p: Path, f: io.TextIOWrapper, needed: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    reader = csv.reader(_utf8_lines(p, f))
    header = [h.strip() for h in next(reader, [])]
    missing = [c for c in needed if c not in header]
    if missing:
        raise SpecError(f"{p}:1: the CSV header lacks {missing}; expected the columns {list(needed)}")
    for row in reader:
        lineno = reader.line_num
        if not row or not any(x.strip() for x in row):
            continue
        if len(row) != len(header):
            raise SpecError(f"{p}:{lineno}: {len(row)} fields where the header has {len(header)}")
        yield lineno, dict(zip(header, (x.strip() for x in row), strict=True))


def _number(p: Path, lineno: int, name: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise SpecError(f"{p}:{lineno}: {name} {text!r} is not a number") from None


def _azure(p: Path, f: io.TextIOWrapper) -> Iterator[Row]:
    for lineno, row in _csv_rows(p, f, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        stamp = row["TIMESTAMP"]
        head, dot, frac = stamp.partition(".")
        try:  # seven fractional digits in the published traces; datetime takes six
            when = dt.datetime.fromisoformat(head + (dot + frac[:6] if dot else ""))
        except ValueError:
            raise SpecError(f"{p}:{lineno}: TIMESTAMP {stamp!r} is not a date and time "
                            "(e.g. 2023-11-16 18:15:46.6805900)") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        n_in = _number(p, lineno, "ContextTokens", row["ContextTokens"])
        n_out = _number(p, lineno, "GeneratedTokens", row["GeneratedTokens"])
        yield (lineno, when.timestamp(), _positive(p, lineno, "ContextTokens", n_in),
               _positive(p, lineno, "GeneratedTokens", n_out), ())


def _burstgpt(p: Path, f: io.TextIOWrapper) -> Iterator[Row]:
    for lineno, row in _csv_rows(p, f, ("Timestamp", "Request tokens", "Response tokens")):
        t = _number(p, lineno, "Timestamp", row["Timestamp"])
        n_in = _number(p, lineno, "Request tokens", row["Request tokens"])
        n_out = _number(p, lineno, "Response tokens", row["Response tokens"])
        if n_out == 0 or n_in == 0:
            yield lineno, t, None, 0, ()  # failed in the traced service
            continue
        yield (lineno, t, _positive(p, lineno, "Request tokens", n_in),
               _positive(p, lineno, "Response tokens", n_out), ())


class _Blocks:
    """Content of hash-id prompts, interned: requests that share leading blocks share their nodes (and
    the block hashes the simulator computes once per node)."""

    def __init__(self, maker: PromptMaker) -> None:
        self.nodes: dict[tuple[int, int, int], Content] = {}
        self.maker = maker
        self.texts: dict[tuple[int, int], str] = {}

    def text(self, node: Content) -> str:
        key = (node.key, node.tokens)
        text = self.texts.get(key)
        if text is None:
            text = self.texts[key] = self.maker.segment(node.key, node.tokens)
        return text

    def content(self, ids: tuple[int, ...], tokens: int) -> Content:
        node: Content | None = None
        for i, h in enumerate(ids):
            n = min(MOONCAKE_BLOCK_TOKENS, tokens - i * MOONCAKE_BLOCK_TOKENS)
            key = (id(node) if node is not None else 0, _HASH_SALT ^ h, n)
            nxt = self.nodes.get(key)
            if nxt is None:
                nxt = self.nodes[key] = Content(node, _HASH_SALT ^ h, n)
            node = nxt
        assert node is not None
        return node


def trace_workload(path: str | Path, *, n: int | None = None, duration_s: float | None = None,
                   fmt: TraceFormat = "auto", time_scale: float = 1.0, seed: int = 0,
                   tokenizer: Tokenizer | None = None) -> tuple[tuple[RequestSpec, ...], tuple[float, ...],
                                                                TraceRead]:
    """The trace's first requests as request specs with their arrival offsets (see read_trace)."""
    read = read_trace(path, fmt=fmt, limit=n, until_s=duration_s, time_scale=time_scale)
    rng = np.random.default_rng(seed)
    maker = PromptMaker(tokenizer)
    blocks = _Blocks(maker)
    specs = []
    for i, r in enumerate(read.requests):
        if r.hash_ids:
            content = blocks.content(r.hash_ids, r.input_tokens)
            text = "".join(blocks.text(node) for node in content.nodes())  # each starts with a space
            count = maker.count(text)
        else:
            content = None
            text, count = maker.text(r.input_tokens, rng)
        specs.append(RequestSpec(f"req-{i}", text, r.output_tokens, count, content=content))
    return tuple(specs), tuple(r.arrival_s for r in read.requests), read


