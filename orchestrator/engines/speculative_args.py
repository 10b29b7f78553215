"""Speculative decoding on the engines' command lines, every resolved value stated (docs/speculative.md).

vLLM 0.33 reads one JSON flag, `--speculative-config`, into `SpeculativeConfig`
(vllm/engine/arg_utils.py `create_speculative_config`; vllm/config/speculative.py):
- `method`: ngram | eagle3 | mtp | draft_model; `num_speculative_tokens` > 0;
- `model`: the drafter's weights (EAGLE-3 head or draft model); MTP defaults to the model itself;
- `draft_tensor_parallel_size`: 1 or the model's TP, default the model's TP (`_verify_and_get_draft_tp`);
- n-gram: `prompt_lookup_min/max`, both 5 when neither is given, one copying the other when one is.
SGLang 0.5.23 takes flags (sglang/srt/arg_groups/fields/spec.py, speculative_hook.py):
- `--speculative-algorithm` EAGLE3 | NEXTN (MTP; an alias of EAGLE, the draft path defaults to the model
  for DeepSeek-class models) | STANDALONE (a draft model) | NGRAM;
- a chain of k drafts is `--speculative-num-steps k --speculative-eagle-topk 1
  --speculative-num-draft-tokens k+1` (with topk 1 SGLang forces draft tokens = steps + 1); orch drafts
  chains only (topk > 1 drafts a tree, which the cost model does not price);
- NGRAM: `--speculative-num-draft-tokens k+1` (the verified width, root included) with BFS breadth 1 (a
  chain); SGLang then sets topk = the breadth and steps = draft tokens // topk;
- with speculation and no `--max-running-requests`, SGLang caps the batch at 48 (`_handle_eagle_family`,
  `_handle_ngram`): SGLANG_SPECULATIVE_MAX_RUNNING_REQUESTS, which orch's resolved settings must state.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.errors import SpecError
from orchestrator.plan.speculative import SpeculativeSettings

VLLM_FLAG = "--speculative-config"
VLLM_NGRAM_LOOKUP_DEFAULT = 5  # vLLM 0.33 SpeculativeConfig.__post_init__, when neither bound is set
SGLANG_ALGORITHM = {"eagle3": "EAGLE3", "mtp": "NEXTN", "ngram": "NGRAM", "draft_model": "STANDALONE"}
SGLANG_SPECULATIVE_MAX_RUNNING_REQUESTS = 48


def _weights(s: SpeculativeSettings, engine: str) -> str:
    if s.draft_path:
        return s.draft_path
    what = "the EAGLE-3 head" if s.method == "eagle3" else "the draft model"
    raise SpecError(
        f"engine.speculative.draft_model.path: {engine} loads {what}'s weights; give draft_model: "
        "{config_path: ..., path: DIR_OR_HF_REPO}"
    )


def ngram_lookup(s: SpeculativeSettings) -> tuple[int, int]:
    """(prompt_lookup_min, prompt_lookup_max) as vLLM resolves them."""
    lo, hi = s.prompt_lookup_min, s.prompt_lookup_max
    if lo is None and hi is None:
        return VLLM_NGRAM_LOOKUP_DEFAULT, VLLM_NGRAM_LOOKUP_DEFAULT
    return (lo if lo is not None else hi or 0), (hi if hi is not None else lo or 0)


def vllm_speculative_config(s: SpeculativeSettings, *, tp: int) -> dict[str, Any]:
    """The `--speculative-config` JSON object for vLLM 0.33."""
    out: dict[str, Any] = {"method": s.method, "num_speculative_tokens": s.num_speculative_tokens}
    if s.method == "ngram":
        lo, hi = ngram_lookup(s)
        out.update(prompt_lookup_min=lo, prompt_lookup_max=hi)
        return out
    if s.method in ("eagle3", "draft_model"):
        out["model"] = _weights(s, "vLLM")
        if s.draft_revision:
            out["revision"] = s.draft_revision
    out["draft_tensor_parallel_size"] = tp
    return out


def vllm_speculative_args(s: SpeculativeSettings, *, tp: int) -> tuple[str, ...]:
    return (VLLM_FLAG, json.dumps(vllm_speculative_config(s, tp=tp), sort_keys=True, separators=(",", ":")))


def sglang_speculative_args(s: SpeculativeSettings) -> tuple[str, ...]:
    """SGLang 0.5.23 flags for a chain of k drafts."""
    k = s.num_speculative_tokens
    argv = ["--speculative-algorithm", SGLANG_ALGORITHM[s.method]]
    if s.method == "ngram":
        if s.prompt_lookup_min is not None or s.prompt_lookup_max is not None:
            raise SpecError(
                "engine.speculative.prompt_lookup_min: vLLM's prompt-lookup bounds; SGLang's n-gram drafter "
                "matches a trie of earlier tokens instead (--speculative-ngram-max-trie-depth): remove them"
            )
        argv += ["--speculative-num-draft-tokens", str(k + 1), "--speculative-ngram-min-bfs-breadth", "1",
                 "--speculative-ngram-max-bfs-breadth", "1", "--speculative-eagle-topk", "1",
                 "--speculative-num-steps", str(k + 1)]
        return tuple(argv)
    if s.method in ("eagle3", "draft_model"):
        argv += ["--speculative-draft-model-path", _weights(s, "SGLang")]
        if s.draft_revision:
            argv += ["--speculative-draft-model-revision", s.draft_revision]
    argv += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
             "--speculative-num-draft-tokens", str(k + 1)]
    return tuple(argv)


def sim_speculative_args(s: SpeculativeSettings) -> tuple[str, ...]:
    """The simulated server's flags (sim/server_flags.py): vLLM's JSON, the drafter's catalog name or
    config for `model`, and the acceptance per position it assumes."""
    config: dict[str, Any] = {"method": s.method, "num_speculative_tokens": s.num_speculative_tokens}
    if s.draft_config:
        config["model"] = s.draft_config
    if s.method == "ngram":
        config["prompt_lookup_min"], config["prompt_lookup_max"] = ngram_lookup(s)
    rates = ",".join(repr(a) for a in s.acceptance)
    return ("--speculative-config", json.dumps(config, sort_keys=True, separators=(",", ":")),
            "--speculative-acceptance", rates)
