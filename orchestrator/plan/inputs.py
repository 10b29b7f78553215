"""What the cost model needs from a spec, gathered once (`PlanInputs`), and the cost model of one
layout built from it: `layout_cost` (with the experts' load imbalance) and `speculative_step_cost`.
The planner and the simulator both price a layout through these.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from orchestrator.catalog.types import CheckpointQuant, GPUSpec, ModelConfig
from orchestrator.engines.settings import EngineSettings
from orchestrator.layout import Layout
from orchestrator.plan.assumptions import Assumptions
from orchestrator.plan.checks import Cluster
from orchestrator.plan.cost import LayoutCost, build_layout_cost
from orchestrator.plan.experts import imbalance, lognormal_popularity, place_redundant
from orchestrator.plan.memory import WeightFormat
from orchestrator.plan.params import ParamCounts, count_params
from orchestrator.plan.speculative import SpeculativeSettings
from orchestrator.plan.speculative_cost import SpeculativeCost, build_speculative_cost

if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use: a dense model's plan never needs it (orchestrator/lazy.py)
    from orchestrator.lazy import lazy_module

    np = lazy_module("numpy")


@dataclass(frozen=True)
class PlanInputs:
    cfg: ModelConfig
    gpu: GPUSpec
    cluster: Cluster
    settings: EngineSettings  # the engine's, resolved once (engines/settings.py); the simulator's too
    weight_dtype: str = "bf16"
    weight_bytes_per_value: float = 2.0
    quant_group_size: int = 128
    kv_bytes_per_value: float = 2.0
    assumptions: Assumptions = field(default_factory=Assumptions)
    expert_popularity: tuple[float, ...] | None = None  # measured; else the lognormal assumption
    num_redundant_experts: int = 0  # EPLB slots spread over the EP ranks
    fp8_attention: bool = False  # attention at the FP8 peak (FP8 KV cache); else bf16 even for fp8 weights
    # Bytes per weight by matrix kind when the checkpoint keeps some 16-bit (gpt-oss: MXFP4 experts,
    # bf16 attention); None: weight_bytes_per_value for all of them.
    weight_format: WeightFormat | None = None
    engine: str = "vllm"  # whose load-time rules the checks apply where engines differ (sglang or vLLM's)
    # How the engine's start-up sampler run, counted out of the KV pool, holds its logits: a key of
    # plan/memory.py SAMPLER_BYTES_PER_LOGIT ("no-sort": the vLLM we target; "none": no such run).
    sampler_profile: str = "no-sort"
    # The engine's MXFP4 MoE backend, whose layout sets the routed experts' resident bytes (a key of
    # plan/memory.py MXFP4_LAYOUTS; "unpadded": as the checkpoint stores them).
    mxfp4_backend: str = "unpadded"
    # The ITL bound's tail: 1 - percentile/100 of the binding ITL bound (0.01 for itl_p99_ms), 0 when the
    # binding bound is on TPOT (a per-request mean). Steps that carry a prompt chunk are the ITL tail.
    itl_tail_fraction: float = 0.0

    @property
    def checkpoint_quant(self) -> CheckpointQuant | None:
        """The checkpoint's declared format when the weights are served in it."""
        q = self.cfg.quantization
        return q if q is not None and q.weight_dtype == self.weight_dtype else None

    def with_settings(self, settings: EngineSettings) -> PlanInputs:
        """These inputs for an engine that runs `settings` (a candidate's own)."""
        return self if settings == self.settings else replace(self, settings=settings)

    @property
    def speculative(self) -> SpeculativeSettings | None:
        """The engine's speculative decoding (part of its settings), or None."""
        return self.settings.speculative

    @property
    def max_model_len(self) -> int:
        return self.settings.max_model_len

    @property
    def gpu_memory_utilization(self) -> float:
        return self.settings.gpu_memory_utilization

    @property
    def max_num_seqs(self) -> int:
        return self.settings.max_num_seqs

    @property
    def max_num_batched_tokens(self) -> int:
        """Token budget of one engine step (chunked prefill)."""
        return self.settings.max_num_batched_tokens

    @property
    def counts(self) -> ParamCounts:
        return count_params(self.cfg)

    def popularity(self) -> np.ndarray[Any, np.dtype[np.float64]]:
        if self.expert_popularity is not None:
            return np.asarray(self.expert_popularity, dtype=np.float64)
        a = self.assumptions
        return lognormal_popularity(self.cfg.num_routed_experts, sigma=a.expert_popularity_sigma,
                                    seed=a.expert_popularity_seed)


@functools.lru_cache(maxsize=512)
def expert_imbalance(inputs: PlanInputs, ep_size: int) -> float:
    """Busiest EP rank's load / mean over `ep_size` ranks. Cached: placing redundant experts takes a
    few hundred ms, and a search over layouts asks for the same EP size many times."""
    redundant = inputs.num_redundant_experts
    if redundant and (inputs.cfg.num_routed_experts + redundant) % ep_size == 0:
        placed = place_redundant(inputs.popularity(), ep_ranks=ep_size, redundant_slots=redundant)
        return placed.imbalance_after
    return imbalance(inputs.popularity(), ep_ranks=ep_size)


def layout_cost(inputs: PlanInputs, layout: Layout) -> LayoutCost:
    """The cost model of one layout; the simulator uses this too."""
    imb, copies = 1.0, 1.0
    routed, redundant = inputs.cfg.num_routed_experts, inputs.num_redundant_experts
    if layout.ep and inputs.cfg.is_moe and redundant and (routed + redundant) % layout.ep_size == 0:
        # EPLB: the placement with redundant slots (cached); every rank holds (routed + redundant) / EP
        imb = expert_imbalance(inputs, layout.ep_size)
        copies = (routed + redundant) / routed
    elif layout.ep and inputs.cfg.is_moe and routed % layout.ep_size:
        # vLLM's uneven split: the busiest rank holds ceil(E / ranks) experts
        imb = math.ceil(routed / layout.ep_size) / (routed / layout.ep_size)
    elif layout.ep and inputs.cfg.is_moe:
        imb = expert_imbalance(inputs, layout.ep_size)
    return build_layout_cost(
        inputs.cfg, inputs.counts, inputs.gpu, layout, gpus_per_node=inputs.cluster.gpus_per_node,
        weight_bytes_per_value=inputs.weight_bytes_per_value, kv_bytes_per_value=inputs.kv_bytes_per_value,
        fp8_compute=inputs.weight_dtype == "fp8", fp4_compute=inputs.weight_dtype == "nvfp4",
        assumptions=inputs.assumptions, expert_imbalance=imb,
        fp8_attention=inputs.fp8_attention, weight_format=inputs.weight_format,
        max_model_len=inputs.max_model_len, expert_copies=copies,
    )


def speculative_step_cost(inputs: PlanInputs, cost: LayoutCost) -> SpeculativeCost | None:
    """The speculative-decoding step model of one layout, or None without `engine.speculative`."""
    if inputs.speculative is None:
        return None
    return build_speculative_cost(
        inputs.speculative, cost, gpus_per_node=inputs.cluster.gpus_per_node,
        model_bytes_per_value=inputs.weight_bytes_per_value, kv_bytes_per_value=inputs.kv_bytes_per_value,
        fp8_compute=inputs.weight_dtype == "fp8", assumptions=inputs.assumptions,
        quant_group_size=inputs.quant_group_size,
    )
