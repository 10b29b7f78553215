"""Fidelity cases that measured one pool of a prefill/decode deployment alone (bench/fidelity.py,
`pool:` in bench/fidelity_cases.yaml), as published disaggregated benchmarks do: "assuming unlimited
resources for the non-tested phase" (LMSYS, 2025-05-05).

- prefill: every prompt queued at once on the prefill pool's engines, each request ending with the
  token its prompt's last step samples (its KV handed to a decode side that is never the bottleneck);
  predicted input tokens/s = prompt tokens / the time the last prompt finished;
- decode: the decode pool's engines with every request's KV already there (SGLang's decode benchmarks
  run the `fake` transfer backend: no prefill, no transfer), the case's requests spread over them;
  predicted output tokens/s = what they emit per second at that batch and context.
"""

from __future__ import annotations

from dataclasses import replace

from orchestrator.disagg import parse_disagg
from orchestrator.plan.candidates import disagg_candidate
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.sim.engine import Seq
from orchestrator.sim.loops import simulate
from orchestrator.sim.pd_engines import DecodeCore
from orchestrator.sim.pd_run import pd_engines
from orchestrator.sim.virtual import SimRequest
from orchestrator.spec.models import SweepSpec

POOLS = ("prefill", "decode")


def run_pool_case(spec: SweepSpec, layout: str, pool: str, requests: int, input_tokens: int,
                  output_tokens: int, sampler_profile: str | None = None) -> dict[str, float]:
    """Predicted metrics of one pool of `layout` (a pair), as the case measured it; `sampler_profile`
    replaces the spec's (the source's engine version: bench/fidelity.py case_inputs)."""
    inputs = plan_inputs(spec)
    if sampler_profile is not None:
        inputs = replace(inputs, sampler_profile=sampler_profile)
    cand = disagg_candidate(spec, parse_disagg(layout), inputs.settings)
    prefill, decode, _ = pd_engines(inputs, cand)
    if pool == "prefill":
        records, _ = simulate(prefill, [SimRequest(str(i), 0.0, input_tokens, 1) for i in range(requests)])
        done = [r.done_s for r in records if r.ok and r.done_s is not None]
        return {"input_tokens_per_s": input_tokens * len(done) / max(done)} if done else {}
    if pool == "decode":
        return {"output_tokens_per_s": decode_tokens_per_s(decode, requests, input_tokens, output_tokens)}
    raise ValueError(f"pool must be one of {POOLS}, got {pool!r}")


def decode_tokens_per_s(decode: list[DecodeCore], requests: int, input_tokens: int,
                        output_tokens: int) -> float:
    """The decode pool's output tokens/s with `requests` sequences spread over its engines, every one's KV
    already there (as the fake backend hands it over): one engine stepped to the end (the pool's engines
    are alike), its tokens/s in the steps that carry no recomputed prompt token, times the engines."""
    eng = decode[0]
    batch = requests // len(decode)
    for i in range(batch):
        eng.reserve(input_tokens)
        eng.arrive(Seq(str(i), input_tokens, output_tokens, 0.0))
    tokens, seconds = 0, 0.0
    while eng.has_work():
        plan = eng.schedule()
        dt = eng.step_time_s(plan)
        if not plan.prefill_chunks:  # the first step only recomputes each prompt's last token
            tokens += plan.decodes
            seconds += dt
        eng.complete(plan)
    return tokens / seconds * len(decode)
