"""The simulator's speed with prefix caching against without, on the same workloads.

    python bench/prefix_cache_speed.py [--sessions 2000] [--requests 50000]

Goal (issue 27): with caching the simulator stays within 1.5x of its speed without. Three workloads,
each simulated twice in this process (prefix caching on, then off), CPU seconds side by side:
- conversations (layouts/chat-multiturn.yaml's shape: a 2k-token first turn, 3-8 turns) on tp2x4
  Llama-3.1-70B FP8, prefix-aware routing: every turn hashes and looks up its whole history;
- random single-turn prompts (nothing shared: their blocks are only counted, never hashed) on TP8
  Qwen2.5-72B, the bench/sim_speed.py workload;
- agentic sessions (layouts/agentic.yaml's shape) on tp1x4 Qwen2.5-7B.
Caching changes the work itself: hits take prefill out of the steps, so a session workload, whose pace
is set by think time, runs more and shorter steps in the same virtual time. So the ratio is printed
twice: CPU seconds, and CPU seconds per engine step. Asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.engines import SettingsRequest, resolve_settings
from orchestrator.layout import Layout, parse_layout
from orchestrator.loadgen.client import arrival_offsets
from orchestrator.loadgen.sessions import agentic_sessions, conversation_sessions
from orchestrator.plan.checks import Cluster
from orchestrator.plan.dtypes import weight_bytes_per_value
from orchestrator.plan.inputs import PlanInputs
from orchestrator.sim.build import replica_engines
from orchestrator.sim.engine import EngineCore
from orchestrator.sim.loops import simulate
from orchestrator.sim.sessions import simulate_sessions
from orchestrator.sim.virtual import SimRequest
from orchestrator.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[1]


def _engines(inputs: PlanInputs, layout: Layout, caching: bool) -> list[EngineCore]:
    replica = Layout(tp=layout.tp, pp=layout.pp, dp=layout.dp, ep=layout.ep)
    inputs = inputs.with_settings(replace(inputs.settings, enable_prefix_caching=caching))
    out: list[EngineCore] = []
    for _ in range(layout.replicas):
        out += replica_engines(inputs, replica)
    return out


def _sim(model: str, gpus: int, max_model_len: int, **kw: object) -> PlanInputs:
    """The simulated engine's own settings for the model on H100s (prefix caching on, its default)."""
    cfg, gpu = load_model(model), load_gpu("h100-sxm")
    settings = resolve_settings("sim", gpu, cfg, SettingsRequest(max_model_len=max_model_len))
    return PlanInputs(cfg=cfg, gpu=gpu, cluster=Cluster(1, gpus), settings=settings, **kw)  # type: ignore[arg-type]


def _timed(fn: object) -> tuple[float, int, float | None]:
    cpu0 = time.process_time()
    steps, rate = fn()  # type: ignore[operator]
    return time.process_time() - cpu0, steps, rate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, default=2000)
    p.add_argument("--requests", type=int, default=50_000)
    args = p.parse_args()

    chat = load_spec(ROOT / "layouts" / "chat-multiturn.yaml").workload
    agent = load_spec(ROOT / "layouts" / "agentic.yaml").workload
    llama = _sim("llama-3.1-70b", 8, 16384, weight_dtype="fp8",
                 weight_bytes_per_value=weight_bytes_per_value("fp8", 128))
    qwen72 = _sim("qwen2.5-72b", 8, 8192)
    qwen7 = _sim("qwen2.5-7b", 4, 32768)

    conv = conversation_sessions(args.sessions, chat.conversation_or_default(), chat.input_tokens,
                                 chat.output_tokens, seed=0, max_model_len=16384)
    conv_starts = arrival_offsets(len(conv.plans), 2.0, seed=0)
    ag = agentic_sessions(args.sessions, agent.agentic_or_default(), agent.input_tokens, agent.output_tokens,
                          seed=0, max_model_len=32768)
    ag_starts = arrival_offsets(len(ag.plans), 3.0, seed=0)
    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(1 / 8.0, args.requests))
    ins = np.clip(rng.normal(1024, 256, args.requests), 64, 4096).astype(int)
    outs = np.clip(rng.normal(256, 64, args.requests), 16, 1024).astype(int)
    single = [SimRequest(str(i), float(arrivals[i]), int(ins[i]), int(outs[i])) for i in range(args.requests)]

    def conversations(caching: bool) -> tuple[int, float | None]:
        layout = parse_layout("tp2x4")
        run = simulate_sessions(_engines(llama, layout, caching), conv.plans, starts=conv_starts,
                                balance="prefix_aware", dp=layout.dp)
        cache = run.summary.prefix_cache
        return run.summary.steps, None if cache is None else cache.hit_rate

    def random_prompts(caching: bool) -> tuple[int, float | None]:
        _, summary = simulate(_engines(qwen72, parse_layout("tp8"), caching), single)
        cache = summary.prefix_cache
        return summary.steps, None if cache is None else cache.hit_rate

    def agentic(caching: bool) -> tuple[int, float | None]:
        layout = parse_layout("tp1x4")
        run = simulate_sessions(_engines(qwen7, layout, caching), ag.plans, starts=ag_starts,
                                balance="prefix_aware", dp=layout.dp)
        cache = run.summary.prefix_cache
        return run.summary.steps, None if cache is None else cache.hit_rate

    print(f"{'workload':<48} {'cache':>6} {'CPU s':>8} {'steps':>9} {'hit rate':>9} {'on/off CPU':>11} "
          f"{'per step':>9}")
    for name, fn in ((f"{args.sessions} conversations, tp2x4 70B, prefix_aware", conversations),
                     (f"{args.requests} random prompts, tp8 72B", random_prompts),
                     (f"{args.sessions} agentic sessions, tp1x4 7B, prefix_aware", agentic)):
        on = _timed(lambda fn=fn: fn(True))
        off = _timed(lambda fn=fn: fn(False))
        for label, (cpu, steps, rate) in (("on", on), ("off", off)):
            hit = "-" if rate is None else f"{rate:.1%}"
            ratio = f"{on[0] / off[0]:.2f}x" if label == "on" else ""
            per_step = f"{(on[0] / on[1]) / (off[0] / off[1]):.2f}x" if label == "on" else ""
            shown = name if label == "on" else ""
            print(f"{shown:<48} {label:>6} {cpu:>8.2f} {steps:>9} {hit:>9} {ratio:>11} {per_step:>9}")


if __name__ == "__main__":
    main()
