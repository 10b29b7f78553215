"""How long a virtual-time sweep of engine settings takes: 3 layouts x 6 settings combinations
(max_num_seqs 64/256 x speculative decoding off / n-gram k=2 / k=4) of Llama-3.1-70B on 8 H100s, each
candidate's SLO capacity searched in virtual time. Goal: under two minutes on this machine. Prints the
candidate count, wall and CPU seconds, load points and the winner; asserts nothing.

Run: python bench/settings_sweep_speed.py
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from orchestrator.pipeline.sweep import Sweep
from orchestrator.spec.load import parse_spec
from orchestrator.store.db import Store
from tests.support.observers import QuietObserver

GOAL_S = 120.0
SPEC = """model: {name: llama-3.1-70b}
hardware: {gpu: h100-sxm, nodes: 1}
engine:
  name: sim
  max_num_seqs: [64, 256]
  speculative: {method: ngram, num_speculative_tokens: [0, 2, 4], acceptance_rate: 0.6}
workload: {kind: random, input_tokens: 1000, output_tokens: 250, num_requests: 200, seed: 0}
slo: {tpot_p99_ms: 25}
objective: goodput_per_gpu
layouts: [tp2x4, tp4x2, tp8]
"""


def main() -> None:
    spec = parse_spec(SPEC, "settings-sweep")
    with tempfile.TemporaryDirectory(prefix="orch-settings-") as tmp:
        store = Store(str(Path(tmp) / "r.db"))
        sweep = Sweep(spec, store, QuietObserver())
        print(f"sweep: {sweep.announcement()}")
        wall, cpu = time.perf_counter(), os.times()
        result = sweep.run()
        wall_s = time.perf_counter() - wall
        after = os.times()
        cpu_s = after.user + after.system - cpu.user - cpu.system
        points = sum(len(o.points) for o in result.outcomes)
    print(f"{len(result.outcomes)} candidates, {points} load points: {wall_s:.1f} s wall, {cpu_s:.1f} s CPU "
          f"(goal {GOAL_S:.0f} s: {'met' if wall_s < GOAL_S else 'missed'}, {wall_s / GOAL_S:.2f} of it; "
          f"load average {os.getloadavg()[0]:.1f})")
    print(f"winner: {result.selection.winner}")


if __name__ == "__main__":
    main()
