"""Where speculative decoding stops paying: TPOT and output tokens/s per GPU with and without it, across
concurrency, from the planner (decode steps alone) and the simulator (closed loop in virtual time, the
prompts' prefill included), side by side, and the crossover concurrency each one finds.

Run: python bench/speculative_crossover.py [--model llama-3.1-70b --gpu h100-sxm --layout tp4
     --method ngram --k 4 --acceptance 0.6 --input-tokens 250 --output-tokens 250]
Prints; asserts nothing. The acceptance is an assumption here (give one measured on your traffic).
"""

from __future__ import annotations

import argparse
import time

from orchestrator.layout import parse_layout
from orchestrator.plan.capacity import kv_capacity_tokens
from orchestrator.plan.decode import decode_estimate
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.plan.inputs import layout_cost, speculative_step_cost
from orchestrator.sim.run import simulate_point
from orchestrator.spec.load import parse_spec

LEVELS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def _spec_text(a: argparse.Namespace, speculative: bool) -> str:
    block = ""
    if speculative:
        draft = f", draft_model: {{name: {a.draft}}}" if a.draft else ""
        block = (f"\n  speculative: {{method: {a.method}, num_speculative_tokens: {a.k}, "
                 f"acceptance_rate: {a.acceptance}{draft}}}")
    return f"""model: {{name: {a.model}}}
hardware: {{gpu: {a.gpu}}}
engine:
  max_num_seqs: 256{block}
workload: {{kind: random, input_tokens: {a.input_tokens}, output_tokens: {a.output_tokens},
            rates_per_s: [1], num_requests: 100, seed: 0}}
layouts: [{a.layout}]
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama-3.1-70b")
    ap.add_argument("--gpu", default="h100-sxm")
    ap.add_argument("--layout", default="tp4")
    ap.add_argument("--method", default="ngram")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--acceptance", type=float, default=0.6)
    ap.add_argument("--draft", default=None, help="draft model preset (method draft_model or eagle3)")
    ap.add_argument("--input-tokens", type=int, default=250)
    ap.add_argument("--output-tokens", type=int, default=250)
    a = ap.parse_args()
    layout = parse_layout(a.layout)
    off_spec, on_spec = parse_spec(_spec_text(a, False)), parse_spec(_spec_text(a, True))
    off_in, on_in = plan_inputs(off_spec), plan_inputs(on_spec)
    assert on_in.speculative is not None
    cost = layout_cost(off_in, layout)
    spec_cost = speculative_step_cost(on_in, cost)
    context = a.input_tokens + a.output_tokens // 2
    kv = kv_capacity_tokens(off_in, cost)[0]
    print(f"{a.model} on {a.gpu} {a.layout}, {on_in.speculative.label} acceptance {a.acceptance} "
          f"({on_in.speculative.tokens_per_step:.2f} tokens per step), prompts {a.input_tokens}, "
          f"outputs {a.output_tokens}")
    head = (f"{'conc':>4} | {'planner TPOT off/on ms':>22} {'gain':>5} | {'sim TPOT p50 off/on ms':>22} "
            f"{'gain':>5} | {'sim tok/s/GPU off/on':>20}")
    print(head)
    print("-" * len(head))
    t0 = time.perf_counter()
    crossing: dict[str, int | None] = {"planner": None, "simulator": None}
    for c in LEVELS:
        budget = off_in.max_num_batched_tokens
        p_off = decode_estimate(cost, layout, c, context, kv, prompt_tokens=a.input_tokens,
                                output_tokens=a.output_tokens, step_budget_tokens=budget)
        p_on = decode_estimate(cost, layout, c, context, kv, prompt_tokens=a.input_tokens,
                               output_tokens=a.output_tokens, step_budget_tokens=budget, spec=spec_cost)
        n = max(4 * c, 32)
        s_off = simulate_point(off_spec, off_in, layout, concurrency=c, num_requests=n).result.metrics
        s_on = simulate_point(on_spec, on_in, layout, concurrency=c, num_requests=n).result.metrics
        assert s_off.tpot_ms.p50 and s_on.tpot_ms.p50 and s_off.per_gpu and s_on.per_gpu
        pg, sg = p_off.tpot_ms / p_on.tpot_ms, s_off.tpot_ms.p50 / s_on.tpot_ms.p50
        for who, gain in (("planner", pg), ("simulator", sg)):
            if gain < 1 and crossing[who] is None:
                crossing[who] = c
        print(f"{c:>4} | {p_off.tpot_ms:10.2f} /{p_on.tpot_ms:9.2f} {pg:5.2f} | "
              f"{s_off.tpot_ms.p50:10.2f} /{s_on.tpot_ms.p50:9.2f} {sg:5.2f} | "
              f"{s_off.per_gpu['output_throughput']:9.0f} /{s_on.per_gpu['output_throughput']:8.0f}")
    for who, where in crossing.items():
        print(f"{who}: speculation " + (f"stops paying at concurrency {where}" if where else
                                         f"pays at every concurrency up to {LEVELS[-1]}"))
    print(f"({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
