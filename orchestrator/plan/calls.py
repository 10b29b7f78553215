"""What one call of the workload costs the engines, in the planner's terms: the typed value `orch plan`
and a sweep's plan rows and planner seeds are priced on. A request workload's call is its prompt; a
session's call is its whole history less the prefix the engine is expected to hold in its prefix cache
(drawn from the sessions themselves: loadgen/spec_workload.py `call_shape`, which plan/ cannot import,
so the caller passes it in as a `CallPricer`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from orchestrator.engines import EngineSettings
from orchestrator.layout import Layout
from orchestrator.spec.workload import TokenDistribution, WorkloadSpec

#: workload kinds whose calls are sessions: each call's prompt is the whole history so far
SESSION_KINDS = ("conversation", "agentic")


@dataclass(frozen=True)
class CallShape:
    """What one load unit (a request, or a session when the rate counts sessions) costs the engines,
    as the planner prices it: calls sent, and per call (means) the whole prompt the engine is sent,
    the part of it expected in the prefix cache, and the answer."""

    calls: float
    prompt_tokens: float  # a session's call: the whole history so far plus its own new text
    cached_tokens: float  # expected prefix-cache hit (whole blocks, never the last prompt token)
    output_tokens: float

    @property
    def uncached_tokens(self) -> float:
        """What the engine prefills: the prompt minus its cached prefix."""
        return self.prompt_tokens - self.cached_tokens

    def planned(self) -> PlannedCall:
        """The call in the planner's whole tokens (plan_layout's arguments)."""
        prompt, output = round(self.prompt_tokens), round(self.output_tokens)
        # Decode reads, on average, the whole prompt and half the answer of every sequence in the batch;
        # prefill computes only what the cache does not hold.
        return PlannedCall(prompt_tokens=prompt, prefill_tokens=round(self.uncached_tokens),
                           context_tokens=prompt + output // 2, output_tokens=output)

    def to_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
                "uncached_tokens": self.uncached_tokens, "output_tokens": self.output_tokens}


@dataclass(frozen=True)
class PlannedCall:
    """A call as plan_layout takes it: tokens sent and prefilled, context held while decoding, answer."""

    prompt_tokens: int
    prefill_tokens: int
    context_tokens: int
    output_tokens: int


class CallPricer(Protocol):
    """The workload's mean call on one layout's engines with these settings (where routing sends a
    session's calls decides how much of its history the engine holds)."""

    def __call__(self, layout: Layout, settings: EngineSettings) -> CallShape: ...


def _mean(value: int | TokenDistribution) -> float:
    return float(value.mean) if isinstance(value, TokenDistribution) else float(value)


def request_call(w: WorkloadSpec) -> CallShape:
    """A request workload's call: one prompt of `input_tokens`, nothing credited to the cache (a
    prefix workload's shared prefix is not: its seeds and plans stay as they were)."""
    return CallShape(1.0, _mean(w.input_tokens), 0.0, _mean(w.output_tokens))


__all__ = ["SESSION_KINDS", "CallPricer", "CallShape", "PlannedCall", "request_call"]
