"""Decode estimates: tokens/s and ITL of a batch decoding on one layout, with the prefill that keeps
the batch full charged as vLLM's scheduler runs it, and the ITL at an SLO's percentile."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from orchestrator.layout import Layout
from orchestrator.plan.cost import LayoutCost, StepParts
from orchestrator.plan.speculative_cost import SpeculativeCost


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
