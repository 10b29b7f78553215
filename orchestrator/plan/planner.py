"""The planner: memory fit, KV capacity, decode and prefill estimates per layout; rejects with reasons.

`PlanInputs` gathers what the cost model needs from a spec once; `plan_layout` scores one layout and
`plan` scores many and ranks them by predicted output tokens/s per GPU within the latency SLO.
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
from orchestrator.plan.checks import Cluster, layout_problems
from orchestrator.plan.cost import LayoutCost, StepParts, build_layout_cost
from orchestrator.plan.experts import imbalance, lognormal_popularity, place_redundant
from orchestrator.plan.kv import KVCacheShape
from orchestrator.plan.memory import WeightFormat, sampler_profile_bytes
from orchestrator.plan.params import ParamCounts, count_params
from orchestrator.plan.speculative import SpeculativeSettings
from orchestrator.plan.speculative_cost import SpeculativeCost, build_speculative_cost

if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use: a dense model's plan never needs it (orchestrator/lazy.py)
    from orchestrator.lazy import lazy_module

    np = lazy_module("numpy")

GB = 1e9
DEFAULT_BATCHES = (1, 16, 64, 256)  # the batch sizes `orch plan` shows decode estimates at


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


@dataclass(frozen=True)
class DecodeEstimate:
    batch: int  # sequences decoding together on one engine (one DP rank)
    context_tokens: int
    parts: StepParts  # one micro-batch through every stage
    itl_ms: float  # per-token latency: one round in which every sequence gets a token
    microbatches: int
    output_tokens_per_s_per_replica: float
    output_tokens_per_s_per_gpu: float
    fits_kv: bool
    touched_expert_fraction: float | None
    # Prefill charged (decode_estimate): `itl_ms` is then the mean step over decode-only steps and
    # steps carrying a prompt chunk of `prefill_chunk_tokens`; those take `chunk_step_ms` (the ITL tail).
    # With speculative decoding a step gives each sequence `tokens_per_step` tokens at once: `itl_ms` is
    # the gap between those bursts and `tpot_ms` the time per token.
    decoding: int = 0  # sequences kept decoding (the batch, unless prefill cannot keep it full)
    prefill_chunk_tokens: int = 0
    chunk_step_fraction: float = 0.0
    chunk_step_ms: float = 0.0
    # The ITL at the SLO's percentile (itl_tail_fraction): the step carrying the prompts that arrive
    # together at that tail (0 when not asked for).
    itl_tail_ms: float = 0.0
    tokens_per_step: float = 1.0

    @property
    def tpot_ms(self) -> float:
        return self.itl_ms / self.tokens_per_step

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch": self.batch, "context_tokens": self.context_tokens, "itl_ms": self.itl_ms,
            "tpot_ms": self.tpot_ms, "tokens_per_step": self.tokens_per_step,
            "decoding": self.decoding, "prefill_chunk_tokens": self.prefill_chunk_tokens,
            "chunk_step_fraction": self.chunk_step_fraction, "chunk_step_ms": self.chunk_step_ms,
            "itl_tail_ms": self.itl_tail_ms,
            "microbatches": self.microbatches, "parts": self.parts.to_ms_dict(),
            "output_tokens_per_s_per_replica": self.output_tokens_per_s_per_replica,
            "output_tokens_per_s_per_gpu": self.output_tokens_per_s_per_gpu,
            "fits_kv": self.fits_kv, "touched_expert_fraction": self.touched_expert_fraction,
        }


@dataclass(frozen=True)
class PlanRow:
    layout: Layout
    gpus: int
    rejected_because: tuple[str, ...]
    warnings: tuple[str, ...]
    weight_bytes_per_gpu: float = 0.0  # the most loaded PP stage
    usable_bytes_per_gpu: float = 0.0
    kv_bytes_per_token_per_gpu: float = 0.0
    kv_tokens_per_replica: int = 0  # all DP ranks of one replica together
    kv_tokens_total: int = 0
    max_batch: int = 0  # sequences per engine whose KV fits at the context length
    expert_imbalance: float | None = None
    decode: tuple[DecodeEstimate, ...] = ()
    prefill_ms: float | None = None  # TTFT of one prompt alone: the request overhead + its prefill step
    prefill_parts: StepParts | None = None
    best: DecodeEstimate | None = None  # highest tokens/s per GPU within the ITL bound
    pp_idle_fraction: float = 0.0  # synchronous bubble (p-1)/(m+p-1)

    @property
    def fits(self) -> bool:
        return not self.rejected_because

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": str(self.layout), "gpus": self.gpus, "fits": self.fits,
            "rejected_because": list(self.rejected_because), "warnings": list(self.warnings),
            "weight_bytes_per_gpu": self.weight_bytes_per_gpu,
            "usable_bytes_per_gpu": self.usable_bytes_per_gpu,
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            "kv_tokens_per_replica": self.kv_tokens_per_replica, "kv_tokens_total": self.kv_tokens_total,
            "max_batch": self.max_batch, "expert_imbalance": self.expert_imbalance,
            "decode": [d.to_dict() for d in self.decode],
            "prefill_ms": self.prefill_ms,
            "prefill_parts": self.prefill_parts.to_ms_dict() if self.prefill_parts else None,
            "best": self.best.to_dict() if self.best else None,
            "pp_idle_fraction": self.pp_idle_fraction,
        }


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


@dataclass(frozen=True)
class KVCapacity:
    """The KV cache of one engine rank: the room each PP stage's GPUs keep after weights and reserve,
    and how the hybrid allocator fills it (plan/kv.py). Every stage holds KV for the same sequences,
    so the tightest stage bounds the rank.

    A speculative drafter's weights are already out of the last stage's room; its KV
    (`draft_kv_bytes_per_token`, per GPU of the last stage) shares the model's cache, every cached
    token holding both (vLLM puts the drafter's attention layers in the same pool), so that stage's
    room goes to the two in proportion to their bytes per token."""

    rooms: tuple[float, ...]  # bytes per GPU left for KV, per stage (negative: weights do not fit)
    shapes: tuple[KVCacheShape, ...]
    heaviest_weight_bytes: float
    usable_bytes: float
    draft_kv_bytes_per_token: float = 0.0
    sampler_bytes: float = 0.0  # the last stage's start-up sampler peak (plan/memory.py), out of its room

    def _kv_rooms(self) -> tuple[float, ...]:
        """Each stage's room for the model's own KV: the last stage's less its drafter's share."""
        extra = self.draft_kv_bytes_per_token
        if not extra or min(self.rooms) < 0:
            return self.rooms
        last = self.shapes[-1]
        own = last.bytes_per_block * max(last.growing_groups, 1) / last.block_tokens
        return (*self.rooms[:-1], self.rooms[-1] * own / (own + extra) if own else self.rooms[-1])

    @property
    def tokens(self) -> int:
        """Context tokens the rank holds in its growing (full-attention) KV, no side blocks counted;
        negative when the weights alone do not fit."""
        if min(self.rooms) < 0:
            return math.floor(min(self.rooms))
        return min(sh.capacity_tokens(r) for sh, r in zip(self.shapes, self._kv_rooms(), strict=True))

    def sequences(self, context_tokens: int) -> int:
        """Sequences of `context_tokens` each the rank holds."""
        if min(self.rooms) < 0:
            return 0
        rooms = self._kv_rooms()
        return min(sh.sequences(r, context_tokens) for sh, r in zip(self.shapes, rooms, strict=True))

    def side_tokens(self, context_tokens: int) -> int:
        """A sequence's window and state blocks, in full-attention tokens (what the simulator charges)."""
        return max(sh.side_tokens(context_tokens) for sh in self.shapes)

    def max_len_shortfall(self, max_model_len: int, step_budget_tokens: int) -> float:
        """Bytes by which one max_model_len request does not fit (vLLM's start check); <= 0 fits. The
        drafter's layers hold the request too."""
        last = len(self.shapes) - 1
        return max(sh.max_len_bytes(max_model_len, step_budget_tokens) + sh.bytes_per_block - r
                   + (self.draft_kv_bytes_per_token * max_model_len if i == last else 0.0)
                   for i, (sh, r) in enumerate(zip(self.shapes, self.rooms, strict=True)))


def kv_capacity(inputs: PlanInputs, cost: LayoutCost, spec: SpeculativeCost | None = None) -> KVCapacity:
    """The rank's KV capacity; a drafter (`spec`) adds its weights and its KV on the last stage."""
    reserve = inputs.assumptions.runtime_reserve_bytes
    usable = inputs.gpu.memory_bytes * inputs.gpu_memory_utilization - reserve
    # Only the last PP stage samples, so only its GPUs hold the sampler run's peak.
    sampler = sampler_profile_bytes(inputs.cfg.vocab_size, inputs.max_num_seqs, inputs.max_num_batched_tokens,
                                    inputs.sampler_profile)
    rooms, shapes, heaviest = [], [], 0.0
    last = len(cost.stages) - 1
    for i, st in enumerate(cost.stages):
        weights = st.dense_weight_bytes + st.expert_weight_bytes
        if spec is not None and i == last:
            weights += spec.draft_weight_bytes_per_gpu
        heaviest = max(heaviest, weights)
        rooms.append(usable - weights - (sampler if i == last else 0.0))
        assert st.kv_shape is not None  # build_layout_cost always sets it
        shapes.append(st.kv_shape)
    draft_kv = spec.draft_kv_bytes_per_token_per_gpu if spec is not None else 0.0
    return KVCapacity(tuple(rooms), tuple(shapes), heaviest, usable, draft_kv, sampler)


def kv_capacity_tokens(inputs: PlanInputs, cost: LayoutCost,
                       spec: SpeculativeCost | None = None) -> tuple[int, float, float]:
    """(KV tokens one engine rank holds, heaviest stage's weight bytes per GPU, usable bytes per GPU).
    Negative tokens mean the weights alone do not fit."""
    cap = kv_capacity(inputs, cost, spec)
    return cap.tokens, cap.heaviest_weight_bytes, cap.usable_bytes


def decode_estimate(cost: LayoutCost, layout: Layout, batch: int, context: int,
                    kv_tokens: int, *, step_budget_tokens: int, prompt_tokens: int = 0,
                    output_tokens: int | None = None, itl_tail_fraction: float = 0.0,
                    spec: SpeculativeCost | None = None) -> DecodeEstimate:
    """Tokens/s and ITL of `batch` sequences decoding at `context` tokens each.

    With `output_tokens` (per request) the prefill that keeps the batch full is charged as vLLM's
    scheduler runs it. Each step, batch/output requests finish, so P = batch * prompt/output prefill
    tokens per step are needed. New prompts go in chunks of up to c = min(prompt, budget - batch)
    tokens riding in decode steps: if P <= c, a fraction f = P/c of the steps carry a chunk and the
    mean step (TPOT) is f t(batch + c) + (1 - f) t(batch), the chunk steps being the ITL tail;
    otherwise every step carries P tokens. A batch with batch (1 + prompt/output) > budget cannot be
    kept full: only budget / (1 + prompt/output) sequences decode.
    With `spec` every step is priced by `SpeculativeCost.round_s`, each decode takes k+1 tokens of the
    budget, and a step gives each sequence `tokens_per_step` tokens.

    With `itl_tail_fraction` q (0.01 for a p99 bound), `itl_tail_ms` is the ITL a q-tail sees: prompts
    arrive as a Poisson stream of mu = batch/output per step, so at that tail a step carries the
    k = Poisson(mu) (1 - q)-quantile prompts at once (whole prompts, within the step budget), and every
    sequence decoding beside them waits for that step. This is what a measured p99 ITL is (and what
    the simulator's is): steps carrying two prompts at once are rare, but past 1% they set the p99.
    """
    decoding = batch
    per_step = spec.tokens_per_step if spec is not None else 1.0
    budget_per_decode = spec.k + 1 if spec is not None else 1
    ratio = prompt_tokens / output_tokens * per_step if output_tokens and prompt_tokens else 0.0
    if ratio:
        decoding = max(1, min(batch, math.floor(step_budget_tokens / (budget_per_decode + ratio))))
    parts, decode_s, m = cost.decode_round_s(decoding, context)
    if spec is not None:
        decode_s = spec.decode_step_s(decoding, context)
    mean_s, chunk_s, frac, chunk = decode_s, 0.0, 0.0, 0.0
    if ratio:
        needed = decoding * ratio
        chunk = float(max(1, min(prompt_tokens, step_budget_tokens - budget_per_decode * decoding)))
        frac = min(1.0, needed / chunk)
        chunk = max(chunk, needed)  # several prompts per step when one chunk is not enough
        # Averaged over a prompt, a prefill token attends to (prompt + 1) / 2 tokens; a chunk that is
        # not a prompt's first reads the KV of the chunks before it (on average half the rest).
        pairs = chunk * (prompt_tokens + 1) / 2
        prefix = max(0.0, prompt_tokens - chunk) / 2
        kv = decoding * context + prefix
        chunk_s = _mixed_step_s(cost, spec, decoding, context, chunk, kv, pairs, decoding + 1, prefix)
        mean_s = frac * chunk_s + (1 - frac) * decode_s
    tail_s = 0.0
    if ratio and itl_tail_fraction > 0 and output_tokens:
        # Requests finish (and prompts arrive) per_step times as often with speculation.
        arrivals = _poisson_quantile(decoding * per_step / output_tokens, 1.0 - itl_tail_fraction)
        tokens = min(arrivals * prompt_tokens, max(step_budget_tokens - budget_per_decode * decoding, 1))
        tail_s = decode_s
        if tokens:
            pairs_k = tokens * (prompt_tokens + 1) / 2
            tail_s = _mixed_step_s(cost, spec, decoding, context, tokens, decoding * context, pairs_k,
                                   decoding + arrivals)
        tail_s = max(tail_s, mean_s)
    per_replica = layout.dp * decoding * per_step / mean_s
    moe_tokens = math.ceil(decoding / m) * (layout.dp if layout.ep else 1)
    return DecodeEstimate(
        batch=batch, context_tokens=context, parts=parts, itl_ms=mean_s * 1e3, microbatches=m,
        output_tokens_per_s_per_replica=per_replica,
        output_tokens_per_s_per_gpu=per_replica / layout.gpus_per_replica,
        fits_kv=batch * context <= kv_tokens,
        touched_expert_fraction=cost.touched_fraction(moe_tokens) if cost.cfg.is_moe else None,
        decoding=decoding, prefill_chunk_tokens=round(chunk), chunk_step_fraction=frac,
        chunk_step_ms=chunk_s * 1e3, itl_tail_ms=tail_s * 1e3, tokens_per_step=per_step,
    )


def _mixed_step_s(cost: LayoutCost, spec: SpeculativeCost | None, decoding: int, context: int,
                  prompt_tokens: float, kv_tokens: float, prefill_pairs: float, sequences: int,
                  prefix_tokens: float = 0.0) -> float:
    """One step of `decoding` decodes at `context` tokens each plus `prompt_tokens` of prompt chunks
    (`prefix_tokens`: prompt computed before those chunks, LayoutCost.round_s)."""
    if spec is not None:
        return spec.round_s(decoding + prompt_tokens, kv_tokens, decoding * (context + 1) + prefill_pairs,
                            sequences, decodes=decoding, prefill_pairs=prefill_pairs,
                            prefix_tokens=prefix_tokens)
    return cost.round_s(decoding + prompt_tokens, kv_tokens, decoding * context + prefill_pairs, sequences,
                        prefill_pairs=prefill_pairs, prefix_tokens=prefix_tokens)


def _poisson_quantile(mu: float, level: float) -> int:
    """Smallest k with P(Poisson(mu) <= k) >= level."""
    term = cdf = math.exp(-mu)
    k = 0
    while cdf < level and k < 10_000:
        k += 1
        term *= mu / k
        cdf += term
    return k


def itl_within(est: DecodeEstimate) -> float:
    """The ITL an SLO bound is checked against: the tail at the bound's percentile when one was asked
    for (decode_estimate's itl_tail_ms), else the mean step. Comparing the mean with a p99 bound made
    the planner rank pipeline layouts first (their steps carrying a prompt are a trip through every
    stage, so a burst of two prompts costs twice a long step) where the simulator found them last."""
    return est.itl_tail_ms or est.itl_ms


def search_batches(max_batch: int) -> list[int]:
    """Batches the planner tries for the best one within the ITL bound: powers of two, then the cap."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    out.append(max_batch)
    return out


def plan_layout(inputs: PlanInputs, layout: Layout, *, batches: tuple[int, ...] = DEFAULT_BATCHES,
                context_tokens: int = 2048, prompt_tokens: int = 1024,
                itl_bound_ms: float | None = None, output_tokens: int | None = None) -> PlanRow:
    """Score one layout. With `output_tokens` (per request) decode estimates charge the prefill of
    the prompts that keep the batch full (`decode_estimate`); without it they are decode alone."""
    reject, warn = layout_problems(inputs.cfg, layout, inputs.cluster, weight_dtype=inputs.weight_dtype,
                                   group_size=inputs.quant_group_size, quant=inputs.checkpoint_quant,
                                   engine=inputs.engine,
                                   redundant_experts=inputs.num_redundant_experts if layout.ep else 0)
    if any("pipeline stages" in r or "EP ranks" in r or "EP on a dense" in r for r in reject):
        return PlanRow(layout, layout.gpus, tuple(reject), tuple(warn))
    cost = layout_cost(inputs, layout)
    spec = speculative_step_cost(inputs, cost)
    cap = kv_capacity(inputs, cost, spec)
    kv_tokens, weights, usable = cap.tokens, cap.heaviest_weight_bytes, cap.usable_bytes
    stage0 = cost.stages[0]
    if kv_tokens < 0:
        reserve = inputs.assumptions.runtime_reserve_bytes + cap.sampler_bytes
        reject.append(f"weights {weights / GB:.1f} GB per GPU + reserve "
                      f"{reserve / GB:.1f} GB exceed the usable "
                      f"{(usable + inputs.assumptions.runtime_reserve_bytes) / GB:.1f} GB "
                      f"({inputs.gpu_memory_utilization:g} of {inputs.gpu.memory_bytes / GB:.0f} GB)")
        kv_tokens = 0
    elif (short := cap.max_len_shortfall(inputs.max_model_len, inputs.max_num_batched_tokens)) > 0:
        # vLLM's start check (kv_cache_utils.check_enough_kv_cache_memory): one request of
        # max_model_len must fit, window layers counting their window plus a step's tokens.
        reject.append(f"KV cache holds {kv_tokens} tokens per engine, less than max_model_len "
                      f"{inputs.max_model_len} needs: one full-length request would not fit "
                      f"({short / GB:.2f} GB short)")
    kv_seqs = cap.sequences(context_tokens) if kv_tokens > 0 else 0
    max_batch = min(inputs.max_num_seqs, kv_seqs)
    if 0 < max_batch < max(batches) and not reject:
        # Say which limit binds: a small KV cache is a memory problem, max_num_seqs an engine setting.
        if kv_seqs <= inputs.max_num_seqs:
            warn.append(f"at {context_tokens} context tokens the KV cache holds only {kv_seqs} "
                        f"sequences per engine (max_num_seqs {inputs.max_num_seqs})")
        else:
            warn.append(f"max_num_seqs {inputs.max_num_seqs} caps the batch at {max_batch} sequences "
                        f"per engine (the KV cache would hold {kv_seqs} at {context_tokens} context tokens)")
    imb = cost.expert_imbalance if layout.ep else None
    def estimate(b: int) -> DecodeEstimate:
        return decode_estimate(cost, layout, b, context_tokens, kv_tokens, prompt_tokens=prompt_tokens,
                               output_tokens=output_tokens,
                               step_budget_tokens=inputs.max_num_batched_tokens,
                               itl_tail_fraction=inputs.itl_tail_fraction if itl_bound_ms else 0.0,
                               spec=spec)

    decode = tuple(estimate(b) for b in batches)
    prefill = cost.prefill(prompt_tokens)
    best = None
    if max_batch >= 1 and not reject:
        for b in search_batches(max_batch):
            est = estimate(b)
            if itl_bound_ms is not None and itl_within(est) > itl_bound_ms:
                break
            if best is None or est.output_tokens_per_s_per_gpu > best.output_tokens_per_s_per_gpu:
                best = est
        if best is None and itl_bound_ms is not None:
            one = estimate(1)
            tail = " at the bound's percentile" if one.itl_tail_ms else ""
            warn.append(f"predicted ITL{tail} at batch 1 ({itl_within(one):.1f} ms) exceeds the SLO bound "
                        f"{itl_bound_ms:g} ms")
    m = max(1, min(layout.pp, max_batch or 1))
    return PlanRow(
        layout=layout, gpus=layout.gpus, rejected_because=tuple(reject), warnings=tuple(warn),
        weight_bytes_per_gpu=weights, usable_bytes_per_gpu=usable,
        kv_bytes_per_token_per_gpu=max(st.kv_bytes_per_token for st in cost.stages) if stage0 else 0.0,
        kv_tokens_per_replica=kv_tokens * layout.dp, kv_tokens_total=kv_tokens * layout.dp * layout.replicas,
        max_batch=max(max_batch, 0), expert_imbalance=imb, decode=decode,
        prefill_ms=(cost.request_overhead_s + prefill.total_s) * 1e3, prefill_parts=prefill, best=best,
        pp_idle_fraction=(layout.pp - 1) / (m + layout.pp - 1),
    )


def rank_rows(rows: list[PlanRow]) -> list[PlanRow]:
    """Fitting layouts first, by predicted tokens/s per GPU at their best batch; then rejected ones."""
    def key(row: PlanRow) -> tuple[int, float]:
        if not row.fits:
            return (2, 0.0)
        if row.best is None:
            return (1, 0.0)
        return (0, -row.best.output_tokens_per_s_per_gpu)
    return sorted(rows, key=key)
