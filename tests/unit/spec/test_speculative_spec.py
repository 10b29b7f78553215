"""`engine.speculative` in the YAML: what it accepts, and one line naming the field for what it refuses."""

from __future__ import annotations

import pytest

from orchestrator.errors import SpecError
from orchestrator.spec.load import parse_spec

BASE = """model: {name: llama-3.1-8b}
hardware: {gpu: h100-sxm}
workload: {kind: random, input_tokens: 64, output_tokens: 32, rates_per_s: [1], num_requests: 10}
layouts: [tp1]
engine:
  speculative: %s
"""


def _parse(block: str):  # type: ignore[no-untyped-def]
    return parse_spec(BASE % block, "s.yaml")


def test_a_list_of_k_and_per_position_acceptance() -> None:
    spec = _parse("{method: ngram, num_speculative_tokens: [2, 4], acceptance_rate: [0.9, 0.8, 0.5, 0.5]}")
    sp = spec.engine.speculative
    assert sp is not None and sp.token_counts == (2, 4)
    assert sp.acceptance_for(2) == (0.9, 0.8) and sp.acceptance_for(4) == (0.9, 0.8, 0.5, 0.5)


def test_one_number_is_the_same_at_every_position() -> None:
    sp = _parse("{method: eagle3, num_speculative_tokens: 3, acceptance_rate: 0.7}").engine.speculative
    assert sp is not None and sp.acceptance_for(3) == (0.7, 0.7, 0.7)


@pytest.mark.parametrize(("block", "where", "words"), [
    ("{method: ngram, num_speculative_tokens: 0, acceptance_rate: 0.5}",
     "engine.speculative.num_speculative_tokens", "out of range"),
    ("{method: ngram, num_speculative_tokens: 33, acceptance_rate: 0.5}",
     "engine.speculative.num_speculative_tokens", "1..32"),
    ("{method: ngram, num_speculative_tokens: [2, 2], acceptance_rate: 0.5}",
     "engine.speculative.num_speculative_tokens", "twice"),
    ("{method: [ngram, eagle3], num_speculative_tokens: 2, acceptance_rate: 0.5}",
     "engine.speculative.method", "not a list"),
    ("{method: medusa, num_speculative_tokens: 2, acceptance_rate: 0.5}",
     "engine.speculative.method", "'eagle3', 'mtp', 'ngram' or 'draft_model'"),
    ("{method: ngram, num_speculative_tokens: 2, acceptance_rate: 1.2}",
     "engine.speculative.acceptance_rate", "between 0 and 1"),
    ("{method: ngram, num_speculative_tokens: 4, acceptance_rate: [0.5, 0.5]}",
     "engine.speculative", "one per position"),
    ("{method: ngram, num_speculative_tokens: 4}", "engine.speculative.acceptance_rate", "missing"),
    ("{method: draft_model, num_speculative_tokens: 4, acceptance_rate: 0.5}",
     "engine.speculative", "needs draft_model"),
    ("{method: mtp, num_speculative_tokens: 1, acceptance_rate: 0.5, draft_model: {name: llama-3.1-8b}}",
     "engine.speculative", "takes no draft_model"),
    ("{method: eagle3, num_speculative_tokens: 2, acceptance_rate: 0.5, prompt_lookup_max: 3}",
     "engine.speculative", "ngram only"),
    ("{method: ngram, num_speculative_tokens: 2, acceptance_rate: 0.5, prompt_lookup_min: 4, "
     "prompt_lookup_max: 3}", "engine.speculative", "above prompt_lookup_max"),
    ("{method: ngram, num_speculative_tokens: 2, acceptance_rate: 0.5, draft_tokens: 3}",
     "engine.speculative.draft_tokens", "unknown field"),
])
def test_bad_input_is_one_line_naming_the_field(block: str, where: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        _parse(block)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"s.yaml:6: {where}: "), message
    assert words in message
