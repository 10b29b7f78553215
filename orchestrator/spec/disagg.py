"""The spec's `disagg` section: how its prefill/decode layouts (`p:<layout>+d:<layout>`) run.

    disagg:
      transfer_backend: NixlConnector    # vLLM: NixlConnector | ExampleConnector; SGLang: mooncake | nixl ...
      router_policy: least_outstanding   # or round_robin
      prefill: {max_num_batched_tokens: 16384, num_redundant_experts: 32}
      decode: {max_num_seqs: 512, num_redundant_experts: 64}

Each pool's settings override the engine section's for that pool only; what neither sets is the
engine's own default for the GPU (engines/settings.py). Every field is optional: without the section a
pair runs the engine section's settings on both pools over the engine's default transfer backend.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.spec.base import SpecModel
from orchestrator.spec.checks import MAX_COUNT, MAX_TOKENS


class PoolSpec(SpecModel):
    """One pool's engine settings, where they differ from the engine section's."""

    engine: Literal["vllm", "sglang", "sim"] | None = Field(
        None, description="Must be engine.name when given: both pools run one engine (KV handover needs it).")
    max_num_seqs: int | None = Field(None, gt=0, le=MAX_COUNT, description="Sequences per engine step.")
    max_num_batched_tokens: int | None = Field(None, gt=0, le=MAX_TOKENS, description="Tokens per step.")
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1, description="Fraction of GPU memory.")
    block_size: int | None = Field(None, gt=0, le=MAX_TOKENS, description="Tokens per KV block.")
    enable_prefix_caching: bool | None = Field(None, description="Reuse the KV of shared prefixes.")
    num_redundant_experts: int | None = Field(
        None, ge=0, le=MAX_COUNT, description="MoE with EP: redundant expert slots of each replica of this "
        "pool (EPLB); routed + redundant must divide over the EP ranks. Default: "
        "engine.num_redundant_experts.")


class DisaggSpec(SpecModel):
    """How prefill/decode pairs run: the KV transfer backend, the router, and per-pool settings."""

    transfer_backend: str | None = Field(
        None, description="vLLM (and sim): the KV connector, NixlConnector (default) or ExampleConnector; "
        "SGLang: --disaggregation-transfer-backend, mooncake (default), nixl, ascend, mori, mooncake_tcp.")
    router_policy: Literal["round_robin", "least_outstanding"] = Field(
        "least_outstanding", description="How the router picks a prefill and a decode server per request.")
    prefill: PoolSpec = Field(default_factory=PoolSpec, description="The prefill pool's settings.")
    decode: PoolSpec = Field(default_factory=PoolSpec, description="The decode pool's settings.")
