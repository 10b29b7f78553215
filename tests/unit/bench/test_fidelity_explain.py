"""bench/fidelity_explain.py prints, per case, the terms behind a prediction: the KV budget it prints
is the planner's, and the reserve what-if moves the room by exactly the difference."""

from __future__ import annotations

import pytest

from tests.support.bench_scripts import load_bench

GIB = 1024.0 ** 3


EXPLAIN = load_bench("fidelity_explain")


def _room_gib(out: str) -> float:
    line = next(x for x in out.splitlines() if "KV budget" in x)
    return float(line.split("= room ")[1].split(";")[0])


def test_explains_a_case_with_its_budget_and_step_parts(capsys: pytest.CaptureFixture[str]) -> None:
    assert EXPLAIN.main(["--only", "gs-oss120b-h100-tp2-128-4"]) == 0
    out = capsys.readouterr().out
    assert "ttft_mean_ms" in out and "measured" in out and "predicted" in out
    assert "KV budget per GPU" in out and "requests of 132 tokens" in out
    assert "engine: mean running" in out
    assert "dominates" in out


def test_reserve_what_if_moves_the_room_by_the_difference(capsys: pytest.CaptureFixture[str]) -> None:
    assert EXPLAIN.main(["--only", "gs-oss120b-h100-tp2-128-4", "--reserve-gib", "1.5"]) == 0
    base = _room_gib(capsys.readouterr().out)
    assert EXPLAIN.main(["--only", "gs-oss120b-h100-tp2-128-4", "--reserve-gib", "3.5"]) == 0
    what_if = _room_gib(capsys.readouterr().out)
    assert base - what_if == pytest.approx(2.0, abs=0.02)


def test_no_matching_case_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert EXPLAIN.main(["--only", "no-such-case"]) == 2
    assert "no case id contains" in capsys.readouterr().err


def test_mxfp4_line_names_the_backends_layout(capsys: pytest.CaptureFixture[str]) -> None:
    # gpt-oss-120b on an H100 at TP2: vLLM's Triton backend rounds the expert shard 1,440 up to 1,472
    # (a multiple of 64), leaves the hidden size, and keeps the scales twice
    assert EXPLAIN.main(["--only", "gs-oss120b-h100-tp2-128-4"]) == 0
    out = capsys.readouterr().out
    assert "triton layout (hidden 2880 -> 2880, shard 1440 -> 1472, scales x2)" in out
    line = EXPLAIN.mxfp4_line("marlin", 2880, 2880, 1.0 * GIB)
    assert "hidden 2880 -> 3072" in line and "shard 2880 -> 2944" in line
