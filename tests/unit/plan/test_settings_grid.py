"""Engine settings as searched axes: lists in the spec, combinations, candidate names, one-line errors."""

from __future__ import annotations

import pytest

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.engines import get_engine
from orchestrator.engines.settings import EngineSettings
from orchestrator.errors import SpecError
from orchestrator.layout import parse_layout
from orchestrator.pipeline.candidates import sweep_candidates
from orchestrator.plan.from_spec import engine_settings
from orchestrator.plan.settings_grid import base_request, setting_axes, settings_requests
from orchestrator.spec.load import parse_spec

CFG = load_model("llama-3.1-70b")


def _spec(engine: str):  # type: ignore[no-untyped-def]
    return parse_spec(f"""model: {{name: llama-3.1-70b}}
hardware: {{gpu: h100-sxm}}
engine: {engine}
workload: {{kind: random, input_tokens: 64, output_tokens: 32, rates_per_s: [1], num_requests: 10}}
layouts: [tp4, tp8]
""", "s.yaml")


def test_lists_combine_in_order_and_name_what_varies() -> None:
    spec = _spec("{max_num_seqs: [64, 256], max_num_batched_tokens: 8192, "
                 "speculative: {method: ngram, num_speculative_tokens: [0, 4], acceptance_rate: 0.6}}")
    assert [a.name for a in setting_axes(spec, CFG)] == ["max_num_seqs", "speculative"]
    combos = settings_requests(spec, CFG)
    assert [label for _, label in combos] == [
        "max_num_seqs=64 no-spec", "max_num_seqs=64 ngram k=4",
        "max_num_seqs=256 no-spec", "max_num_seqs=256 ngram k=4"]
    first = base_request(spec, CFG)
    assert first.max_num_seqs == 64 and first.speculative is None and first.max_num_batched_tokens == 8192
    cands = sweep_candidates(spec, spec.layouts, get_engine("sim"), load_gpu("h100-sxm"), CFG)
    assert [c.name for c in cands][:2] == ["tp4 max_num_seqs=64 no-spec", "tp4 max_num_seqs=64 ngram k=4"]
    assert len(cands) == 8 and len({c.name for c in cands}) == 8
    on = cands[1].settings
    assert on.max_num_seqs == 64 and on.speculative is not None and on.speculative.num_speculative_tokens == 4
    # The spec as one engine (orch plan, compile, simulate) is the first combination.
    assert engine_settings(spec).max_num_seqs == 64 and engine_settings(spec).speculative is None


def test_without_lists_names_stay_layouts() -> None:
    spec = _spec("{max_num_seqs: 128}")
    cands = sweep_candidates(spec, spec.layouts, get_engine("vllm"), load_gpu("h100-sxm"), CFG)
    assert [c.name for c in cands] == ["tp4", "tp8"]
    assert [c.layout for c in cands] == [parse_layout("tp4"), parse_layout("tp8")]


def test_sglang_states_its_batch_cap_under_speculation() -> None:
    spec = _spec("{name: sglang, speculative: {method: ngram, num_speculative_tokens: 3, "
                 "acceptance_rate: 0.5}}")
    settings = engine_settings(spec)
    assert settings.max_num_seqs == 48 and "48" in settings.source("max_num_seqs")
    plain = engine_settings(_spec("{name: sglang}"))
    assert plain.max_num_seqs == 2048


def test_settings_round_trip_through_the_store_with_their_drafter() -> None:
    spec = _spec("{speculative: {method: draft_model, num_speculative_tokens: 3, "
                 "acceptance_rate: [0.8, 0.6, 0.5], draft_model: {name: llama-3.1-8b, path: org/draft}}}")
    settings = engine_settings(spec)
    assert settings.speculative is not None and settings.speculative.drafter is not None
    back = EngineSettings.from_dict(settings.to_dict())
    assert back.speculative == settings.speculative and back.values() == settings.values()
    assert settings.speculative.label == "draft_model k=3"


@pytest.mark.parametrize(("engine", "words"), [
    ("{max_num_seqs: [64, 64]}", "engine.max_num_seqs: [64, 64] lists a value twice"),
    ("{max_num_seqs: []}", "engine.max_num_seqs: an empty list"),
    ("{max_num_seqs: [0, 8]}", "engine.max_num_seqs"),
    ("{name: [vllm, sim]}", "engine: name: one value, not a list"),
    ("{startup_s: [60, 120]}", "engine: startup_s: one value, not a list"),
    ("{max_running_requests: [64]}", "engine.max_running_requests: unknown field"),
    ("{speculative: {method: ngram, num_speculative_tokens: 0, acceptance_rate: 0.5}}",
     "0 only in a list"),
])
def test_bad_settings_lists_are_one_line(engine: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        _spec(engine)
    assert "\n" not in str(err.value) and words in str(err.value), str(err.value)
