"""Call shapes of a session sweep: computed once per sweep, against once per ask.

A session workload's plan rows and planner seeds are priced on its mean call (the whole history less
the prefix expected cached: loadgen/spec_workload.py `call_shape`, 400 sessions drawn and priced). A
sweep asks for it for each candidate's plan row and planner seed (a served sweep also for its prune
prediction), in every routing pass. For each session spec, a virtual-time sweep as `orch sweep SPEC
--engine sim` runs it (the spec's capacity search, --num-requests per load point), each in a fresh
process: its CPU seconds, how often it asked for a call shape, how many sessions draws and pricings it
computed, and the CPU seconds inside them. --against DIR runs the same sweeps with another checkout's
orchestrator package (PYTHONPATH; e.g. main before the memo), interleaved with this tree's, side by
side. Best of --repeats (the machine is shared). Asserts nothing.
Run: .venv/bin/python bench/session_call_shapes.py [--against DIR] [--repeats 3] [--num-requests 50]
     [SPEC ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPECS = ("layouts/chat-multiturn.yaml", "layouts/agentic.yaml")


class _Quiet:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def _child(spec_path: str, num_requests: int) -> None:
    """One sweep in this process, with counters around the call-shape functions this checkout has."""
    import orchestrator.loadgen.spec_workload as sw
    from orchestrator.pipeline import points
    from orchestrator.pipeline.sweep import Sweep, SweepOptions
    from orchestrator.spec.load import load_spec
    from orchestrator.store.db import Store

    counts = {"asked": 0, "computed": 0, "cpu_s": 0.0}

    def wrap(module: Any, name: str, key: str) -> None:
        real = getattr(module, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.process_time()
            try:
                return real(*args, **kwargs)
            finally:
                counts[key] += 1
                if key == "computed":
                    counts["cpu_s"] += time.process_time() - t0

        setattr(module, name, timed)

    wrap(points, "call_tokens", "asked")
    if hasattr(sw, "draw_sessions"):  # computed once per sweep: a draw, then a pricing per engine spread
        wrap(sw, "draw_sessions", "computed")
        wrap(sw, "price_sessions", "computed")
    else:  # before: call_shape drew and priced on every ask
        wrap(points, "call_shape", "computed")
    with tempfile.TemporaryDirectory() as tmp:
        sweep = Sweep(load_spec(spec_path), Store(Path(tmp) / "r.db"), _Quiet(),  # type: ignore[arg-type]
                      options=SweepOptions(num_requests=num_requests))
        t0 = time.process_time()
        result = sweep.run()
        cpu = time.process_time() - t0
    print(json.dumps({**counts, "sweep_cpu_s": cpu, "winner": result.selection.winner}))


def _run(tree: Path, spec: str, num_requests: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", spec, str(num_requests)],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("specs", nargs="*", default=list(SPECS))
    ap.add_argument("--against", type=Path, help="another checkout (its orchestrator package) to compare")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--num-requests", type=int, default=50)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child[0], int(args.child[1]))
        return
    trees = [("this tree", ROOT)] + ([("against", args.against.resolve())] if args.against else [])
    print(f"{'spec':<22} {'tree':<10} {'sweep CPU s':>11} {'asked':>6} {'computed':>9} {'shape CPU s':>11}"
          f"  winner")
    for spec in args.specs:
        best: dict[str, dict[str, Any]] = {}
        for _ in range(args.repeats):
            for name, tree in trees:  # interleaved: load on the shared machine falls on both
                got = _run(tree, spec, args.num_requests)
                if name not in best or got["sweep_cpu_s"] < best[name]["sweep_cpu_s"]:
                    best[name] = got
        for name, _ in trees:
            b = best[name]
            print(f"{Path(spec).name:<22} {name:<10} {b['sweep_cpu_s']:>11.2f} {b['asked']:>6} "
                  f"{b['computed']:>9} {b['cpu_s']:>11.2f}  {b['winner']}", flush=True)
        if args.against:
            mine, other = best["this tree"], best["against"]
            print(f"{'':<22} {'ratio':<10} {mine['sweep_cpu_s'] / other['sweep_cpu_s']:>11.2f} {'':>6} "
                  f"{'':>9} {mine['cpu_s'] / max(other['cpu_s'], 1e-9):>11.2f}  (this tree / against; "
                  f"shape CPU saved {other['cpu_s'] - mine['cpu_s']:.2f} s)", flush=True)


if __name__ == "__main__":
    main()
