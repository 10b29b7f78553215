"""EngineSettings as a value: every setting and where it came from, round trips through the store's
JSON, carries to another engine unchanged, and names a candidate by what differs."""

from __future__ import annotations

import pytest

from orchestrator.candidate import Candidate
from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.engines import EngineSettings, SettingsRequest, resolve_settings
from orchestrator.errors import SpecError
from orchestrator.layout import parse_layout

H100, QWEN = load_gpu("h100-sxm"), load_model("qwen2.5-7b")


def test_it_round_trips_through_json_with_its_sources() -> None:
    s = resolve_settings("vllm", H100, QWEN, SettingsRequest(max_num_seqs=64))
    d = s.to_dict()
    assert d["sources"]["max_num_seqs"] == "spec"
    assert "get_batch_defaults" in d["sources"]["max_num_batched_tokens"]
    assert EngineSettings.from_dict(d) == s


def test_another_engine_resolving_its_values_keeps_every_one() -> None:
    vllm = resolve_settings("vllm", H100, QWEN)
    sglang = resolve_settings("sglang", H100, QWEN, vllm.request())
    assert sglang.values() == vllm.values() and sglang.engine == "sglang"


def test_a_candidate_is_named_by_its_layout_and_what_differs() -> None:
    base = resolve_settings("vllm", H100, QWEN)
    request = SettingsRequest(max_num_seqs=64, enable_prefix_caching=False)
    fewer = resolve_settings("vllm", H100, QWEN, request)
    assert Candidate(parse_layout("tp8"), base).name == "tp8"
    assert Candidate.named(parse_layout("tp8"), base, base).name == "tp8"
    named = Candidate.named(parse_layout("tp8"), fewer, base).name
    assert named == "tp8 max_num_seqs=64 enable_prefix_caching=off"


@pytest.mark.parametrize("bad", [{"gpu_memory_utilization": 1.5}, {"max_num_seqs": 0}])
def test_impossible_values_are_spec_errors(bad: dict[str, float]) -> None:
    with pytest.raises(SpecError, match="engine"):
        resolve_settings("vllm", H100, QWEN, SettingsRequest(**bad))  # type: ignore[arg-type]
