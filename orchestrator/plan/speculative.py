"""Speculative decoding as the planner and the simulator take it: `SpeculativeSettings`, resolved once
from the spec's `engine.speculative` against the model's config, with the checks that need that config.

Acceptance: `acceptance[i]` is the chance that drafted token i+1 is accepted when tokens 1..i were (the
verifier stops at the first rejection). Token i+1 is accepted with probability prod(acceptance[:i+1]),
so the expected accepted tokens per step are the sum of those prefix products, and a step emits that
plus one (the verifier's own token). vLLM's per-position counters
(`vllm:spec_decode_num_accepted_tokens_per_pos` / `vllm:spec_decode_num_drafts`) are the prefix products
themselves; docs/speculative.md converts.

The drafter, as vLLM 0.33 builds it (vllm/v1/spec_decode/llm_base_proposer.py):
- mtp: the model's own MTP layers (`ModelConfig.mtp_layers`: the config's `num_nextn_predict_layers`);
  k > layers reruns them. Embedding and LM head are shared with the model (`_maybe_share_embeddings`,
  `_maybe_share_lm_head`: "MTP model").
- eagle3: an EAGLE-3 head; by default one dense decoder layer of the model's shape with its own LM
  head, sharing the model's embedding (heads ship none). `draft_model:` gives the head's own config.
- draft_model: a separate model, nothing shared; its vocabulary must equal the model's.
- ngram: prompt lookup on the CPU; no weights, no KV.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from orchestrator.catalog.loader import load_model
from orchestrator.catalog.types import ModelConfig
from orchestrator.errors import SpecError
from orchestrator.spec.speculative import SpeculativeSpec

FIELD = "engine.speculative"


@dataclass(frozen=True)
class SpeculativeSettings:
    """One speculative-decoding setting of one engine: a single k, resolved against the model."""

    method: str  # eagle3 | mtp | ngram | draft_model
    num_speculative_tokens: int
    acceptance: tuple[float, ...]  # per position, conditional on the positions before (length k)
    drafter: ModelConfig | None = None  # shapes of ONE draft forward pass; None for ngram
    drafter_copies: int = 1  # how many such layer sets the drafter holds (MTP: its MTP layers)
    shares_embedding: bool = False
    shares_lm_head: bool = False
    draft_weight_dtype: str | None = None  # None: the model's own (MTP is quantized as the model)
    draft_path: str | None = None  # weights for real engines
    draft_config: str | None = None  # the drafter's catalog name or config.json (the simulator reads it)
    draft_revision: str | None = None
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None

    def __post_init__(self) -> None:
        if len(self.acceptance) != self.num_speculative_tokens:
            raise ValueError("one acceptance per drafted position")

    @property
    def expected_accepted_tokens(self) -> float:
        """Sum over positions of the chance that every token up to it is accepted."""
        total, prefix = 0.0, 1.0
        for a in self.acceptance:
            prefix *= a
            total += prefix
        return total

    @property
    def tokens_per_step(self) -> float:
        """Tokens a decoding sequence gets per engine step, on average: accepted ones plus the verifier's."""
        return 1.0 + self.expected_accepted_tokens

    @property
    def label(self) -> str:
        """How a candidate name shows it: `ngram k=4`."""
        return f"{self.method} k={self.num_speculative_tokens}"

    def to_dict(self) -> dict[str, Any]:
        """Every field (the drafter's shapes too, so a stored run plans again as it ran), plus the
        derived tokens per step for people reading it."""
        return {
            "method": self.method, "num_speculative_tokens": self.num_speculative_tokens,
            "acceptance": list(self.acceptance),
            "expected_accepted_tokens": self.expected_accepted_tokens,
            "tokens_per_step": self.tokens_per_step,
            "drafter": asdict(self.drafter) if self.drafter else None, "drafter_copies": self.drafter_copies,
            "shares_embedding": self.shares_embedding, "shares_lm_head": self.shares_lm_head,
            "draft_weight_dtype": self.draft_weight_dtype, "draft_path": self.draft_path,
            "draft_revision": self.draft_revision, "draft_config": self.draft_config,
            "prompt_lookup_min": self.prompt_lookup_min, "prompt_lookup_max": self.prompt_lookup_max,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpeculativeSettings:
        """The inverse of to_dict (a stored run's setting)."""
        drafter = d.get("drafter")
        return cls(
            method=str(d["method"]), num_speculative_tokens=int(d["num_speculative_tokens"]),
            acceptance=tuple(float(a) for a in d["acceptance"]),
            drafter=ModelConfig(**drafter) if isinstance(drafter, dict) else None,
            drafter_copies=int(d.get("drafter_copies", 1)),
            shares_embedding=bool(d.get("shares_embedding")), shares_lm_head=bool(d.get("shares_lm_head")),
            draft_weight_dtype=d.get("draft_weight_dtype"), draft_path=d.get("draft_path"),
            draft_revision=d.get("draft_revision"), draft_config=d.get("draft_config"),
            prompt_lookup_min=d.get("prompt_lookup_min"),
            prompt_lookup_max=d.get("prompt_lookup_max"),
        )


def with_measured_acceptance(s: SpeculativeSettings, measured: tuple[float, ...]) -> SpeculativeSettings:
    """`s` with the measured per-position acceptance (a calibration profile's) where it has positions;
    beyond them the spec's assumed values stay."""
    k = s.num_speculative_tokens
    rates = tuple(measured[:k]) + s.acceptance[len(measured):]
    return replace(s, acceptance=rates)


def uniform_acceptance(tokens_per_step: float, k: int) -> float:
    """The one per-position acceptance a, the same at every position, at which k drafts give
    `tokens_per_step` (1 + a + a^2 + ... + a^k); what a mean accept length (SGLang's) pins down."""
    if k < 1:
        raise ValueError("k must be at least 1")
    target = min(max(tokens_per_step, 1.0), k + 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(60):  # bisection: the sum grows with a
        mid = (lo + hi) / 2
        if sum(mid ** i for i in range(k + 1)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _one_layer_of(cfg: ModelConfig, name: str) -> ModelConfig:
    """One decoder layer of the model's kind, full attention (drafters do not slide, chunk or keep a
    state), MoE where the model's MoE layers are (every layer, for a one-layer model), no MTP or vision
    parts of its own."""
    return replace(cfg, name=name, num_layers=1, first_k_dense_layers=0, moe_layer_freq=1,
                   moe_layer_indices=None, layer_kinds=(), mtp_layers=0, vision_params=0)


def _dense_layer_of(cfg: ModelConfig, name: str) -> ModelConfig:
    """One dense decoder layer with the model's attention and MLP width (an EAGLE head's default)."""
    width = cfg.intermediate_size or (cfg.num_experts_per_token * cfg.moe_intermediate_size
                                      + cfg.shared_expert_intermediate_size)
    return replace(_one_layer_of(cfg, name), intermediate_size=width, num_routed_experts=0,
                   num_experts_per_token=0, moe_intermediate_size=0, num_shared_experts=0,
                   shared_expert_intermediate_size=0)


def _load_draft(spec: SpeculativeSpec) -> tuple[ModelConfig, str]:
    draft = spec.draft_model
    assert draft is not None
    field = f"{FIELD}.draft_model." + ("name" if draft.name is not None else "config_path")
    try:
        return load_model(draft.name or draft.config_path or ""), field
    except SpecError as exc:
        raise SpecError(f"{field}: {exc}") from None


def _mtp(spec: SpeculativeSpec, cfg: ModelConfig, k: int) -> SpeculativeSettings:
    layers = cfg.mtp_layers
    if layers == 0:
        raise SpecError(
            f"{FIELD}.method: mtp drafts with the model's multi-token-prediction layers, and {cfg.name}'s "
            "config has none (no num_nextn_predict_layers or mtp_num_hidden_layers); use eagle3, ngram or "
            "draft_model"
        )
    if k > layers and k % layers:
        # vLLM 0.33 SpeculativeConfig: "num_speculative_tokens ... must be divisible by n_predict".
        raise SpecError(
            f"{FIELD}.num_speculative_tokens: {k} is above the model's {layers} MTP layers and not a "
            f"multiple of them; vLLM reruns the layers in whole rounds (give <= {layers} or a multiple)"
        )
    # One pass runs one MTP layer: a decoder layer of the model's kind (MoE for DeepSeek-V3).
    layer = _one_layer_of(cfg, f"{cfg.name} MTP layer")
    return SpeculativeSettings("mtp", k, spec.acceptance_for(k), layer, drafter_copies=layers,
                               shares_embedding=True, shares_lm_head=True)


def _eagle3(spec: SpeculativeSpec, cfg: ModelConfig, k: int) -> SpeculativeSettings:
    draft = spec.draft_model
    if draft is None:
        head = _dense_layer_of(cfg, f"{cfg.name} EAGLE-3 head (one layer)")
        return SpeculativeSettings("eagle3", k, spec.acceptance_for(k), head, shares_embedding=True,
                                   draft_weight_dtype="bf16")
    head, field = _load_draft(spec)
    if head.hidden_size != cfg.hidden_size:
        raise SpecError(
            f"{field}: the EAGLE-3 head's hidden size {head.hidden_size} differs from {cfg.name}'s "
            f"{cfg.hidden_size}; a head reads the model's hidden states, so it must be trained for this model"
        )
    return SpeculativeSettings("eagle3", k, spec.acceptance_for(k), head, shares_embedding=True,
                               draft_weight_dtype=draft.weight_dtype, draft_path=draft.path,
                               draft_revision=draft.revision, draft_config=draft.name or draft.config_path)


def _draft_model(spec: SpeculativeSpec, cfg: ModelConfig, k: int) -> SpeculativeSettings:
    draft = spec.draft_model
    assert draft is not None
    model, field = _load_draft(spec)
    if model.vocab_size != cfg.vocab_size:
        # vLLM 0.33 SpeculativeConfig.verify_equal_vocab_size_if_draft_model.
        raise SpecError(
            f"{field}: the draft's vocabulary ({model.vocab_size}) differs from {cfg.name}'s "
            f"({cfg.vocab_size}); vLLM refuses a draft with another tokenizer: pick one of the same family"
        )
    return SpeculativeSettings("draft_model", k, spec.acceptance_for(k), model,
                               draft_weight_dtype=draft.weight_dtype, draft_path=draft.path,
                               draft_revision=draft.revision, draft_config=draft.name or draft.config_path)


def speculative_options(spec: SpeculativeSpec, cfg: ModelConfig) -> tuple[SpeculativeSettings, ...]:
    """One setting per k the spec lists; SpecError `engine.speculative.FIELD: ...` on what the model
    refuses."""
    out = []
    for k in spec.token_counts:
        if k == 0:
            continue  # without speculation (speculative_choices)
        if spec.method == "mtp":
            out.append(_mtp(spec, cfg, k))
        elif spec.method == "eagle3":
            out.append(_eagle3(spec, cfg, k))
        elif spec.method == "draft_model":
            out.append(_draft_model(spec, cfg, k))
        else:
            out.append(SpeculativeSettings("ngram", k, spec.acceptance_for(k),
                                           prompt_lookup_min=spec.prompt_lookup_min,
                                           prompt_lookup_max=spec.prompt_lookup_max))
    return tuple(out)


def speculative_choices(spec: SpeculativeSpec,
                        cfg: ModelConfig) -> tuple[SpeculativeSettings | None, ...]:
    """One choice per k the spec lists, in its order; k = 0 (only in a list) is None: no speculation."""
    options = iter(speculative_options(spec, cfg))
    return tuple(None if k == 0 else next(options) for k in spec.token_counts)


def single_speculative(spec: SpeculativeSpec | None, cfg: ModelConfig) -> SpeculativeSettings | None:
    """The one setting a single engine runs; a list of k is a search (`orch sweep`), not one engine."""
    if spec is None:
        return None
    options = speculative_choices(spec, cfg)
    if len(options) > 1:
        raise SpecError(
            f"{FIELD}.num_speculative_tokens: {list(spec.token_counts)} is a list, and one engine runs one "
            "value; give one k here (`orch sweep` searches a list)"
        )
    return options[0]


def split_field(message: str) -> tuple[str, str]:
    """(`engine.speculative.x`, the rest) of a SpecError raised here, for `file:line:` reporting."""
    head, sep, rest = message.partition(": ")
    return (head, rest) if sep and head.startswith(FIELD) else (FIELD, message)
