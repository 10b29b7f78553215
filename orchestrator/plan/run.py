"""`orch plan` without the printing: plan a spec's layouts (or every sensible one) and rank them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.engines import EngineSettings
from orchestrator.errors import SpecError
from orchestrator.layout import Layout
from orchestrator.plan.enumerate import enumerate_layouts
from orchestrator.plan.from_spec import mean_tokens, plan_inputs
from orchestrator.plan.inputs import PlanInputs
from orchestrator.plan.kv import kv_bytes_per_sequence
from orchestrator.plan.memory import kv_bytes_per_token
from orchestrator.plan.planner import DEFAULT_BATCHES, PlanRow, plan_layout, rank_rows
from orchestrator.spec.checks import MAX_TOKENS
from orchestrator.spec.models import SweepSpec


@dataclass(frozen=True)
class PlanResult:
    inputs: PlanInputs
    batches: tuple[int, ...]
    context_tokens: int
    prompt_tokens: int
    itl_bound_ms: float | None
    output_tokens: int | None  # per request: decode estimates charge prompt/output prefill tokens
    enumerated: bool
    rows: tuple[PlanRow, ...]

    def to_dict(self) -> dict[str, Any]:
        inp = self.inputs
        counts = inp.counts
        return {
            "model": inp.cfg.name, "gpu": inp.gpu.name, "gpu_source": inp.gpu.source,
            "nodes": inp.cluster.nodes, "gpus_per_node": inp.cluster.gpus_per_node,
            "weight_dtype": inp.weight_dtype, "total_params": counts.total, "active_params": counts.active,
            "kv_bytes_per_token": kv_bytes_per_token(inp.cfg, inp.kv_bytes_per_value),
            # One max_model_len sequence: full layers the context, window layers their window, state
            # layers their state (plan/kv.py); the MTP and vision parameters are apart from the totals.
            "kv_bytes_per_sequence": kv_bytes_per_sequence(inp.cfg, inp.kv_bytes_per_value,
                                                           inp.max_model_len),
            "layer_kinds": {k: inp.cfg.layer_kinds.count(k) for k in sorted(set(inp.cfg.layer_kinds))}
            or {"full": inp.cfg.num_layers},
            "mtp_params": counts.mtp, "vision_params": counts.vision,
            "max_model_len": inp.max_model_len, "batches": list(self.batches),
            "context_tokens": self.context_tokens, "prompt_tokens": self.prompt_tokens,
            "itl_bound_ms": self.itl_bound_ms, "enumerated": self.enumerated,
            "output_tokens": self.output_tokens,
            "prefill_tokens_per_output_token": (self.prompt_tokens / self.output_tokens
                                                if self.output_tokens else 0.0),
            "gpu_profile": inp.gpu.profile or None,
            "assumptions": {
                **inp.assumptions.to_dict(), "hbm_efficiency": inp.gpu.hbm_efficiency,
                "compute_efficiency": inp.gpu.compute_efficiency,
                "moe_compute_efficiency": inp.gpu.moe_compute_efficiency,
                "step_overhead_s": inp.gpu.step_overhead_s,
                "request_overhead_s": inp.gpu.request_overhead_s,
                "gpu_memory_utilization": inp.gpu_memory_utilization,
            },
            "engine_settings": inp.settings.to_dict(),
            "rows": [r.to_dict() for r in self.rows],
        }


def itl_bound_ms(spec: SweepSpec) -> float | None:
    """The tightest per-token bound of the SLO (ITL or TPOT, any percentile): decode must beat it."""
    bounds = [v for (metric, _), v in spec.slo.bounds_ms().items() if metric in ("itl", "tpot")]
    return min(bounds) if bounds else None


def make_plan(spec: SweepSpec, *, layouts: list[Layout] | None = None, all_layouts: bool = False,
              batches: tuple[int, ...] = DEFAULT_BATCHES, context_tokens: int | None = None,
              prompt_tokens: int | None = None, charge_prefill: bool = True,
              settings: EngineSettings | None = None) -> PlanResult:
    """Plan and rank. Decode throughput charges the workload's prefill (prompt/output tokens per
    output token, as chunked prefill mixes them into decode steps) unless `charge_prefill` is off.
    `settings`: the engine settings to plan with (default: the spec's engine's, resolved)."""
    if any(b < 1 for b in batches):
        raise SpecError("--batch: batch sizes must be positive integers, e.g. --batch 1,64")
    for flag, tokens in (("--context", context_tokens), ("--prompt", prompt_tokens)):
        if tokens is not None and not 1 <= tokens <= MAX_TOKENS:
            raise SpecError(f"{flag} {tokens}: give a number of tokens from 1 to {MAX_TOKENS:,}")
    inputs = plan_inputs(spec, settings)
    prompt = prompt_tokens or mean_tokens(spec.workload.input_tokens)
    # Decode reads, on average, the prompt and half the answer of every sequence in the batch.
    context = context_tokens or prompt + mean_tokens(spec.workload.output_tokens) // 2
    if all_layouts:
        # Every sensible layout, plus the spec's own candidates wherever enumeration would skip them.
        chosen = enumerate_layouts(inputs.cfg, inputs.cluster)
        chosen += [lay for lay in spec.layouts if isinstance(lay, Layout) and lay not in chosen]
    else:  # the spec's prefill/decode pairs are plan/disagg_run.py's
        chosen = layouts or [lay for lay in spec.layouts if isinstance(lay, Layout)]
    bound = itl_bound_ms(spec)
    output = mean_tokens(spec.workload.output_tokens) if charge_prefill else None
    rows = []
    for lay in chosen:
        try:
            rows.append(plan_layout(inputs, lay, batches=batches, context_tokens=context,
                                    prompt_tokens=prompt, itl_bound_ms=bound, output_tokens=output))
        except SpecError as exc:
            # A spec setting that this one layout cannot honour (e.g. more redundant expert slots
            # than its EP ranks can hold) rejects the layout, not the whole plan.
            rows.append(PlanRow(lay, lay.gpus, (str(exc),), ()))
    return PlanResult(inputs, batches, context, prompt, bound, output, all_layouts, tuple(rank_rows(rows)))


__all__ = ["DEFAULT_BATCHES", "PlanResult", "itl_bound_ms", "make_plan"]
