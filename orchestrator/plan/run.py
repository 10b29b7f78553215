"""`orch plan` without the printing: plan a spec's layouts (or every sensible one) and rank them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.engines import EngineSettings
from orchestrator.errors import SpecError
from orchestrator.layout import Layout
from orchestrator.plan.calls import SESSION_KINDS, CallPricer, CallShape, request_call
from orchestrator.plan.enumerate import enumerate_layouts
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.plan.inputs import PlanInputs
from orchestrator.plan.kv import kv_bytes_per_sequence
from orchestrator.plan.memory import kv_bytes_per_token
from orchestrator.plan.planner import DEFAULT_BATCHES, PlanRow, plan_layout, rank_rows
from orchestrator.spec.checks import MAX_TOKENS
from orchestrator.spec.models import SweepSpec


@dataclass(frozen=True)
class SessionCalls:
    """How a session workload was priced: each layout's mean call (plan/calls.py; the same across
    layouts but for the prefix expected cached, which depends on how many engines `routing` spreads
    a session's calls over)."""

    routing: str
    calls: Mapping[str, CallShape]  # by layout name

    @property
    def call(self) -> CallShape:
        """One layout's call (sent and answered tokens, calls per session are every layout's)."""
        return next(iter(self.calls.values()))

    def text(self, context_tokens: int, *, per_layout: str = "per layout below") -> str:
        """The call in words, for `orch plan`'s first line (`per_layout`: where each layout's is)."""
        one, cached = self.call, sorted({round(c.cached_tokens) for c in self.calls.values()})
        held = f"{cached[0]:,}" if len(cached) == 1 else f"{cached[0]:,}-{cached[-1]:,}"
        return (f"a call: {round(one.prompt_tokens):,} prompt tokens (the whole history), {held} expected "
                f"cached under {self.routing} routing{'' if len(cached) == 1 else f' ({per_layout})'}, "
                f"{round(one.output_tokens):,} output tokens, {one.calls:.1f} calls per session; context "
                f"{context_tokens:,} tokens")

    def note(self, layout: str) -> str | None:
        """A layout's own cached prefix, where layouts differ (replicas or DP ranks spread a session)."""
        shape = self.calls.get(layout)
        if shape is None or len({round(c.cached_tokens) for c in self.calls.values()}) < 2:
            return None
        return (f"a call: {round(shape.cached_tokens):,} of {round(shape.prompt_tokens):,} prompt tokens "
                f"expected cached, {round(shape.uncached_tokens):,} prefilled")

    def to_dict(self) -> dict[str, Any]:
        one = self.call
        return {"priced_on": "the whole history less the prefix expected cached (each row's call)",
                "routing": self.routing, "calls": one.calls, "prompt_tokens": one.prompt_tokens,
                "output_tokens": one.output_tokens}

    def row_dict(self, layout: str) -> dict[str, Any]:
        shape = self.calls.get(layout)
        return {} if shape is None else {"call": {**shape.to_dict(),
                                                  "prefill_tokens": shape.planned().prefill_tokens}}


@dataclass(frozen=True)
class PlanResult:
    inputs: PlanInputs
    batches: tuple[int, ...]
    context_tokens: int
    prompt_tokens: int  # what a call sends (sessions: the whole history; rows prefill its uncached part)
    itl_bound_ms: float | None
    output_tokens: int | None  # per request: decode estimates charge prompt/output prefill tokens
    enumerated: bool
    rows: tuple[PlanRow, ...]
    sessions: SessionCalls | None = None  # a session workload priced per call (make_plan's `calls`)

    def call_text(self) -> str:
        """What the plan priced, for its first line: a request's context and prompt, or a session's call."""
        if self.sessions is not None:
            return self.sessions.text(self.context_tokens)
        return f"context {self.context_tokens} tokens, prompt {self.prompt_tokens} tokens"

    def call_note(self, layout: str) -> str | None:
        return self.sessions.note(layout) if self.sessions is not None else None

    def to_dict(self) -> dict[str, Any]:
        inp = self.inputs
        sess = self.sessions
        prefill = {self.prompt_tokens} if sess is None else {
            s.planned().prefill_tokens for s in sess.calls.values()}
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
            # sessions: None where the layouts' cached prefixes differ (each row's call.prefill_tokens)
            "prefill_tokens_per_output_token": (min(prefill) / self.output_tokens if self.output_tokens
                                                else 0.0) if len(prefill) == 1 else None,
            **({"call": sess.to_dict()} if sess is not None else {}),
            "gpu_profile": inp.gpu.profile or None,
            "assumptions": {
                **inp.assumptions.to_dict(), "hbm_efficiency": inp.gpu.hbm_efficiency,
                "compute_efficiency": inp.gpu.compute_efficiency,
                "moe_compute_efficiency": inp.gpu.moe_compute_efficiency,
                "step_overhead_s": inp.gpu.step_overhead_s,
                "layer_overhead_s": inp.gpu.layer_overhead_s,
                "request_overhead_s": inp.gpu.request_overhead_s,
                "gpu_memory_utilization": inp.gpu_memory_utilization,
            },
            "engine_settings": inp.settings.to_dict(),
            "rows": [{**r.to_dict(), **(sess.row_dict(str(r.layout)) if sess else {})} for r in self.rows],
        }


def itl_bound_ms(spec: SweepSpec) -> float | None:
    """The tightest per-token bound of the SLO (ITL or TPOT, any percentile): decode must beat it."""
    bounds = [v for (metric, _), v in spec.slo.bounds_ms().items() if metric in ("itl", "tpot")]
    return min(bounds) if bounds else None


def make_plan(spec: SweepSpec, *, layouts: list[Layout] | None = None, all_layouts: bool = False,
              batches: tuple[int, ...] = DEFAULT_BATCHES, context_tokens: int | None = None,
              prompt_tokens: int | None = None, charge_prefill: bool = True,
              settings: EngineSettings | None = None, calls: CallPricer | None = None) -> PlanResult:
    """Plan and rank. Decode throughput charges the workload's prefill (prompt/output tokens per
    output token, as chunked prefill mixes them into decode steps) unless `charge_prefill` is off.
    `settings`: the engine settings to plan with (default: the spec's engine's, resolved). `calls`: a
    session workload's call per layout (loadgen/spec_workload.py `spec_call_pricer`: the whole history
    less its expected cached prefix, as a sweep's plan rows price it); without it, or with --prompt, a
    call is one request of the spec's mean token counts."""
    if any(b < 1 for b in batches):
        raise SpecError("--batch: batch sizes must be positive integers, e.g. --batch 1,64")
    for flag, tokens in (("--context", context_tokens), ("--prompt", prompt_tokens)):
        if tokens is not None and not 1 <= tokens <= MAX_TOKENS:
            raise SpecError(f"{flag} {tokens}: give a number of tokens from 1 to {MAX_TOKENS:,}")
    inputs = plan_inputs(spec, settings)
    if all_layouts:
        # Every sensible layout, plus the spec's own candidates wherever enumeration would skip them.
        chosen = enumerate_layouts(inputs.cfg, inputs.cluster)
        chosen += [lay for lay in spec.layouts if isinstance(lay, Layout) and lay not in chosen]
    else:  # the spec's prefill/decode pairs are plan/disagg_run.py's
        chosen = layouts or [lay for lay in spec.layouts if isinstance(lay, Layout)]
    # a session's call per layout; else (or with --prompt) one request of the spec's (or that) prompt
    request = request_call(spec.workload)
    if prompt_tokens is not None:
        request = replace(request, prompt_tokens=float(prompt_tokens))
    priced = calls is not None and prompt_tokens is None and spec.workload.kind in SESSION_KINDS
    shapes = {str(lay): calls(lay, inputs.settings) if calls is not None and priced else request
              for lay in chosen}
    sent = next(iter(shapes.values()), request).planned()  # what a call sends and holds: any layout's
    bound = itl_bound_ms(spec)
    output = sent.output_tokens if charge_prefill else None
    context = context_tokens or sent.context_tokens
    rows = []
    for lay in chosen:
        try:
            rows.append(plan_layout(inputs, lay, batches=batches, context_tokens=context,
                                    prompt_tokens=shapes[str(lay)].planned().prefill_tokens,
                                    itl_bound_ms=bound, output_tokens=output))
        except SpecError as exc:
            # A spec setting that this one layout cannot honour (e.g. more redundant expert slots
            # than its EP ranks can hold) rejects the layout, not the whole plan.
            rows.append(PlanRow(lay, lay.gpus, (str(exc),), ()))
    sessions = SessionCalls(spec.routing_policies()[0], shapes) if priced and shapes else None
    return PlanResult(inputs, batches, context, sent.prompt_tokens, bound, output, all_layouts,
                      tuple(rank_rows(rows)), sessions)


__all__ = ["DEFAULT_BATCHES", "PlanResult", "SessionCalls", "itl_bound_ms", "make_plan"]
