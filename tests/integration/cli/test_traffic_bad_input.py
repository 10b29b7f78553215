"""Bad traffic input through the CLI: one line on stderr naming the file, the line or the flag, exit 2,
and nothing sent (a trace is read before the first request)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import Orch

# Nothing listens here: a request sent would fail with a connection error, not exit 2.
URL = "http://127.0.0.1:9"


@pytest.mark.parametrize(("lines", "expected"), [
    ('{"timestamp": 0, "output_length": 2, "hash_ids": [1, 2]}\n',
     "t.jsonl:1: hash_ids without input_length"),
    ('{"timestamp": 5, "input_length": 10, "output_length": 2}\n{"timestamp": 1, "input_length": 10, '
     '"output_length": 2}\n', "t.jsonl:2: timestamp 0.001 comes before line 1's 0.005"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 2}\n{oops\n',
     "t.jsonl:2: not a mooncake trace line"),
])
def test_a_bad_trace_is_one_line_and_exit_2(orch: Orch, tmp_path: Path, lines: str, expected: str) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(lines)
    out = orch("bench", "--base-url", URL, "--model", "m", "--workload", "trace", "--dataset", str(trace))
    assert out.returncode == 2, out.stderr
    assert expected in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_bad_session_flag_is_one_line_and_exit_2(orch: Orch) -> None:
    out = orch("bench", "--base-url", URL, "--model", "m", "--workload", "conversation", "--rate", "1",
               "--num-requests", "2", "--reencodable-answers")
    assert out.returncode == 2 and "--reencodable-answers needs --tokenizer" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
