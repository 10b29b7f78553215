"""Served against virtual time: the same requests through orch's simulated server over HTTP and through
the simulator in virtual time, medians and ratios per round (TTFT, TPOT, E2E).

The served path runs in wall time, so its figures move with the machine's load; this is why the
comparison lives here and not in the tests (tests/integration/sim/test_server.py checks that both
paths give the same answers). TTFT also carries the HTTP round trip and the harness's own per-request
cost, measured here with tiny requests alone on the engine and printed beside the ratios.

    PYTHONPATH=. python bench/sim_served_agreement.py [--rounds 3] [--scale 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

import numpy as np

from orchestrator.loadgen.client import ClientConfig, RequestSpec, run_open_loop
from orchestrator.loadgen.records import RequestRecord
from orchestrator.pipeline.harness import read_counters
from orchestrator.pipeline.timescale import unscale
from orchestrator.sim.virtual import SimRequest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the repo, for tests.support
from tests.support.sim_serving import MODEL, poisson_workload, sim_server, simulate_virtual, wait_healthy


def _median(values: list[float | None]) -> float:
    xs = sorted(v for v in values if v is not None)
    return xs[len(xs) // 2]


def one_round(scale: float, n: int, seed: int) -> dict[str, float]:
    offsets, prompts, outputs = poisson_workload(seed, n)
    virtual = simulate_virtual([SimRequest(str(i), offsets[i], prompts[i], outputs[i]) for i in range(n)])
    # Prefix caching off on the server: its prompts are the same word repeated, so with caching (the
    # server's default, as vLLM v1) later prompts hit earlier ones' blocks, which the virtual side's
    # token counts without content never do; TTFT came out at half the virtual figure.
    with sim_server(scale, "--no-enable-prefix-caching") as base:
        wait_healthy(base)
        cfg = ClientConfig(base, MODEL)
        asyncio.run(run_open_loop(cfg, [RequestSpec(f"w{i}", "word " * 50, 4) for i in range(3)], [0.0] * 3))
        # The harness's fixed per-request cost: tiny requests alone on the engine at the same spacing.
        gap_s = float(np.mean(np.diff(offsets)))
        probe_v = simulate_virtual([SimRequest(f"p{i}", i * gap_s, 8, 2) for i in range(6)])
        probe = [RequestSpec(f"p{i}", "word " * 8, max_tokens=2) for i in range(6)]
        probe_at = [i * gap_s * scale for i in range(6)]
        probe_s = unscale(asyncio.run(run_open_loop(cfg, probe, probe_at)), scale)
        before = read_counters([base + "/v1"])
        specs = [RequestSpec(str(i), "word " * prompts[i], max_tokens=outputs[i]) for i in range(n)]
        served: list[RequestRecord] = unscale(
            asyncio.run(run_open_loop(cfg, specs, [t * scale for t in offsets])), scale
        )
        counters = read_counters([base + "/v1"]) - before
    out = {
        "harness_ms": 1e3
        * max(0.0, _median([r.ttft_s for r in probe_s]) - _median([r.ttft_s for r in probe_v])),
        "late_ms": 1e3 * (counters.behind_wall_s / max(counters.steps, 1) / scale
                          + _median([r.scheduling_lag_s for r in served])),
    }
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        v, s = _median([getattr(r, name) for r in virtual]), _median([getattr(r, name) for r in served])
        out[f"{name}_virtual_ms"], out[f"{name}_served_ms"], out[f"{name}_ratio"] = v * 1e3, s * 1e3, s / v
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--scale", type=float, default=2.0, help="wall seconds per simulated second")
    p.add_argument("--requests", type=int, default=24)
    args = p.parse_args()
    load = os.getloadavg()[0]
    print(f"served vs virtual time, {args.requests} requests, time scale {args.scale:g}, "
          f"load average {load:.1f}")
    print(f"{'round':>5} {'TTFT v/s ms':>16} {'ratio':>6} {'TPOT v/s ms':>14} {'ratio':>6} "
          f"{'E2E v/s ms':>18} {'ratio':>6} {'harness ms':>10} {'late ms':>8}")
    for k in range(args.rounds):
        r = one_round(args.scale, args.requests, seed=7 + k)
        print(f"{k + 1:>5} {r['ttft_s_virtual_ms']:7.1f}/{r['ttft_s_served_ms']:<8.1f} "
              f"{r['ttft_s_ratio']:6.3f} "
              f"{r['tpot_s_virtual_ms']:6.2f}/{r['tpot_s_served_ms']:<7.2f} {r['tpot_s_ratio']:6.3f} "
              f"{r['e2e_s_virtual_ms']:8.1f}/{r['e2e_s_served_ms']:<9.1f} {r['e2e_s_ratio']:6.3f} "
              f"{r['harness_ms']:10.2f} {r['late_ms']:8.2f}")


if __name__ == "__main__":
    main()
