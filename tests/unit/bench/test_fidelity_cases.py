"""The fidelity table (bench/fidelity_cases.yaml) stays usable: every case names a source, a catalog
model and GPU and a valid layout, the table covers what issue 14 asks, and a case runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.disagg import parse_any_layout
from tests.support.bench_scripts import load_bench

FID = load_bench("fidelity")


def test_every_case_is_sourced_and_names_catalog_entries() -> None:
    sources, cases = FID.load_cases()
    assert len(cases) >= 30
    assert len({c.id for c in cases}) == len(cases)
    for name, src in sources.items():
        assert src.get("document") and src.get("version") and src.get("url"), name
    for c in cases:
        load_model(c.model)
        load_gpu(c.gpu)
        parse_any_layout(c.layout)  # a prefill/decode pair too (a pool measured alone)
        assert c.measured and all(v > 0 for v in c.measured.values()), c.id
        assert sources[c.source]["engine_family"] in FID.ENGINE_FAMILIES, c.id
    assert len({load_gpu(c.gpu).name for c in cases}) >= 3
    moe = [load_model(c.model).is_moe for c in cases]
    assert any(moe) and not all(moe)
    assert min(c.input_tokens for c in cases) <= 256 and max(c.input_tokens for c in cases) >= 5000
    assert {c.mode for c in cases} == {"offline", "open", "closed"}
    assert any("ttft_mean_ms" in c.measured for c in cases)


def test_a_closed_loop_case_runs_and_is_compared() -> None:
    sources, cases = FID.load_cases()
    case = next(c for c in cases if c.id == "nim-70b-h100-tp2-500-2000-c1")
    columns, _ = FID.standard_columns([case], sources, None)
    rows = FID.evaluate([case], sources, columns)
    assert {r["metric"] for r in rows} == set(case.measured)
    for r in rows:
        for label in ("preset", "default"):
            assert r[label] > 0
            assert r[f"{label}_error"] == pytest.approx((r[label] - r["measured"]) / r["measured"])
        assert r["profiles"]["preset"] == "none" and r["profiles"]["default"] == "trtllm-h100-sxm"
        assert r["preset"] != r["default"]  # the profile changes the prediction
    s = FID.summaries(rows, "preset")
    assert s["ttft"]["n"] == 1 and s["rest"]["n"] == 2


def test_a_malformed_case_is_one_line_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "cases.yaml"
    case = ("cases:\n- {id: x1, source: s, model: llama-3.1-8b, precision: bf16, gpu: h100, layout: tp1, "
            "mode: open, requests: 5, input_tokens: 10, output_tokens: 10, "
            "measured: {output_tokens_per_s: 1.0}}\n")
    bad.write_text("sources: {s: {document: d, engine_family: vllm}}\n" + case)
    with pytest.raises(FID.CaseError, match="case x1: mode open needs rate_per_s"):
        FID.load_cases(bad)
    bad.write_text("sources: {s: {document: d}}\n" + case)  # which engine's profile? must be said
    with pytest.raises(FID.CaseError, match="case x1: source 's' needs engine_family"):
        FID.load_cases(bad)


def test_each_case_defaults_to_the_profile_of_its_gpu_and_engine() -> None:
    """A TensorRT-LLM case gets the TensorRT-LLM profile of its GPU, a vLLM case the vLLM one."""
    sources, cases = FID.load_cases()
    by_id = {c.id: c for c in cases}

    def default(cid: str) -> str:
        return str(FID.default_calibration(by_id[cid], sources[by_id[cid].source]))

    assert default("trt-8b-h200-1000-1000") == "trtllm-h200"
    assert default("vllm-lat-8b-h200-tp1") == "vllm-h200"
    assert default("vllm-lat-8b-a100-tp1") == "vllm-a100-sxm-80gb"
    assert default("nim-70b-h100-tp2-5000-500-c1") == "trtllm-h100-sxm"
    assert default("trt-8b-a100-1000-1000") == "trtllm-a100-sxm-80gb"


def test_heldout_cache_is_fresh_and_covers_the_trtllm_cases() -> None:
    """bench/fidelity_heldout.json was fitted from the table as it is (else bench/fidelity.py marks the
    group stale): rerun bench/fit_profiles.py --folds 3 after editing cases."""
    sources, cases = FID.load_cases()
    column, notes = FID.heldout_column(cases, sources)
    assert column is not None
    assert not [n for n in notes if "stale" in n], notes
    for c in cases:
        if sources[c.source]["engine_family"] == "tensorrt-llm":
            got = column(c, sources[c.source])
            assert got is not None and got[0] == "none" and got[1], c.id
