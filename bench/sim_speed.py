"""Simulator speed: 100k chat requests through simulated TP8 Qwen2.5-72B on 8 H100 in virtual time.

Goal (issue 4): under 10 s on one core. Printed side by side: the simulator's CPU seconds (this
process only, so other load on the machine counts less), wall seconds, engine steps per CPU second,
and the ratio of simulated time to CPU time (how much faster than real time). The peer row is the same
workload at a lighter load (more, smaller steps), which is the simulator's worst case per request.
Vidur, the research peer, needs GPU profiling tables that cannot be produced here, so it is not run.
Run: .venv/bin/python bench/sim_speed.py [N] [--against DIR]
(--against DIR: every row also with another checkout's orchestrator package, CPU seconds side by side;
the third row, prefix caching off, shows what the cache's bookkeeping costs when nothing can hit.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.engines import EngineSettings
from orchestrator.layout import parse_layout
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.plan.checks import Cluster
from orchestrator.plan.inputs import PlanInputs
from orchestrator.sim.build import replica_engines
from orchestrator.sim.loops import simulate
from orchestrator.sim.virtual import SimRequest


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


def _run(n: int, rate: float, caching: bool = True) -> tuple[float, float, int, float, float]:
    settings = replace(fixed_settings(8192), enable_prefix_caching=caching)
    inputs = PlanInputs(
        cfg=load_model("qwen2.5-72b"), gpu=load_gpu("h100-sxm"), cluster=Cluster(1, 8), settings=settings,
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


Row = tuple[float, float, int, float, float]  # CPU s, wall s, steps, virtual s, metrics CPU s per 10k


def _in_process(tree: str | None, n: int, rate: float, caching: bool) -> Row:
    """_run in a fresh process, with another checkout's orchestrator package first on the path when
    `tree` is given (--against), so that neither run inherits the other's heap."""
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [tree, env.get("PYTHONPATH")]))
    argv = [sys.executable, __file__, str(n), "--one", f"{rate}", "--caching", str(int(caching))]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env)
    cpu, wall, steps, virtual_s, mcpu = json.loads(out.stdout.strip().splitlines()[-1])
    return cpu, wall, int(steps), virtual_s, mcpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("n", nargs="?", type=int, default=100_000)
    ap.add_argument("--against", metavar="DIR",
                    help="another checkout of orch (e.g. git worktree add /tmp/base main): every row also "
                         "runs with its orchestrator package, one process per run, interleaved")
    ap.add_argument("--one", type=float, help=argparse.SUPPRESS)  # one row, as JSON (--against's runs)
    ap.add_argument("--caching", type=int, default=1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    n = a.n
    if a.one is not None:
        print(json.dumps(_run(n, a.one, bool(a.caching))))
        return
    if a.against and not Path(a.against, "orchestrator", "__init__.py").is_file():
        sys.exit(f"--against {a.against}: no orchestrator package there")
    load0 = os.getloadavg()[0]
    against = f" {'CPU s against':>13} {'ratio':>6}" if a.against else ""
    print(
        f"{'workload':<44} {'CPU s':>8} {'wall s':>8} {'steps':>9} {'steps/CPU s':>12} "
        f"{'sim s / CPU s':>14} {'metrics CPU s/10k':>18}{against}"
    )
    rows = [
        (f"{n} requests at 8/s (near TP8's SLO capacity)", 8.0, True),
        (f"{n} requests at 4/s (peer: light)", 4.0, True),
        (f"{n} requests at 8/s, prefix caching off", 8.0, False),
    ]
    results = []
    for label, rate, caching in rows:
        if a.against:
            cpu, wall, steps, virtual_s, mcpu = _in_process(None, n, rate, caching)
            other = _in_process(str(Path(a.against).resolve()), n, rate, caching)[0]
        else:
            cpu, wall, steps, virtual_s, mcpu = _run(n, rate, caching)
        results.append(cpu)
        side = f" {other:>13.2f} {cpu / other:>6.2f}" if a.against else ""
        print(
            f"{label:<44} {cpu:>8.2f} {wall:>8.2f} {steps:>9} {steps / cpu:>12,.0f} "
            f"{virtual_s / cpu:>14,.0f} {mcpu:>18.2f}{side}"
        )
    print(
        f"goal {GOAL_S:g} s for {n} requests: {'met' if results[0] < GOAL_S else 'MISSED'} "
        f"({results[0] / GOAL_S:.2f} of the budget); "
        f"light/near-capacity CPU ratio {results[1] / results[0]:.2f}x; "
        f"prefix caching on/off (no prompt shares a block) {results[0] / results[2]:.2f}x"
    )
    if a.against:
        print(f"against: {a.against} (ratio = this tree's CPU s / that one's; each run its own process)")
    print(f"load average {load0:.2f} before, {os.getloadavg()[0]:.2f} after ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
