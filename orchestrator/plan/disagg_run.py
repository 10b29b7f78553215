"""`orch plan` for prefill/decode pairs without the printing: a spec's workload, SLO and engine applied."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from orchestrator.disagg import DisaggLayout
from orchestrator.errors import SpecError
from orchestrator.plan.candidates import disagg_candidate
from orchestrator.plan.disagg import LOAD_FOR_TTFT, DisaggRow, plan_pair
from orchestrator.plan.disagg_search import SplitPlan, plan_splits, rank_key
from orchestrator.plan.from_spec import mean_tokens, plan_inputs
from orchestrator.plan.run import itl_bound_ms
from orchestrator.spec.models import SweepSpec

# `orch plan --disagg N` ranks every split of N GPUs: about 6 s for 1,024 and 25 s for 4,096 on this
# machine (linear in N), so beyond 8,192 a plan is refused rather than left running for minutes.
MAX_SPLIT_GPUS = 8192


@dataclass(frozen=True)
class DisaggPlanResult:
    engine: str
    prompt_tokens: int
    output_tokens: int
    itl_bound_ms: float | None
    ttft_bound_ms: float | None
    rows: tuple[DisaggRow, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "prompt_tokens": self.prompt_tokens,
                "output_tokens": self.output_tokens,
                "itl_bound_ms": self.itl_bound_ms, "ttft_bound_ms": self.ttft_bound_ms,
                "ttft_load_fraction": LOAD_FOR_TTFT, "rows": [r.to_dict() for r in self.rows]}


def workload_tokens(spec: SweepSpec, prompt_tokens: int | None = None) -> tuple[int, int]:
    """(prompt, output) tokens per request: the workload's means (a --prompt override wins)."""
    w = spec.workload
    return prompt_tokens or mean_tokens(w.input_tokens), mean_tokens(w.output_tokens)


def ttft_bound_ms(spec: SweepSpec) -> float | None:
    """The tightest TTFT bound of the SLO, any percentile."""
    bounds = [v for (metric, _), v in spec.slo.bounds_ms().items() if metric == "ttft"]
    return min(bounds) if bounds else None


def make_disagg_plan(spec: SweepSpec, pairs: list[DisaggLayout], *,
                     prompt_tokens: int | None = None) -> DisaggPlanResult:
    """Each pair as the spec runs it (disagg section: pool settings, redundant experts, transfer)."""
    inputs = plan_inputs(spec)
    prompt, output = workload_tokens(spec, prompt_tokens)
    bound = itl_bound_ms(spec)
    ttft = ttft_bound_ms(spec)
    rows = []
    for pd in pairs:
        cand = disagg_candidate(spec, pd, inputs.settings)
        row = plan_pair(inputs, cand, prompt_tokens=prompt, output_tokens=output, itl_bound_ms=bound)
        if row.fits and ttft is not None and row.ttft_ms > ttft:
            row = _warn(row, f"predicted TTFT without queueing {row.ttft_ms:.0f} ms exceeds the SLO bound "
                             f"{ttft:g} ms")
        rows.append(row)
    rows.sort(key=rank_key)
    return DisaggPlanResult(spec.engine.name, prompt, output, bound, ttft, tuple(rows))


def _warn(row: DisaggRow, message: str) -> DisaggRow:
    return replace(row, warnings=(*row.warnings, message))


def make_split_plan(spec: SweepSpec, gpus: int | None = None, *,
                    prompt_tokens: int | None = None) -> SplitPlan:
    """Every split of `gpus` (default: the spec's hardware) beside the aggregated layouts, ranked."""
    inputs = plan_inputs(spec)
    total = gpus or inputs.cluster.gpus
    if total > MAX_SPLIT_GPUS:
        where = f"--disagg {gpus}" if gpus else f"hardware: {total:,} GPUs"
        raise SpecError(f"{where}: ranking every split of more than {MAX_SPLIT_GPUS:,} GPUs would take many "
                        "minutes (the splits grow with N); give --disagg N for the size of one "
                        "prefill/decode unit, e.g. --disagg 64")
    prompt, output = workload_tokens(spec, prompt_tokens)
    return plan_splits(inputs, gpus or inputs.cluster.gpus, engine=spec.engine.name, prompt_tokens=prompt,
                       output_tokens=output, itl_bound_ms=itl_bound_ms(spec))
