"""Simulator speed: 100k chat requests through simulated TP8 Qwen2.5-72B on 8 H100 in virtual time.

Goal (issue 4): under 10 s on one core. Printed side by side: the simulator's CPU seconds (this
process only, so other load on the machine counts less), wall seconds, engine steps per CPU second,
and the ratio of simulated time to CPU time (how much faster than real time). The peer row is the same
workload at a lighter load (more, smaller steps), which is the simulator's worst case per request.
Vidur, the research peer, needs GPU profiling tables that cannot be produced here, so it is not run.
Run: .venv/bin/python bench/sim_speed.py [N]
"""

from __future__ import annotations

import sys
import time

import numpy as np

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.engines import EngineSettings
from orchestrator.layout import parse_layout
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.plan.checks import Cluster
from orchestrator.plan.planner import PlanInputs
from orchestrator.sim.build import replica_engines
from orchestrator.sim.virtual import SimRequest, simulate


def fixed_settings(max_model_len: int) -> EngineSettings:
    """The engine settings these timings were taken with: a 256-sequence engine with an 8192-token step
    budget and 90 % of the GPU's memory (stated here, not taken from an engine's defaults)."""
    return EngineSettings("sim", "fixed for the benchmark", max_num_seqs=256, max_num_batched_tokens=8192,
                          gpu_memory_utilization=0.9, block_size=16, enable_chunked_prefill=True,
                          enable_prefix_caching=True, max_model_len=max_model_len)

GOAL_S = 10.0


def _requests(n: int, rate: float) -> list[SimRequest]:
    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(1 / rate, n))
    ins = np.clip(rng.normal(1024, 256, n), 64, 4096).astype(int)
    outs = np.clip(rng.normal(256, 64, n), 16, 1024).astype(int)
    return [SimRequest(str(i), float(arrivals[i]), int(ins[i]), int(outs[i])) for i in range(n)]


def _run(n: int, rate: float) -> tuple[float, float, int, float, float]:
    inputs = PlanInputs(
        cfg=load_model("qwen2.5-72b"), gpu=load_gpu("h100-sxm"), cluster=Cluster(1, 8),
        settings=fixed_settings(8192),
    )
    reqs = _requests(n, rate)
    engines = replica_engines(inputs, parse_layout("tp8"))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    records, summary = simulate(engines, reqs)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    m0 = time.process_time()
    compute_metrics(records[:10_000])  # metrics of a 10k sample, to show their cost per request
    metrics_cpu_per_10k = time.process_time() - m0
    return cpu, wall, summary.steps, summary.virtual_s, metrics_cpu_per_10k


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    print(
        f"{'workload':<44} {'CPU s':>8} {'wall s':>8} {'steps':>9} {'steps/CPU s':>12} "
        f"{'sim s / CPU s':>14} {'metrics CPU s/10k':>18}"
    )
    rows = [
        (f"{n} requests at 8/s (near TP8's SLO capacity)", 8.0),
        (f"{n} requests at 4/s (peer: light)", 4.0),
    ]
    results = []
    for label, rate in rows:
        cpu, wall, steps, virtual_s, mcpu = _run(n, rate)
        results.append(cpu)
        print(
            f"{label:<44} {cpu:>8.2f} {wall:>8.2f} {steps:>9} {steps / cpu:>12,.0f} "
            f"{virtual_s / cpu:>14,.0f} {mcpu:>18.2f}"
        )
    print(
        f"goal {GOAL_S:g} s for {n} requests: {'met' if results[0] < GOAL_S else 'MISSED'} "
        f"({results[0] / GOAL_S:.2f} of the budget); "
        f"light/near-capacity CPU ratio {results[1] / results[0]:.2f}x"
    )


if __name__ == "__main__":
    main()
