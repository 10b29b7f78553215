"""The planner: memory fit, KV capacity, decode and prefill estimates per layout; rejects with reasons.

`plan_layout` scores one layout from its `PlanInputs` (plan/inputs.py), its KV capacity
(plan/capacity.py) and its decode estimates (plan/decode.py); `rank_rows` ranks many by predicted
output tokens/s per GPU within the latency SLO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.layout import Layout
from orchestrator.plan.capacity import kv_capacity
from orchestrator.plan.checks import layout_problems
from orchestrator.plan.cost import StepParts
from orchestrator.plan.decode import DecodeEstimate, decode_estimate, itl_within
from orchestrator.plan.inputs import PlanInputs, layout_cost, speculative_step_cost

GB = 1e9
DEFAULT_BATCHES = (1, 16, 64, 256)  # the batch sizes `orch plan` shows decode estimates at


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
        reserve = inputs.assumptions.runtime_reserve_bytes + cap.startup_peak_bytes
        reject.append(f"weights {weights / GB:.1f} GB per GPU + reserve "
                      f"{reserve / GB:.1f} GB exceed the usable "
                      f"{(usable + inputs.assumptions.runtime_reserve_bytes) / GB:.1f} GB "
                      f"({inputs.gpu_memory_utilization:g} of {inputs.gpu.memory_bytes / GB:.0f} GB)")
        kv_tokens = 0
    elif (short := cap.max_len_shortfall(inputs.max_model_len, inputs.max_num_batched_tokens)) > 0:
        # vLLM's start check (kv_cache_utils.check_enough_kv_cache_memory): one request of
        # max_model_len must fit, window layers counting their window plus a step's tokens.
        if kv_tokens >= inputs.max_model_len:  # the window layers' blocks are what does not fit
            reject.append(f"KV cache holds {kv_tokens} full-attention tokens per engine, but one "
                          f"max_model_len {inputs.max_model_len} request also needs its sliding-window "
                          f"layers' blocks and a step's tokens: it would not fit ({short / GB:.2f} GB short)")
        else:
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
