"""When a speculatively decoding sequence gets its tokens, in the simulated engine.

A step gives a decoding sequence `rate` tokens on average (accepted drafts plus the verifier's own,
plan/speculative.py). The simulator hands them out deterministically: after n decode steps a sequence
has emitted floor(n * rate + phase) tokens, with a per-sequence phase in [0, 1) so that sequences do
not burst in lockstep. Each step then gives floor(rate) or ceil(rate) tokens at once (the burst a
client sees as one chunk), the mean is exact, and the token count stays a function of the step
counter: O(1) bookkeeping, finishes known in advance. What this leaves out is the spread of accepted
lengths between steps and between requests (a real step gives 1..k+1 tokens): per-request TPOT
percentiles come out tighter than measured ones.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from orchestrator.catalog.types import ModelConfig
from orchestrator.errors import SpecError
from orchestrator.plan.speculative import SpeculativeSettings, single_speculative
from orchestrator.spec.speculative import SpeculativeSpec

GOLDEN = 0.6180339887498949  # phases i * GOLDEN mod 1 spread evenly over [0, 1) for any count


def phase_of(index: int) -> float:
    """The phase of the index-th sequence an engine admits."""
    return (index * GOLDEN) % 1.0


def tokens_after(steps: int, rate: float, phase: float) -> int:
    """Tokens emitted after `steps` decode steps (0 after none)."""
    return math.floor(steps * rate + phase)


def steps_to_emit(tokens: int, rate: float, phase: float) -> int:
    """The fewest decode steps after which at least `tokens` tokens are out (rate >= 1)."""
    if tokens <= 0:
        return 0
    steps = max(1, math.ceil((tokens - phase) / rate))
    # Float rounding may put the estimate one off either way; settle it on the integer rule.
    while tokens_after(steps, rate, phase) < tokens:
        steps += 1
    while steps > 1 and tokens_after(steps - 1, rate, phase) >= tokens:
        steps -= 1
    return steps


def burst_sizes(steps: int, rate: float, phase: float, cap: int) -> list[int]:
    """Tokens of each of `steps` decode steps, the total capped at `cap` (the request's max_tokens left)."""
    floor = math.floor
    totals = [min(floor(n * rate + phase), cap) for n in range(1, steps + 1)]
    return [b - a for a, b in zip((0, *totals), totals, strict=False)]


@dataclass
class SpecDecodeCounters:
    """vLLM's speculative-decoding counters as the simulated server exports them (the names a scrape of
    a real vLLM reads, loadgen/spec_decode_metrics.py). Every decode step of a sequence is one draft of
    k tokens, of which the burst minus the verifier's own token were accepted, the first ones in order."""

    k: int
    drafts: int = 0
    accepted: int = 0
    per_position: list[int] = field(default_factory=list)

    def add(self, burst: int) -> None:
        accepted = min(burst - 1, self.k)
        self.drafts += 1
        self.accepted += accepted
        if len(self.per_position) < self.k:
            self.per_position = [0] * self.k
        for i in range(accepted):
            self.per_position[i] += 1

    def lines(self, label: str) -> list[str]:
        inner = label[1:-1]
        out = [
            "# TYPE vllm:spec_decode_num_drafts counter",
            f"vllm:spec_decode_num_drafts_total{label} {self.drafts}",
            "# TYPE vllm:spec_decode_num_draft_tokens counter",
            f"vllm:spec_decode_num_draft_tokens_total{label} {self.drafts * self.k}",
            "# TYPE vllm:spec_decode_num_accepted_tokens counter",
            f"vllm:spec_decode_num_accepted_tokens_total{label} {self.accepted}",
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
        ]
        counts = self.per_position or [0] * self.k
        out += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{inner},position="{i}"}} {n}'
                for i, n in enumerate(counts)]
        return out


def speculative_from_flags(config_json: str | None, acceptance: str | None,
                           cfg: ModelConfig) -> SpeculativeSettings | None:
    """`--speculative-config` (vLLM's JSON: method, num_speculative_tokens; `model` names a draft preset
    or config for draft_model/eagle3) and `--speculative-acceptance` (one rate or one per position,
    comma-separated) of `orch sim serve`, resolved as the spec's engine.speculative is."""
    if config_json is None:
        if acceptance is not None:
            raise SpecError("--speculative-acceptance needs --speculative-config")
        return None
    try:
        raw = json.loads(config_json)
    except json.JSONDecodeError as exc:
        raise SpecError(f"--speculative-config: not JSON ({exc.msg})") from None
    if not isinstance(raw, dict):
        raise SpecError("--speculative-config: a JSON object, e.g. {\"method\": \"ngram\", "
                        "\"num_speculative_tokens\": 4}")
    if acceptance is None:
        raise SpecError("--speculative-config needs --speculative-acceptance (e.g. 0.6 or 0.8,0.6,0.5)")
    try:
        rates = [float(x) for x in acceptance.split(",")]
    except ValueError:
        raise SpecError(f"--speculative-acceptance {acceptance!r}: numbers, comma-separated") from None
    block: dict[str, Any] = {
        "method": raw.get("method"), "num_speculative_tokens": raw.get("num_speculative_tokens"),
        "acceptance_rate": rates[0] if len(rates) == 1 else rates,
    }
    if raw.get("model") and block["method"] in ("eagle3", "draft_model"):
        key = "config_path" if "/" in str(raw["model"]) or str(raw["model"]).endswith(".json") else "name"
        block["draft_model"] = {key: raw["model"]}
    for bound in ("prompt_lookup_min", "prompt_lookup_max"):
        if raw.get(bound) is not None:
            block[bound] = raw[bound]
    try:
        spec = SpeculativeSpec.model_validate(block)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "speculative"
        raise SpecError(f"--speculative-config: {where}: {err['msg']}") from None
    return single_speculative(spec, cfg)
