"""`engine.speculative`: speculative decoding as the spec states it (docs/speculative.md).

What needs only the YAML is checked here (one line naming the field); what needs the model's config
(MTP layers, the draft's vocabulary) is checked where the catalog is read (plan/speculative.py).

Ranges, as the engines read them:
- vLLM 0.33 `SpeculativeConfig.num_speculative_tokens`: `Field(gt=0)`, no upper bound; for MTP, a
  value above the model's MTP layers must be a multiple of them (vllm/config/speculative.py).
- SGLang 0.5.23 `--speculative-num-steps`: positive (sglang/srt/arg_groups/speculative_hook.py).
orch adds its own upper bound, MAX_SPECULATIVE_TOKENS: a verify step of k+1 tokens per sequence
beyond that is never worth its cost (the expected accepted tokens are below 1/(1-a) for every
acceptance a; at a = 0.95 that is 19).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from orchestrator.spec.base import SpecModel

MAX_SPECULATIVE_TOKENS = 32
SpeculativeMethod = Literal["eagle3", "mtp", "ngram", "draft_model"]
METHODS: tuple[str, ...] = ("eagle3", "mtp", "ngram", "draft_model")


class DraftModelSpec(SpecModel):
    """The drafter's shapes (and weights for real engines): a separate small model for `draft_model`,
    or an EAGLE-3 head's own config for `eagle3` (default: one decoder layer of the model's shape)."""

    name: str | None = Field(None, description="Catalog preset name of the draft model.")
    config_path: str | None = Field(None, description="Path to the draft's HF config.json.")
    path: str | None = Field(
        None,
        description="Draft weights (HF repo id or local directory) for real engines; the sim needs none.",
    )
    revision: str | None = Field(None, description="Revision (git sha or tag) of the draft weights.")
    weight_dtype: Literal["bf16", "fp16", "fp8", "int4"] = Field(
        "bf16", description="Data type the draft's weights are served in."
    )

    @model_validator(mode="after")
    def _one_source(self) -> DraftModelSpec:
        if (self.name is None) == (self.config_path is None):
            raise ValueError(
                "give exactly one of 'name' (a preset) or 'config_path' (the draft's config.json)")
        return self


class SpeculativeSpec(SpecModel):
    """Speculative decoding: a drafter proposes k tokens per sequence, the model verifies k+1 at once."""

    method: SpeculativeMethod = Field(
        description="How drafts are made: eagle3 (an EAGLE-3 head), mtp (the model's own multi-token-"
        "prediction layers, DeepSeek-V3 class), ngram (prompt lookup, no draft weights) or draft_model "
        "(a small model of the same vocabulary).",
    )
    num_speculative_tokens: int | list[int] = Field(
        description=f"Tokens drafted per step, k (1..{MAX_SPECULATIVE_TOKENS}); a list is searched like any "
        "engine setting, and 0 in it is a candidate without speculation.",
    )
    acceptance_rate: float | list[float] = Field(
        description="Per-position acceptance: the chance a drafted token is accepted when the ones before "
        "it were. One number (the same at every position) or a list, one per position up to the largest "
        "k. Depends on the model, the drafter and the traffic: measure it (docs/speculative.md).",
    )
    draft_model: DraftModelSpec | None = Field(
        None, description="draft_model: the draft model (required); eagle3: the EAGLE-3 head's config "
        "(optional). Not for mtp or ngram.",
    )
    prompt_lookup_min: int | None = Field(
        None, ge=1, le=1024, description="ngram only: shortest n-gram matched (vLLM default 5 when neither "
        "bound is set)."
    )
    prompt_lookup_max: int | None = Field(
        None, ge=1, le=1024, description="ngram only: longest n-gram matched (vLLM default 5)."
    )

    @field_validator("method", mode="before")
    @classmethod
    def _one_method(cls, value: Any) -> Any:
        if isinstance(value, list):
            raise ValueError("one method, not a list: an engine runs one drafter (list "
                             "num_speculative_tokens to search k; compare methods with one spec each)")
        return value

    @field_validator("num_speculative_tokens")
    @classmethod
    def _tokens(cls, value: int | list[int]) -> int | list[int]:
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ValueError("give at least one value")
        lowest = 0 if len(values) > 1 else 1  # 0 in a list: compare without speculation
        for k in values:
            if not lowest <= k <= MAX_SPECULATIVE_TOKENS:
                raise ValueError(
                    f"{k} is out of range: {lowest}..{MAX_SPECULATIVE_TOKENS} tokens drafted per step "
                    "(vLLM and SGLang need at least 1; 0 only in a list, for without speculation)"
                )
        if len(set(values)) != len(values):
            raise ValueError(f"{values} lists a value twice")
        return value

    @field_validator("acceptance_rate")
    @classmethod
    def _rates(cls, value: float | list[float]) -> float | list[float]:
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ValueError("give one number or one per position")
        for a in values:
            if not 0.0 <= a <= 1.0:
                raise ValueError(f"{a} is not a probability: each acceptance is between 0 and 1")
        return value

    @property
    def token_counts(self) -> tuple[int, ...]:
        """The k values the spec names, in its order."""
        k = self.num_speculative_tokens
        return tuple(k) if isinstance(k, list) else (k,)

    def acceptance_for(self, k: int) -> tuple[float, ...]:
        """Per-position acceptance for the first k positions."""
        a = self.acceptance_rate
        return tuple(a[:k]) if isinstance(a, list) else (a,) * k

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeSpec:
        k_max = max(self.token_counts)
        if isinstance(self.acceptance_rate, list) and len(self.acceptance_rate) != k_max and k_max:
            raise ValueError(
                f"acceptance_rate lists {len(self.acceptance_rate)} positions, but num_speculative_tokens "
                f"goes up to {k_max}: give one per position, or one number for all"
            )
        if self.method == "draft_model" and self.draft_model is None:
            raise ValueError("method draft_model needs draft_model: {name: PRESET} or {config_path: FILE}")
        if self.method in ("mtp", "ngram") and self.draft_model is not None:
            raise ValueError(
                f"method {self.method} takes no draft_model ("
                + ("MTP drafts with the model's own MTP layers" if self.method == "mtp"
                   else "n-gram drafts by prompt lookup") + "); remove it"
            )
        lookup = (self.prompt_lookup_min, self.prompt_lookup_max)
        if self.method != "ngram" and any(x is not None for x in lookup):
            raise ValueError("prompt_lookup_min/prompt_lookup_max are for method ngram only")
        lo, hi = lookup
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"prompt_lookup_min {lo} is above prompt_lookup_max {hi}")
        return self
