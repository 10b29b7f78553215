"""Hostile input against the features of the latest wave (prefill/decode pairs, session workloads, trace
replay, model configs), each through the real CLI: one plain line on stderr naming the file, the field
(or line) and the fix, exit code 2, never a traceback, a hang, or a layout quietly "rejected" mid-run.

What could hang before its fix (a plan of 1e11 replicas, 1e9 model layers, a trace arrival 1e297 s
later) runs in a subprocess with a timeout, so a regression fails instead of stalling the suite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import ORCH

BASE = {
    "model": "{name: qwen2.5-7b}",
    "hardware": "{gpu: h100-sxm}",
    "workload": "{rates_per_s: [1], num_requests: 5}",
    "layouts": "[tp1]",
}
URL = "http://127.0.0.1:9"  # nothing listens: a request sent would be a connection error, not exit 2


def spec(**sections: str) -> str:
    return "".join(f"{k}: {v}\n" for k, v in (BASE | sections).items())


def run_main(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
             ) -> tuple[int, str, str]:
    from orchestrator.cli import main

    monkeypatch.setattr(sys, "argv", ["orch", *args])
    code: int | str | None = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return int(code or 0), captured.out, captured.err


def run_fresh(args: list[str]) -> tuple[int, str, str]:
    """`orch ARGS` in a fresh Python; the timeout only stops a hang (nothing here asserts a duration)."""
    out = subprocess.run([*ORCH, *args], capture_output=True, text=True, timeout=300, check=False)
    return out.returncode, out.stdout, out.stderr


def assert_one_line(code: int, out: str, err: str, needle: str) -> None:
    assert code == 2, (code, out[-2000:], err[-2000:])
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert needle in lines[0], err


# --- prefill/decode pairs -------------------------------------------------------------------------------

def test_validate_refuses_overlapping_pools_as_simulate_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: `orch validate` said ok (pairs were left out of its plan) while simulate refused.
    path = tmp_path / "s.yaml"
    path.write_text(spec(layouts="['p:tp8+d:tp8']"))
    for command in ("validate", "simulate"):
        code, out, err = run_main([command, str(path)], monkeypatch, capsys)
        assert_one_line(code, out, err,
                        "the pools overlap: prefill 8 + decode 8 = 16 GPUs, the cluster has 8")
        assert str(path) in err or command == "simulate"
    # One pair that fits beside one that does not: ok, with a warning naming the one rejected.
    path.write_text(spec(layouts="['p:tp8+d:tp8', 'p:tp4+d:tp4']"))
    code, out, err = run_main(["validate", str(path)], monkeypatch, capsys)
    assert code == 0 and ": ok;" in out, err
    assert "the planner rejects layout p:tp8+d:tp8: the pools overlap" in err


def test_a_pair_of_absurd_size_is_rejected_not_planned_forever(tmp_path: Path) -> None:
    # Before: `orch plan` balanced the 1e11 GPUs of the pair one prefill replica count at a time.
    path = tmp_path / "s.yaml"
    path.write_text(spec(layouts="['p:tp1x99999999999+d:tp1']"))
    code, out, err = run_fresh(["plan", str(path), "--json"])
    assert code == 0, err[-2000:]
    (row,) = json.loads(out)["disaggregated"]["rows"]
    assert row["layout"] == "p:tp1x99999999999+d:tp1"
    assert row["rejected_because"][0].startswith("the prefill pool tp1x99999999999 needs 99999999999 GPUs")
    assert_one_line(*run_fresh(["validate", str(path)]), "the planner rejects every layout "
                    "(p:tp1x99999999999+d:tp1: the prefill pool tp1x99999999999 needs 99999999999 GPUs")


def test_plan_disagg_of_a_huge_n_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(spec())
    assert_one_line(*run_fresh(["plan", str(path), "--disagg", "1000000000"]),
                    "--disagg 1000000000: ranking every split of more than 8,192 GPUs")


# --- model configs --------------------------------------------------------------------------------------

def test_a_config_with_a_billion_layers_is_one_line(tmp_path: Path) -> None:
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
              "num_hidden_layers": 10**9, "vocab_size": 128256, "max_position_embeddings": 8192}
    (tmp_path / "config.json").write_text(json.dumps(config))
    path = tmp_path / "s.yaml"
    path.write_text(spec(model=f"{{config_path: '{tmp_path / 'config.json'}'}}"))
    for command in ("validate", "plan"):
        assert_one_line(*run_fresh([command, str(path)]),
                        "field 'num_hidden_layers' is 1,000,000,000; orch reads models of up to 1,024 layers")


# --- traces ---------------------------------------------------------------------------------------------

MOONCAKE = '{"timestamp": 0, "input_length": 10, "output_length": 2}\n'
BURST_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"

TRACE_CASES: list[tuple[str, str, bytes, str]] = [
    ("binary", "t.jsonl", MOONCAKE.encode() + b"\xff\xfe\x00garbage\n",
     "t.jsonl:2: not UTF-8 text (byte 0xff)"),
    ("binary-first-line", "t.jsonl", b"\x80\x81\x82\n", "t.jsonl:1: not UTF-8 text (byte 0x80)"),
    ("mooncake-inf-length", "t.jsonl", b'{"timestamp": 0, "input_length": Infinity, "output_length": 2}\n',
     "t.jsonl:1: input_length must be a positive whole number of tokens, not inf"),
    ("mooncake-nan-length", "t.jsonl", b'{"timestamp": 0, "input_length": NaN, "output_length": 2}\n',
     "t.jsonl:1: input_length must be a positive whole number of tokens, not nan"),
    ("mooncake-1e300-length", "t.jsonl", b'{"timestamp": 0, "input_length": 1e300, "output_length": 2}\n',
     "t.jsonl:1: input_length 1e+300 is more than 10,000,000 tokens"),
    ("mooncake-gigabyte-length", "t.jsonl",
     b'{"timestamp": 0, "input_length": 1000000000, "output_length": 2}\n',
     "t.jsonl:1: input_length 1e+09 is more than 10,000,000 tokens"),
    ("mooncake-gigabyte-output", "t.jsonl",
     b'{"timestamp": 0, "input_length": 10, "output_length": 1000000000}\n',
     "t.jsonl:1: output_length 1e+09 is more than 10,000,000 tokens"),
    ("orch-inf-tokens", "t.jsonl", b'{"arrival_s": 0, "input_tokens": Infinity, "output_tokens": 5}\n',
     "t.jsonl:1: input_tokens must be a positive whole number of tokens, not inf"),
    ("azure-nan-tokens", "t.csv", (AZURE_HEADER + "2023-11-16 18:15:46.6805900,nan,5\n").encode(),
     "t.csv:2: ContextTokens must be a positive whole number of tokens, not nan"),
    ("azure-inf-tokens", "t.csv", (AZURE_HEADER + "2023-11-16 18:15:46.6805900,inf,5\n").encode(),
     "t.csv:2: ContextTokens must be a positive whole number of tokens, not inf"),
    ("burstgpt-nan-tokens", "t.csv", (BURST_HEADER + "0,ChatGPT,nan,5,5,Conversation log\n").encode(),
     "t.csv:2: Request tokens must be a positive whole number of tokens, not nan"),
    ("burstgpt-inf-tokens", "t.csv", (BURST_HEADER + "0,ChatGPT,inf,5,5,Conversation log\n").encode(),
     "t.csv:2: Request tokens must be a positive whole number of tokens, not inf"),
]


@pytest.mark.parametrize(("name", "data", "needle"), [c[1:] for c in TRACE_CASES],
                         ids=[c[0] for c in TRACE_CASES])
def test_a_bad_trace_is_one_line_in_bench(
    name: str, data: bytes, needle: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    trace = tmp_path / name
    trace.write_bytes(data)
    args = ["bench", "--base-url", URL, "--model", "m", "--workload", "trace", "--dataset", str(trace)]
    assert_one_line(*run_main(args, monkeypatch, capsys), needle)


def test_a_trace_arrival_a_lifetime_away_is_refused_not_waited_for(tmp_path: Path) -> None:
    # Before: bench slept until the second request's arrival, 1e297 s after the first.
    trace = tmp_path / "t.jsonl"
    trace.write_text(MOONCAKE + '{"timestamp": 1e300, "input_length": 10, "output_length": 2}\n')
    args = ["bench", "--base-url", URL, "--model", "m", "--workload", "trace", "--dataset", str(trace)]
    assert_one_line(*run_fresh(args), "t.jsonl:2: arrives 1e+297 s after the first request, more than the "
                                      "604,800 s (a week) orch waits")


@pytest.mark.parametrize("command", ["validate", "simulate", "plan"])
def test_a_bad_trace_in_a_spec_is_one_line_before_anything_runs(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: validate said ok, and simulate reported the layout "rejected" by the trace, exit 6.
    trace = tmp_path / "t.jsonl"
    trace.write_text(MOONCAKE + '{"timestamp": 5, "input_length": NaN, "output_length": 2}\n')
    path = tmp_path / "s.yaml"
    path.write_text(spec(workload=f"{{kind: trace, dataset_path: '{trace}', num_requests: 5}}"))
    code, out, err = run_main([command, str(path)], monkeypatch, capsys)
    assert_one_line(code, out, err, f"{path}:3: workload.dataset_path: {trace}:2: input_length must be a "
                                    "positive whole number of tokens, not nan")


# --- session workloads ----------------------------------------------------------------------------------

def test_simulate_runs_a_closed_loop_spec_at_its_own_concurrency(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "workload.rates_per_s is not set", though the spec gives concurrency (as sweep reads it).
    path = tmp_path / "s.yaml"
    path.write_text(spec(workload="{loop: closed, concurrency: [2], num_requests: 6, "
                                  "input_tokens: 64, output_tokens: 8}"))
    code, out, err = run_main(["simulate", str(path), "--json"], monkeypatch, capsys)
    assert code == 0, err[-2000:]
    points = json.loads(out)["points"] if "points" in json.loads(out) else json.loads(out)
    assert "concurrency" in json.dumps(points) and '"concurrency": 2' in json.dumps(points), out[:2000]
    path.write_text(spec(workload="{loop: closed, num_requests: 6}"))
    assert_one_line(*run_main(["simulate", str(path)], monkeypatch, capsys),
                    "workload.concurrency is not set (orch sweep searches capacity)")


@pytest.mark.parametrize("command", ["validate", "plan", "simulate"])
def test_a_pool_setting_the_engine_refuses_names_the_pool(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: validate named engine.max_num_batched_tokens, plan named no file, simulate "rejected" (exit 6).
    path = tmp_path / "s.yaml"
    path.write_text(spec(layouts="['p:tp1+d:tp1']", disagg="{prefill: {max_num_batched_tokens: 64}}"))
    assert_one_line(*run_main([command, str(path)], monkeypatch, capsys),
                    f"{path}:5: disagg.prefill.max_num_batched_tokens: 64 is below max_num_seqs 1024")


def test_bench_sessions_that_could_send_nothing_are_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: --max-model-len 0 cut every session before its first turn; nothing was sent, exit 6.
    args = ["bench", "--base-url", URL, "--model", "m", "--rate", "1", "--num-requests", "2",
            "--workload", "conversation", "--max-model-len", "0"]
    assert_one_line(*run_main(args, monkeypatch, capsys),
                    "Invalid value for '--max-model-len': Input should be greater than or equal to 1")
