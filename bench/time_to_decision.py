"""Time to decision: the capacity search (orch sweep's default) against an exhaustive grid.

For each example spec, on the simulated engine in virtual time: (1) the sweep as shipped (capacity
search per layout, bracketing and bisection to workload.search.tolerance_frac); (2) the exhaustive
grid that answers to the same tolerance without a search: every layout at a geometric grid in steps
of (1 + tolerance) from the lowest to the highest rate the search measured on any layout. Printed:
CPU seconds of each (this process only, so other load on the machine counts less), load points,
the ratio, and whether both picked the same winner. Goal (issue 15): the search at most a third of
the grid's time, same winner.
Run: .venv/bin/python bench/time_to_decision.py [layouts/qwen72b.yaml ...]
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from orchestrator.pipeline.sweep import Sweep, SweepOptions
from orchestrator.spec.load import load_spec
from orchestrator.store.db import Store

SPECS = ("layouts/qwen72b.yaml", "layouts/llama70b-h200.yaml", "layouts/mixtral.yaml")


class Quiet:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def _sweep(
    spec_path: str, rates: tuple[float, ...] | None, db: Path
) -> tuple[float, int, tuple[str | None, tuple[str, ...], str], Store]:
    store = Store(db)
    sweep = Sweep(load_spec(spec_path), store, Quiet(), options=SweepOptions(rates=rates))  # type: ignore[arg-type]
    t0 = time.process_time()
    result = sweep.run()
    cpu = time.process_time() - t0
    sel = result.selection
    return cpu, len(store.points(sweep.run_id)), (sel.winner, sel.tie_with, sel.decided_by), store


def main(paths: list[str]) -> None:
    head = f"{'search CPU s':>12} {'points':>7} {'grid CPU s':>11} {'points':>7} {'ratio':>6}"
    print(f"{'spec':<28} {head}  winner")
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            cpu_s, n_s, win_s, store = _sweep(path, None, Path(tmp) / f"{Path(path).stem}-s.db")
            rates = [p.rate for r in store.runs() for p in store.points(r.run_id) if p.rate]
            tol = load_spec(path).workload.search.tolerance_frac
            lo, hi = min(rates), max(rates)
            n = math.ceil(math.log(hi / lo) / math.log1p(tol)) + 1
            grid = tuple(float(f"{lo * (1 + tol) ** i:.4g}") for i in range(n))
            cpu_g, n_g, win_g, _ = _sweep(path, grid, Path(tmp) / f"{Path(path).stem}-g.db")
            if win_s[0] == win_g[0]:
                same = "same"
            elif win_g[0] in win_s[1] or win_s[0] in win_g[1]:
                same = f"grid: {win_g[0]}, within the tie; decided by {win_g[2]}"
            else:
                same = f"DIFFERENT (grid: {win_g[0]})"
            ties = f" tied with {', '.join(win_s[1])}, decided by {win_s[2]}" if win_s[1] else ""
            print(f"{Path(path).name:<28} {cpu_s:>12.1f} {n_s:>7} {cpu_g:>11.1f} {n_g:>7} "
                  f"{cpu_s / cpu_g:>6.2f}  {win_s[0]}{ties} ({same})", flush=True)


if __name__ == "__main__":
    if any(a.startswith("-") for a in sys.argv[1:]):  # --help: the arguments are specs, there are no flags
        print(__doc__)
    else:
        main(sys.argv[1:] or list(SPECS))
