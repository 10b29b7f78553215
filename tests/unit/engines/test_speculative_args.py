"""Speculative decoding on the command lines: every resolved value stated; what cannot launch, refused."""

from __future__ import annotations

import json

import pytest

from orchestrator.engines import EngineOptions, Placement, SettingsRequest, SimOptions, get_engine
from orchestrator.engines.speculative_args import (
    SGLANG_ALGORITHM,
    sglang_speculative_args,
    vllm_speculative_args,
    vllm_speculative_config,
)
from orchestrator.errors import SpecError
from orchestrator.plan.speculative import SpeculativeSettings
from orchestrator.sim.server import parse_args, server_from_args
from tests.support.engines import candidate


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


def test_every_engines_launch_plan_carries_the_setting() -> None:
    request = SettingsRequest(speculative=SpeculativeSettings("ngram", 4, (0.6, 0.5, 0.5, 0.4)))
    opts = EngineOptions(model="qwen2.5-7b", sim=SimOptions("qwen2.5-7b", "h100-sxm"))
    argv = {}
    for engine in ("vllm", "sglang", "sim"):
        plan = get_engine(engine).launch_plan(candidate("tp2", engine, request=request), opts, Placement())
        argv[engine] = plan.replicas[0].processes[0].argv
    vllm = argv["vllm"]
    assert json.loads(vllm[vllm.index("--speculative-config") + 1])["num_speculative_tokens"] == 4
    assert "NGRAM" in argv["sglang"] and "--speculative-num-draft-tokens" in argv["sglang"]
    # The simulated server reads its flags back into the same setting (sim/server.py).
    sim = argv["sim"]
    server = server_from_args(parse_args(list(sim[sim.index("orchestrator.sim.server") + 1:])))
    spec = server.engines[0].spec
    assert spec is not None and spec.settings.acceptance == (0.6, 0.5, 0.5, 0.4)
    assert spec.settings.method == "ngram" and spec.k == 4
