"""The field's trace formats, streamed: detection, prompts whose blocks repeat where the hash ids do,
time scaling, and bad input refused in one line naming the line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import SpecError
from orchestrator.loadgen.traces import MOONCAKE_BLOCK_TOKENS, detect_format, read_trace, trace_workload


def _mooncake(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_mooncake_blocks_repeat_exactly_where_the_hash_ids_do(tmp_path: Path) -> None:
    f = _mooncake(tmp_path / "m.jsonl", [
        {"timestamp": 1000, "input_length": 1200, "output_length": 10, "hash_ids": [1, 2, 3]},
        {"timestamp": 1500, "input_length": 700, "output_length": 5, "hash_ids": [1, 4]},
        {"timestamp": 4000, "input_length": 1100, "output_length": 7, "hash_ids": [1, 2, 3]},
    ])
    assert detect_format(f) == "mooncake"
    specs, offsets, read = trace_workload(f)
    assert offsets == pytest.approx((0.0, 0.5, 3.0)) and read.format == "mooncake"
    words = [s.prompt.split() for s in specs]
    assert [len(w) for w in words] == [1200, 700, 1100]
    b = MOONCAKE_BLOCK_TOKENS
    assert words[0][:b] == words[1][:b]  # block 1 shared
    assert words[0][b:2 * b] != words[1][b:2 * b]  # 2 vs 4
    assert words[2] == words[0][:1100]  # a shorter last block is the start of the full one
    c0, c2 = specs[0].content, specs[2].content
    assert c0 is not None and c2 is not None and c0.parent is c2.parent  # interned: shared nodes
    assert list(c2.block_hashes(16)) == list(c0.block_hashes(16))[: 1100 // 16]


def test_azure_burstgpt_and_orch_formats(tmp_path: Path) -> None:
    azure = tmp_path / "a.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n")
    r = read_trace(azure)
    assert r.format == "azure" and [x.input_tokens for x in r.requests] == [374, 396]
    assert r.requests[1].arrival_s == pytest.approx(4.314579, abs=1e-6)
    burst = tmp_path / "b.csv"
    burst.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,0,1087,Conversation log\n"
                     "118,GPT-4,417,276,693,Conversation log\n")
    r = read_trace(burst, time_scale=2.0)
    assert r.format == "burstgpt" and r.skipped == 1 and [x.arrival_s for x in r.requests] == [0.0, 56.5]
    assert r.note() is not None and "1 trace row" in r.note()  # type: ignore[operator]
    own = tmp_path / "o.jsonl"
    own.write_text('{"arrival_s": 1, "input_tokens": 5, "output_tokens": 7}\n')
    assert read_trace(own).format == "orch"


def test_only_the_requests_used_are_read(tmp_path: Path) -> None:
    f = tmp_path / "long.jsonl"
    with f.open("w") as out:
        for i in range(5000):
            out.write(json.dumps({"timestamp": i * 100, "input_length": 10, "output_length": 2}) + "\n")
    assert read_trace(f, limit=200).lines_read == 200
    r = read_trace(f, until_s=1.0)
    assert len(r.requests) == 10 and r.lines_read == 11
    assert len(read_trace(f, until_s=1.0, time_scale=2.0).requests) == 20


@pytest.mark.parametrize(("rows", "message"), [
    ('{"timestamp": 0, "input_length": 10, "output_length": 2}\n{"timestamp": 5, "input_length"',
     r"m.jsonl:2: not a mooncake trace line"),
    ('{"timestamp": -5, "input_length": 10, "output_length": 2}\n', r"m.jsonl:1: timestamp -0.005 must be"),
    ('{"timestamp": NaN, "input_length": 10, "output_length": 2}\n', r"m.jsonl:1: timestamp nan must be"),
    ('{"timestamp": 9, "input_length": 10, "output_length": 2}\n{"timestamp": 3, "input_length": 1, '
     '"output_length": 1}\n', r"m.jsonl:2: timestamp 0.003 comes before line 1's 0.009; .*sort it"),
    ('{"timestamp": 0, "output_length": 2, "hash_ids": [1, 2]}\n',
     r"m.jsonl:1: hash_ids without input_length"),
    ('{"timestamp": 0, "input_length": 2000, "output_length": 2, "hash_ids": [1]}\n',
     r"m.jsonl:1: 1 hash_ids for input_length 2000; it takes 4 blocks of 512"),
    ('{"timestamp": 0, "input_length": 0, "output_length": 2}\n',
     r"m.jsonl:1: input_length must be a positive"),
])
def test_bad_lines_are_one_line_errors_naming_the_line(tmp_path: Path, rows: str, message: str) -> None:
    f = tmp_path / "m.jsonl"
    f.write_text(rows)
    with pytest.raises(SpecError, match=message) as err:
        read_trace(f, fmt="mooncake")
    assert "\n" not in str(err.value)


def test_an_unknown_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "x.csv"
    f.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(SpecError, match=r"x.csv:1: a CSV header .* no trace format orch knows"):
        read_trace(f)
    bad_row = tmp_path / "short.csv"
    bad_row.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,374\n")
    with pytest.raises(SpecError, match=r"short.csv:2: 2 fields where the header has 3"):
        read_trace(bad_row)
