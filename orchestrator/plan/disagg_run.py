"""`orch plan` for prefill/decode pairs without the printing: a spec's workload, SLO and engine applied."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from orchestrator.disagg import DisaggLayout
from orchestrator.errors import SpecError
from orchestrator.layout import Layout
from orchestrator.plan.calls import SESSION_KINDS, CallPricer, CallShape, request_call
from orchestrator.plan.candidates import disagg_candidate
from orchestrator.plan.disagg import LOAD_FOR_TTFT, DisaggRow, plan_pair
from orchestrator.plan.disagg_search import SplitPlan, plan_splits, rank_key
from orchestrator.plan.from_spec import mean_tokens, plan_inputs
from orchestrator.plan.run import SessionCalls, itl_bound_ms
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
    sessions: SessionCalls | None = None  # a session workload: each pair's call (its prefill pool's)

    def to_dict(self) -> dict[str, Any]:
        sess = self.sessions
        return {"engine": self.engine, "prompt_tokens": self.prompt_tokens,
                "output_tokens": self.output_tokens,
                **({"call": sess.to_dict()} if sess is not None else {}),
                "itl_bound_ms": self.itl_bound_ms, "ttft_bound_ms": self.ttft_bound_ms,
                "ttft_load_fraction": LOAD_FOR_TTFT,
                "rows": [{**r.to_dict(), **(sess.row_dict(str(r.layout)) if sess else {})}
                         for r in self.rows]}

    def call_text(self) -> str:
        """What the pairs were priced on: a request's prompt, or a session's call (as `orch plan`)."""
        if self.sessions is not None:
            return self.sessions.text(self.sessions.call.planned().context_tokens)
        return f"prompt {self.prompt_tokens}, output {self.output_tokens} tokens"


#: how a pair's router spreads a session's calls over its prefill engines (pipeline/points.py prices
#: a sweep's pair rows the same way: by load, not by prefix)
PAIR_ROUTING = "load-balanced"


def workload_tokens(spec: SweepSpec, prompt_tokens: int | None = None) -> tuple[int, int]:
    """(prompt, output) tokens per request: the workload's means (a --prompt override wins)."""
    w = spec.workload
    return prompt_tokens or mean_tokens(w.input_tokens), mean_tokens(w.output_tokens)


def ttft_bound_ms(spec: SweepSpec) -> float | None:
    """The tightest TTFT bound of the SLO, any percentile."""
    bounds = [v for (metric, _), v in spec.slo.bounds_ms().items() if metric == "ttft"]
    return min(bounds) if bounds else None


def _request(spec: SweepSpec, prompt_tokens: int | None) -> CallShape:
    """One request of the spec's mean token counts (a --prompt override wins)."""
    call = request_call(spec.workload)
    return replace(call, prompt_tokens=float(prompt_tokens)) if prompt_tokens is not None else call


def _priced(spec: SweepSpec, calls: CallPricer | None, prompt_tokens: int | None) -> bool:
    """Whether a session's call prices the rows (as make_plan: not with --prompt)."""
    return calls is not None and prompt_tokens is None and spec.workload.kind in SESSION_KINDS


def make_disagg_plan(spec: SweepSpec, pairs: list[DisaggLayout], *, prompt_tokens: int | None = None,
                     calls: CallPricer | None = None) -> DisaggPlanResult:
    """Each pair as the spec runs it (disagg section: pool settings, redundant experts, transfer).
    `calls`: a session workload's call on a pair's prefill pool (as a sweep's pair rows: the whole
    history less the prefix expected cached, by load-balanced routing)."""
    inputs = plan_inputs(spec)
    bound = itl_bound_ms(spec)
    ttft = ttft_bound_ms(spec)
    request = _request(spec, prompt_tokens)
    priced = _priced(spec, calls, prompt_tokens)
    rows, shapes = [], {}
    for pd in pairs:
        cand = disagg_candidate(spec, pd, inputs.settings)
        shape = shapes[str(pd)] = (calls(cand.prefill.layout, cand.prefill.settings)
                                   if calls is not None and priced else request)
        call = shape.planned()
        row = plan_pair(inputs, cand, prompt_tokens=call.prefill_tokens, output_tokens=call.output_tokens,
                        itl_bound_ms=bound)
        if row.fits and ttft is not None and row.ttft_ms > ttft:
            row = _warn(row, f"predicted TTFT without queueing {row.ttft_ms:.0f} ms exceeds the SLO bound "
                             f"{ttft:g} ms")
        rows.append(row)
    rows.sort(key=rank_key)
    sent = next(iter(shapes.values()), request).planned()
    return DisaggPlanResult(spec.engine.name, sent.prompt_tokens, sent.output_tokens, bound, ttft,
                            tuple(rows), SessionCalls(PAIR_ROUTING, shapes) if priced and shapes else None)


def _warn(row: DisaggRow, message: str) -> DisaggRow:
    return replace(row, warnings=(*row.warnings, message))


def make_split_plan(spec: SweepSpec, gpus: int | None = None, *, prompt_tokens: int | None = None,
                    calls: CallPricer | None = None, pair_calls: CallPricer | None = None) -> SplitPlan:
    """Every split of `gpus` (default: the spec's hardware) beside the aggregated layouts, ranked.
    `calls` / `pair_calls`: a session workload's call on an aggregated layout (the spec's routing) /
    a pair's prefill pool (load-balanced), as make_plan and make_disagg_plan price them."""
    inputs = plan_inputs(spec)
    total = gpus or inputs.cluster.gpus
    if total > MAX_SPLIT_GPUS:
        where = f"--disagg {gpus}" if gpus else f"hardware: {total:,} GPUs"
        raise SpecError(f"{where}: ranking every split of more than {MAX_SPLIT_GPUS:,} GPUs would take many "
                        "minutes (the splits grow with N); give --disagg N for the size of one "
                        "prefill/decode unit, e.g. --disagg 64")
    prompt, output = workload_tokens(spec, prompt_tokens)
    settings = inputs.settings
    agg = pair = None
    if _priced(spec, calls, prompt_tokens) and calls is not None and pair_calls is not None:
        def agg(lay: Layout) -> CallShape:
            return calls(lay, settings)

        def pair(lay: Layout) -> CallShape:
            return pair_calls(lay, settings)
    return plan_splits(inputs, gpus or inputs.cluster.gpus, engine=spec.engine.name, prompt_tokens=prompt,
                       output_tokens=output, itl_bound_ms=itl_bound_ms(spec), calls=agg, pair_calls=pair,
                       routing=f"{spec.routing_policies()[0]} (pairs: {PAIR_ROUTING})")
