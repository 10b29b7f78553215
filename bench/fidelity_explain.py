"""Why a fidelity case comes out as it does: per case, predicted vs measured and the terms behind it.

For each case of bench/fidelity_cases.yaml matching --only, with the constants of one column
(`default`: the bundled profile of the case's GPU and engine; `preset`: the GPU preset), prints
- predicted vs measured, per measured metric;
- the KV budget of one GPU of the last stage: memory x gpu_memory_utilization, weights (non-expert +
  routed experts as the engine's MXFP4 backend holds them), the runtime reserve, the start-up
  profile peak (the larger of the forward's activations and the sampler run), the room left for KV, and how
  many of the case's requests (prompt + answer tokens each) that room holds;
- what the simulator's engine ran: mean running and waiting requests, preemptions, mean KV use;
- a decode step at that mean batch and the step that also carries a prefill chunk, split by cause
  (weight read, KV read, compute, communication, overhead) with the part that dominates.
It explains; it fits nothing (bench/fidelity.py prints the table and its summaries).
`--reserve-gib X` is a what-if: the same prediction with the engine's runtime reserve set to X GiB
(`engine.runtime_reserve_bytes`), i.e. a KV room smaller or larger by the difference, to see how
much of an error the KV pool's size carries. It changes nothing in bench/fidelity.py.

Run: PYTHONPATH=. python bench/fidelity_explain.py --only gs-oss120b-h100-tp1 [--column preset]
     [--reserve-gib 6.0]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from orchestrator.catalog.profiles import NO_PROFILE
from orchestrator.layout import parse_layout
from orchestrator.loadgen.content import Content, text_key
from orchestrator.plan.capacity import kv_capacity
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.plan.inputs import layout_cost
from orchestrator.plan.memory import MXFP4_LAYOUTS, mxfp4_expert_factor, mxfp4_padded_dims
from orchestrator.plan.stage_cost import StepParts
from orchestrator.sim.loops import simulate
from orchestrator.sim.run import spec_engines
from orchestrator.sim.virtual import SimRequest

sys.path.insert(0, str(Path(__file__).parent))  # bench/ is scripts, not a package
from fidelity import Case, case_spec, default_calibration, load_cases, rel_error, run_case

GIB = 1024.0 ** 3
PARTS = ("weight_read_s", "kv_read_s", "compute_s", "tp_comm_s", "ep_comm_s", "pp_comm_s", "overhead_s")


def _parts(p: StepParts) -> str:
    named = {k.removesuffix("_s"): getattr(p, k) * 1e3 for k in PARTS if getattr(p, k)}
    top = max(named, key=lambda k: named[k]) if named else "-"
    body = ", ".join(f"{k} {v:.1f}" for k, v in named.items())
    return f"{p.total_s * 1e3:.1f} ms ({body}; {p.bound}-bound, {top} dominates)"


def mxfp4_line(backend: str, hidden: int, shard: int, stored_bytes: float) -> str:
    """The routed experts' bytes per GPU as the checkpoint stores them and as the engine's MXFP4
    backend holds them (plan/memory.py MXFP4_LAYOUTS: padding and kept scale copies), the latter
    being what the KV budget below subtracts."""
    copies = MXFP4_LAYOUTS[backend][2]
    factor = mxfp4_expert_factor(backend, hidden, shard)
    padded_shard, padded_hidden = mxfp4_padded_dims(backend, hidden, shard)
    return (f"MXFP4 experts per GPU: {stored_bytes / GIB:.2f} GiB as stored, "
            f"{stored_bytes * factor / GIB:.2f} GiB in vLLM's {backend} layout (hidden {hidden} -> "
            f"{padded_hidden}, shard {shard} -> {padded_shard}, scales x{copies})")


def explain(case: Case, source: dict[str, Any], calibration: str) -> list[str]:
    out = [f"{case.id}  ({case.source}, {case.model} {case.precision} {case.layout} on {case.gpu}, "
           f"{case.mode}, {case.requests} x {case.input_tokens}/{case.output_tokens}, "
           f"constants: {calibration})"]
    got = run_case(case, source, calibration)
    for metric, measured in case.measured.items():
        if metric in got:
            out.append(f"  {metric:20} measured {measured:10.1f}  predicted {got[metric]:10.1f}  "
                       f"{rel_error(got[metric], measured) * 100:+.0f}%")
    if case.pool is not None:
        return out
    spec = case_spec(case, source, calibration)
    inputs = plan_inputs(spec)
    if source.get("sampler_profile") is not None:
        inputs = replace(inputs, sampler_profile=source["sampler_profile"])
    layout = parse_layout(case.layout)
    cost = layout_cost(inputs, layout)
    cap = kv_capacity(inputs, cost)
    last = cost.stages[-1]
    per_request = case.input_tokens + case.output_tokens
    if case.precision == "mxfp4" and inputs.cfg.moe_intermediate_size:
        shard = inputs.cfg.moe_intermediate_size // (1 if layout.ep else layout.tp)
        out.append("  " + mxfp4_line(inputs.mxfp4_backend, inputs.cfg.hidden_size, shard,
                                     last.expert_weight_bytes))
    out.append(f"  KV budget per GPU (GiB): {inputs.gpu.memory_bytes / GIB:.2f}"
               f" x {inputs.gpu_memory_utilization}"
               f" - weights ({last.dense_weight_bytes / GIB:.2f}"
               f" + experts {last.expert_weight_bytes * cap.expert_factor / GIB:.2f})"
               f" - reserve {inputs.assumptions.runtime_reserve_bytes / GIB:.2f}"
               f" - start-up peak {cap.startup_peak_bytes / GIB:.2f} (larger of forward"
               f" {cap.forward_bytes / GIB:.2f}, sampler {cap.sampler_bytes / GIB:.2f})"
               f" = room {cap.rooms[-1] / GIB:.2f};"
               f" {cap.tokens:,} KV tokens = {cap.tokens / per_request:.1f} requests of {per_request} tokens")
    engines = spec_engines(spec, inputs, layout)
    n = case.requests
    contents = [Content(None, text_key(f"{case.id}/{i}"), case.input_tokens) for i in range(n)]
    if case.mode == "offline":
        reqs = [SimRequest(str(i), 0.0, case.input_tokens, case.output_tokens, contents[i]) for i in range(n)]
        _, summary = simulate(engines, reqs, sample_interval_s=0.5)
        samples = [s for s in summary.engine_samples if s.running is not None]
        if samples:
            running = statistics.mean(s.running or 0.0 for s in samples)
            waiting = statistics.mean(s.waiting or 0.0 for s in samples)
            kv_use = statistics.mean(s.kv_usage or 0.0 for s in samples)
            out.append(f"  engine: mean running {running:.1f}, waiting {waiting:.1f}, KV use {kv_use:.0%},"
                       f" preemptions {summary.preemptions}, {summary.steps} steps,"
                       f" {summary.virtual_s:.1f} s")
            batch = max(1, round(running))
            context = case.input_tokens + case.output_tokens // 2
            decode = cost.step(batch, batch * context, batch * context)
            out.append(f"  decode step, {batch} x {context} context: {_parts(decode)}")
            budget = inputs.max_num_batched_tokens
            chunk = float(min(case.input_tokens, max(budget - batch, 1)))
            pairs = chunk * (case.input_tokens + 1) / 2
            mixed = cost.step(batch + chunk, batch * context + case.input_tokens / 2, batch * context + pairs,
                              prefill_pairs=pairs, sequences=batch + 1)
            out.append(f"  decode step + {chunk:.0f}-token prefill chunk: {_parts(mixed)}")
    else:
        out.append("  (engine gauges and step parts printed for offline bursts only)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--only", required=True, help="explain cases whose id contains this")
    ap.add_argument("--column", choices=("default", "preset"), default="default",
                    help="whose constants: the bundled profile (default) or the GPU preset")
    ap.add_argument("--reserve-gib", type=float, metavar="X",
                    help="what-if: the engine's runtime reserve set to X GiB (engine.runtime_reserve_bytes)")
    args = ap.parse_args(argv)
    sources, cases = load_cases()
    chosen = [c for c in cases if args.only in c.id]
    if not chosen:
        print(f"error: no case id contains {args.only!r}", file=sys.stderr)
        return 2
    for case in chosen:
        source = sources[case.source]
        if args.reserve_gib is not None:
            source = copy.deepcopy(source)
            source.setdefault("engine_settings", {})["runtime_reserve_bytes"] = args.reserve_gib * GIB
        calibration = default_calibration(case, source) if args.column == "default" else NO_PROFILE
        print("\n".join(explain(case, source, calibration)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
