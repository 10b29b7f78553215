"""Speculative decoding on the command lines: every resolved value stated; what cannot launch, refused."""

from __future__ import annotations

import json

import pytest

from orchestrator.engines.speculative_args import (
    SGLANG_ALGORITHM,
    sglang_speculative_args,
    vllm_speculative_args,
    vllm_speculative_config,
)
from orchestrator.errors import SpecError
from orchestrator.plan.speculative import SpeculativeSettings


def _s(method: str, k: int = 3, **kw: object) -> SpeculativeSettings:
    return SpeculativeSettings(method, k, (0.6,) * k, **kw)  # type: ignore[arg-type]


def test_vllm_ngram_states_the_lookup_bounds_vllm_would_pick() -> None:
    assert vllm_speculative_config(_s("ngram", 4), tp=8) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 5, "prompt_lookup_max": 5}
    assert vllm_speculative_config(_s("ngram", prompt_lookup_max=7), tp=1)["prompt_lookup_min"] == 7
    flag, value = vllm_speculative_args(_s("ngram"), tp=1)
    assert flag == "--speculative-config" and json.loads(value)["method"] == "ngram"


def test_vllm_drafters_state_their_tensor_parallel_size() -> None:
    mtp = vllm_speculative_config(_s("mtp", 1), tp=8)
    assert mtp == {"method": "mtp", "num_speculative_tokens": 1, "draft_tensor_parallel_size": 8}
    draft = vllm_speculative_config(_s("draft_model", draft_path="org/draft", draft_revision="abc"), tp=4)
    assert draft["model"] == "org/draft" and draft["revision"] == "abc"
    assert draft["draft_tensor_parallel_size"] == 4


@pytest.mark.parametrize("method", ["eagle3", "draft_model"])
def test_a_drafter_without_weights_cannot_be_launched(method: str) -> None:
    with pytest.raises(SpecError, match=r"^engine\.speculative\.draft_model\.path: vLLM loads"):
        vllm_speculative_args(_s(method), tp=1)
    with pytest.raises(SpecError, match=r"^engine\.speculative\.draft_model\.path: SGLang loads"):
        sglang_speculative_args(_s(method))


def test_sglang_drafts_a_chain_of_k() -> None:
    argv = sglang_speculative_args(_s("eagle3", 4, draft_path="/h"))
    pairs = dict(zip(argv[::2], argv[1::2], strict=True))
    assert pairs == {"--speculative-algorithm": "EAGLE3", "--speculative-draft-model-path": "/h",
                     "--speculative-num-steps": "4", "--speculative-eagle-topk": "1",
                     "--speculative-num-draft-tokens": "5"}
    ngram = dict(zip(*[iter(sglang_speculative_args(_s("ngram", 6)))] * 2, strict=True))
    assert ngram["--speculative-algorithm"] == "NGRAM" and ngram["--speculative-num-draft-tokens"] == "7"
    assert set(SGLANG_ALGORITHM) == {"eagle3", "mtp", "ngram", "draft_model"}


def test_sglang_has_no_prompt_lookup_bounds() -> None:
    with pytest.raises(SpecError, match="prompt_lookup_min: vLLM's prompt-lookup bounds"):
        sglang_speculative_args(_s("ngram", prompt_lookup_min=2))
