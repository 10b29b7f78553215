"""Acceptance from the engines' /metrics pages (lines as vLLM 0.32 on CPU and SGLang 0.5.23 print them)."""

from __future__ import annotations

import pytest

from orchestrator.loadgen.spec_decode_metrics import measured_acceptance, parse_spec_decode
from orchestrator.plan.speculative import SpeculativeSettings, uniform_acceptance

LABELS = 'engine="0",model_name="tiny"'


def _vllm_page(drafts: float, draft_tokens: float, accepted: float, per_pos: list[float],
               generated: float, finished: float) -> str:
    lines = [
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f"vllm:spec_decode_num_drafts_total{{{LABELS}}} {drafts}",
        f"vllm:spec_decode_num_drafts_created{{{LABELS}}} 1.7965303467782059e+09",
        f"vllm:spec_decode_num_draft_tokens_total{{{LABELS}}} {draft_tokens}",
        f"vllm:spec_decode_num_accepted_tokens_total{{{LABELS}}} {accepted}",
        f"vllm:generation_tokens_total{{{LABELS}}} {generated}",
        f"vllm:request_success_total{{{LABELS},finished_reason=\"length\"}} {finished}",
        f"vllm:request_success_total{{{LABELS},finished_reason=\"stop\"}} 0.0",
    ]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABELS},position="{i}"}} {v}'
              for i, v in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


def test_acceptance_counts_every_decode_step() -> None:
    before = parse_spec_decode(_vllm_page(0, 0, 0, [0, 0, 0, 0], 0, 0))
    # 3 requests of 64 tokens: 3 prefill tokens, 189 decoded; 34 drafts (114 tokens), 92 accepted.
    after = parse_spec_decode(_vllm_page(34, 114, 92, [28, 23, 23, 18], 192, 3))
    assert before is not None and after is not None
    acc = measured_acceptance(before, after)
    assert acc is not None
    assert acc.decode_steps == 192 - 3 - 92
    assert acc.tokens_per_step == pytest.approx(1 + 92 / 97)
    assert acc.per_position == pytest.approx((28 / 97, 23 / 28, 23 / 23, 18 / 23))
    assert acc.draft_acceptance_rate == pytest.approx(92 / 114)
    # The conditional rates give back the measured tokens per step through orch's own formula.
    settings = SpeculativeSettings("ngram", 4, acc.per_position)
    assert settings.tokens_per_step == pytest.approx(acc.tokens_per_step)


def test_an_engine_without_speculation_has_no_counters() -> None:
    assert parse_spec_decode('vllm:generation_tokens_total{model_name="m"} 12.0\n') is None


def test_data_parallel_ranks_are_summed() -> None:
    one = _vllm_page(10, 40, 20, [8, 6, 4, 2], 100, 2)
    page = one + one.replace('engine="0"', 'engine="1"')
    got = parse_spec_decode(page)
    assert got is not None and got.drafts == 20 and got.accepted_per_position == (16, 12, 8, 4)


def test_sglang_gives_tokens_per_step_and_a_uniform_rate_fits_it() -> None:
    got = parse_spec_decode('sglang:spec_accept_length{model_name="m",tp_rank="0"} 2.8\n'
                            'sglang:spec_accept_rate{model_name="m",tp_rank="0"} 0.6\n')
    assert got is not None and got.sglang_accept_length == pytest.approx(2.8)
    a = uniform_acceptance(2.8, 3)
    assert SpeculativeSettings("eagle3", 3, (a,) * 3).tokens_per_step == pytest.approx(2.8, abs=1e-9)
    assert uniform_acceptance(1.0, 3) == pytest.approx(0.0, abs=1e-9)
    assert uniform_acceptance(9.0, 3) == pytest.approx(1.0, abs=1e-9)
