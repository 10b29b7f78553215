"""Pydantic models of the serving engine's part of a sweep spec (`engine:`): the engine, its settings
(each may be a list a sweep searches), its environment and secret references, speculative decoding.
spec/models.py holds the whole spec and names these too."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from orchestrator.spec.base import SpecModel
from orchestrator.spec.checks import (
    MAX_COUNT,
    MAX_DURATION_S,
    MAX_TOKENS,
    check_env,
    check_extra_args_secrets,
    check_secret_refs,
)
from orchestrator.spec.speculative import SpeculativeSpec


class SecretRef(SpecModel):
    """Where one secret value comes from. The spec, the store and every artifact hold only this reference."""

    env: str | None = Field(
        None, description="Local and Ray targets, and compiled scripts: the environment variable (of orch's "
        "own process, or of the node's shell) that holds the value at deploy time; default: the same name.",
    )
    secret: str | None = Field(
        None, description="Kubernetes: the name of the Secret (valueFrom.secretKeyRef.name); "
        "required on the kubernetes target and for Kubernetes artifacts.",
    )
    key: str | None = Field(
        None, description="Kubernetes: the key in that Secret; default: the variable name."
    )


Count = Annotated[int, Field(gt=0, le=MAX_COUNT)]
Tokens = Annotated[int, Field(gt=0, le=MAX_TOKENS)]
Fraction = Annotated[float, Field(gt=0, le=1)]
#: Engine settings a spec may list (a sweep searches their combinations); the rest take one value.
SETTING_LISTS = ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "block_size",
                 "enable_chunked_prefill", "enable_prefix_caching")
MAX_SETTING_COMBINATIONS = 256  # engine setting combinations per layout (each one a searched candidate)
ONE_VALUE = ("name", "version", "enforce_eager", "time_scale", "sim_scheduler", "num_redundant_experts",
             "runtime_reserve_bytes", "startup_s")


class EngineSpec(SpecModel):
    """The serving engine and its settings."""

    name: Literal["vllm", "sglang", "sim"] = Field("sim", description="Engine: vllm, sglang or sim.")
    version: str | None = Field(None, description="Expected engine version; checked when given.")
    # Unset settings take the engine's own default for the GPU and version (engines/settings.py). Each may
    # be a list: a sweep judges every combination with every layout (docs/speculative.md, "settings").
    gpu_memory_utilization: Fraction | list[Fraction] | None = Field(
        None, description="Fraction of GPU memory the engine may use (0 < x <= 1); default: "
        "the engine's (vLLM 0.92; SGLang's --mem-fraction-static rule for the GPU).",
    )
    max_num_seqs: Count | list[Count] | None = Field(
        None, description="Maximum sequences in one batch of one engine; default: the engine's for the GPU.",
    )
    max_num_batched_tokens: Tokens | list[Tokens] | None = Field(
        None,
        description="Maximum tokens in one step (SGLang: the chunked-prefill size); default: the engine's.",
    )
    block_size: Tokens | list[Tokens] | None = Field(
        None, description="Tokens per KV-cache block (SGLang: page size); default: the engine's.",
    )
    enable_chunked_prefill: bool | list[bool] | None = Field(
        None,
        description="Split long prompts over steps within the token budget; default: the engine's (on).",
    )
    enable_prefix_caching: bool | list[bool] | None = Field(
        None, description="Reuse the KV of shared prompt prefixes (SGLang: the radix cache); default: the "
        "engine's (on).",
    )
    enforce_eager: bool = Field(False, description="Disable CUDA graphs (vLLM --enforce-eager).")
    extra_args: list[str] = Field(default_factory=list, description="Extra engine argv, passed verbatim.")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment of the engine processes. Names must be identifiers; names that look "
        "like credentials (*TOKEN*, *KEY*, *SECRET*, *PASSWORD*) are refused: use env_from_secret.",
    )
    env_from_secret: dict[str, SecretRef] = Field(
        default_factory=dict,
        description="Environment variables whose values are secrets, by reference only: "
        "{HF_TOKEN: {env: HF_TOKEN, secret: hf-token, key: token}}. The value is never stored or written.",
    )
    time_scale: float = Field(
        1.0, ge=0.001, le=1, description="sim only: wall seconds per simulated second (0.25 runs 4x faster "
        "than real time; results are reported in simulated time)."
    )
    sim_scheduler: Literal["vllm", "guaranteed-no-evict"] = Field(
        "vllm", description="sim only: how the simulated scheduler admits requests: 'vllm' (vLLM v1: KV for "
        "the first chunk, preempt and recompute when the cache fills) or 'guaranteed-no-evict' "
        "(TensorRT-LLM's default: KV for the prompt and the whole output reserved at admission, never "
        "preempted).",
    )
    num_redundant_experts: int = Field(
        0, ge=0, le=MAX_COUNT,
        description="MoE with EP: extra expert slots over all EP ranks (EPLB), a multiple of them.",
    )
    runtime_reserve_bytes: float | None = Field(
        None, ge=0, le=1e13,
        description="Memory per GPU kept for activations, CUDA graphs and buffers (a guess)."
    )
    startup_s: float | None = Field(
        None, gt=0, le=MAX_DURATION_S, description="Time allowed for the engine to become ready, in seconds."
    )
    speculative: SpeculativeSpec | None = Field(
        None,
        description="Speculative decoding: method, tokens drafted per step, acceptance "
        "(docs/speculative.md).",
    )

    @model_validator(mode="before")
    @classmethod
    def _one_value(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name in ONE_VALUE:
                if isinstance(data.get(name), list):
                    raise ValueError(
                        f"{name}: one value, not a list ({name} is fixed for a sweep; lists are for "
                        f"{', '.join(SETTING_LISTS)} and speculative.num_speculative_tokens)"
                    )
        return data

    @field_validator(*SETTING_LISTS)
    @classmethod
    def _setting_list(cls, value: Any) -> Any:
        if isinstance(value, list):
            if not value:
                raise ValueError("an empty list: give one value or several to compare")
            if len(set(value)) != len(value):
                raise ValueError(f"{value} lists a value twice")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str]) -> dict[str, str]:
        check_env(env)
        return env

    @field_validator("extra_args")
    @classmethod
    def _extra_args(cls, args: list[str]) -> list[str]:
        check_extra_args_secrets(args)
        return args

    @model_validator(mode="after")
    def _secrets(self) -> EngineSpec:
        check_secret_refs(self.env_from_secret, self.env)
        return self

    @model_validator(mode="after")
    def _few_combinations(self) -> EngineSpec:
        # Every combination is a candidate with its own capacity search: a grid of thousands would run
        # for days (and is a typo more often than a plan).
        sizes = {name: len(v) for name in SETTING_LISTS if isinstance(v := getattr(self, name), list)}
        if self.speculative is not None:
            sizes["speculative.num_speculative_tokens"] = len(self.speculative.token_counts)
        total = math.prod(sizes.values())
        if total > MAX_SETTING_COMBINATIONS:
            parts = " x ".join(f"{n} {name}" for name, n in sizes.items() if n > 1)
            raise ValueError(f"the settings lists make {total:,} combinations ({parts}), more than "
                             f"{MAX_SETTING_COMBINATIONS}; each is a candidate searched per layout: "
                             "list fewer values")
        return self
