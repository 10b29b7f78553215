"""`orch plan` on a session spec prices a call as the engine really gets it: the whole history so far
(chat-multiturn.yaml: a ~2,000-token document, then 150-token turns, ~3,200 tokens a call), less the
prefix expected in the engine's prefix cache under the spec's routing, exactly as the sweep's plan rows
and planner seeds do (loadgen/spec_workload.py `call_shape`). It used to price a turn's new text alone
(prompt 150 tokens, context 300)."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.disagg import parse_disagg
from orchestrator.layout import parse_layout
from orchestrator.pipeline.points import plan_row
from orchestrator.pipeline.sweep import Sweep
from orchestrator.plan.planner import PlanRow
from orchestrator.spec.load import load_spec
from orchestrator.store.db import Store
from tests.support.cli import Orch
from tests.support.observers import QuietObserver
from tests.support.paths import ROOT

CHAT = ROOT / "layouts" / "chat-multiturn.yaml"


def test_plan_prices_a_conversation_call_on_its_whole_history_as_the_sweep_does(
    orch: Orch, tmp_path: Path
) -> None:
    out = orch("plan", str(CHAT), "--layouts", "spec", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    call = data["call"]
    assert call["routing"] == "round_robin" and 5 < call["calls"] < 6  # turns: uniform 3-8
    assert call["prompt_tokens"] > 2500  # the document and the growing history, not a turn's 150
    assert data["prompt_tokens"] == round(call["prompt_tokens"])
    assert data["context_tokens"] == round(call["prompt_tokens"]) + round(call["output_tokens"]) // 2
    rows = {r["layout"]: r for r in data["rows"]}
    cached = {name: rows[name]["call"]["cached_tokens"] for name in ("tp8", "tp4x2", "tp2x4")}
    # round robin over 1, 2 and 4 replicas: a call finds less of its history cached the more there are
    assert cached["tp8"] > cached["tp4x2"] > cached["tp2x4"] > 0
    for row in rows.values():
        c = row["call"]
        assert c["prefill_tokens"] == round(c["prompt_tokens"] - c["cached_tokens"]) > 150
    # the same rows as the sweep's, which it seeds its capacity search from
    sweep = Sweep(load_spec(CHAT), Store(tmp_path / "r.db"), QuietObserver())
    for name, row in rows.items():
        priced = plan_row(sweep.ctx, sweep.ctx.candidate(parse_layout(name)))
        assert isinstance(priced, PlanRow)
        assert row["best"] == priced.to_dict()["best"] and row["prefill_ms"] == priced.to_dict()["prefill_ms"]

    text = orch("plan", str(CHAT), "--layouts", "spec")
    assert text.returncode == 0, text.stderr
    first = " ".join(text.stdout.split())  # rich wraps the first line at the terminal's width
    assert f"a call: {round(call['prompt_tokens']):,} prompt tokens (the whole history)" in first
    assert "expected cached under round_robin routing (per layout below)" in first
    assert f"context {data['context_tokens']:,} tokens" in first
    tp2x4 = rows["tp2x4"]["call"]
    assert (f"tp2x4: a call: {round(tp2x4['cached_tokens']):,} of {round(tp2x4['prompt_tokens']):,} prompt "
            f"tokens expected cached, {tp2x4['prefill_tokens']:,} prefilled") in text.stdout


def test_plan_prompt_flag_prices_one_request_of_that_prompt(orch: Orch) -> None:
    out = orch("plan", str(CHAT), "--layouts", "tp8", "--prompt", "150", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert "call" not in data and data["prompt_tokens"] == 150 and data["context_tokens"] == 150 + 300 // 2
    assert "call" not in data["rows"][0]


def test_plan_of_a_request_spec_is_priced_as_before(orch: Orch) -> None:
    out = orch("plan", str(ROOT / "layouts" / "qwen72b.yaml"), "--layouts", "tp8", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert "call" not in data and (data["prompt_tokens"], data["context_tokens"]) == (1024, 1024 + 128)
    assert data["prefill_tokens_per_output_token"] == 1024 / 256


AGENTIC = ROOT / "layouts" / "agentic.yaml"


def test_plan_disagg_prices_a_session_call_on_its_whole_history_as_the_sweep_does(orch: Orch) -> None:
    """`--disagg N` priced the turn's new text (agentic: "prompt 300, output 500"); now each row's call:
    an aggregated layout's under the spec's routing, a pair's on its prefill pool balanced by load."""
    out = orch("plan", str(AGENTIC), "--disagg", "4", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    call = data["call"]
    assert call["prompt_tokens"] > 5500  # the system prompt and tool definitions at least, not 300
    assert data["prompt_tokens"] == round(call["prompt_tokens"]) and data["output_tokens"] < 500
    kinds = {r.get("kind", "aggregated") for r in data["rows"]}
    assert kinds == {"aggregated", "disaggregated"}
    for row in data["rows"]:
        c = row["call"]
        assert c["prefill_tokens"] == round(c["prompt_tokens"] - c["cached_tokens"]) > 300
    pairs = [r for r in data["rows"] if r.get("kind") == "disaggregated"]
    # a pair's router balances by load: more prefill engines, less of a session's history cached
    by_engines = {r["layout"]: r["call"]["cached_tokens"] for r in pairs}
    assert by_engines["p:tp1+d:tp1x3"] > by_engines["p:tp1x3+d:tp1"]

    text = orch("plan", str(AGENTIC), "--disagg", "4")
    assert text.returncode == 0, text.stderr
    first = " ".join(text.stdout.split())
    assert f"a call: {round(call['prompt_tokens']):,} prompt tokens (the whole history)" in first
    assert "prompt 300, output 500" not in first


def test_plan_pairs_price_a_session_call_as_the_sweeps_pair_rows(orch: Orch, tmp_path: Path) -> None:
    out = orch("plan", str(AGENTIC), "--layouts", "p:tp1x2+d:tp1x2", "--json")
    assert out.returncode == 0, out.stderr
    pd = json.loads(out.stdout)["disaggregated"]
    assert pd["call"]["routing"] == "load-balanced" and pd["prompt_tokens"] > 5500
    (row,) = pd["rows"]
    sweep = Sweep(load_spec(AGENTIC), Store(tmp_path / "r.db"), QuietObserver())
    priced = plan_row(sweep.ctx, sweep.ctx.candidate(parse_disagg("p:tp1x2+d:tp1x2")))
    assert {k: v for k, v in row.items() if k != "call"} == priced.to_dict()
    text = orch("plan", str(AGENTIC), "--layouts", "p:tp1x2+d:tp1x2")
    assert text.returncode == 0, text.stderr
    assert "expected cached under load-balanced routing" in " ".join(text.stdout.split())
