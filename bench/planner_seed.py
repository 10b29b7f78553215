"""How close the planner's seed lands to the capacity the search then finds (virtual time).

    PYTHONPATH=. /work/venv/bin/python bench/planner_seed.py [SPEC ...]   (default: the sim specs in layouts/)
    PYTHONPATH=. /work/venv/bin/python bench/planner_seed.py --closed [SPEC ...]

`--closed` measures the closed-loop seed (requests in flight, pipeline/predict.py
PLANNER_CONCURRENCY_OVERESTIMATE) the same way: the specs given, else the sim specs in layouts/ with
`workload.loop: closed`, else (none ship) the open-loop sim specs; an open-loop spec is turned into a
closed loop (no rates, search over 1-1024 requests in flight with the spec's tolerance and max_points).

Runs `orch sweep SPEC --json` (virtual time: the simulated engine, no servers) on each spec and prints,
per layout, the seed the capacity search started from, the SLO capacity it found, their ratio, whether
the capacity lies within the GROWTH_FROM_PLANNER bracket of the seed (seed / g .. seed * g) and how
many load points the search measured. Prints ratios, asserts nothing.

Re-derive the divisors after a profile refit or a new example spec: run it with no SPEC (every
searched sim spec in layouts/; session workloads included, their seeds priced per call on the whole
history less its expected cached prefix) and with --closed; the last lines say whether the divisor in
use is still within sqrt(GROWTH_FROM_PLANNER) of the one that centres the seeds, and the value to
take when it is not.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.pipeline.capacity import GROWTH_FROM_PLANNER, stored_capacity  # noqa: E402
from orchestrator.pipeline.predict import PLANNER_CONCURRENCY_OVERESTIMATE, PLANNER_OVERESTIMATE  # noqa: E402
from orchestrator.spec.load import load_spec  # noqa: E402

#: open-loop-only workload fields dropped when an open sim spec is turned into a closed loop
_OPEN_ONLY = ("rates_per_s", "max_concurrency", "arrival")
_OPEN_SEARCH = ("min_rate_per_s", "max_rate_per_s", "start_rate_per_s")


def _sim_specs(closed: bool) -> list[Path]:
    out = []
    for path in sorted((ROOT / "layouts").glob("*.yaml")):
        spec = load_spec(path)
        w = spec.workload
        searched = not w.rates_per_s and not w.concurrency
        if spec.engine.name == "sim" and (w.loop == "closed") == closed and searched:
            out.append(path)
    return out


def _as_closed_loop(path: Path, tmp: Path) -> Path:
    """The open-loop spec as a closed loop searched over 1-1024 in flight (same model, SLO, layouts)."""
    raw: dict[str, Any] = yaml.safe_load(path.read_text())
    w = raw["workload"]
    for key in _OPEN_ONLY:
        w.pop(key, None)
    search = {k: v for k, v in (w.get("search") or {}).items() if k not in _OPEN_SEARCH}
    w["search"] = {**search, "min_concurrency": 1, "max_concurrency": 1024}
    w["loop"] = "closed"
    out = tmp / f"{path.stem}-closed.yaml"
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def main() -> None:
    args = sys.argv[1:]
    closed = "--closed" in args
    given = [Path(a) for a in args if a != "--closed"]
    with tempfile.TemporaryDirectory() as tmp:
        if not closed:
            specs = given or _sim_specs(closed=False)
        else:
            specs = given or _sim_specs(closed=True) or _sim_specs(closed=False)
            specs = [p if load_spec(p).workload.loop == "closed" else _as_closed_loop(p, Path(tmp))
                     for p in specs]
        _run(specs, closed)


def _run(specs: list[Path], closed: bool) -> None:
    g = GROWTH_FROM_PLANNER
    unit = " in flight" if closed else "/s"
    print(f"{'spec':22} {'layout':10} {'seed' + unit:>10} {'capacity' + unit:>12} {'cap/seed':>8} "
          f"{'in [1/' + format(g, 'g') + ', ' + format(g, 'g') + ']':>12} {'points':>6}  seed source")
    ratios: list[float] = []
    inside = total = 0
    for path in specs:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-c", "from orchestrator.cli import main; main()", "sweep", str(path),
                 "--store", str(Path(tmp) / "s.db"), "--json"],
                capture_output=True, text=True, check=False, cwd=ROOT)
            wall = time.perf_counter() - t0
        if out.returncode not in (0, 3):
            print(f"{path.name}: orch sweep exit {out.returncode}: {out.stderr.strip()[-300:]}")
            continue
        data = json.loads(out.stdout)
        for layout, cap in sorted((data.get("capacity") or {}).items()):
            _, found, (_, hi), seed = stored_capacity(cap)
            censored = found is not None and hi is None  # passes at the search's top: a bound, not a capacity
            ratio = found / seed if found and not censored else None
            ok = ratio is not None and 1 / g <= ratio <= g
            total += ratio is not None
            inside += ok
            if ratio:
                ratios.append(ratio)
            print(f"{path.stem:22} {layout:10} {seed:10.4g} {found or 0:12.4g} "
                  f"{(f'{ratio:.2f}' if ratio else '-'):>8} "
                  f"{('yes' if ok else ('-' if ratio is None else 'no')):>12} "
                  f"{len(cap['points']):6d}  {cap['seed_source']}"
                  + ("  (passes at the top: left out)" if censored else ""))
        print(f"{'':22} ({path.name}: {wall:.0f} s)")
    if ratios:
        print(f"capacity / seed: median {statistics.median(ratios):.2f}, "
              f"geometric mean {statistics.geometric_mean(ratios):.2f}, "
              f"range {min(ratios):.2f}-{max(ratios):.2f}; {inside} of {total} within the x{g:g} bracket")
        div = PLANNER_CONCURRENCY_OVERESTIMATE if closed else PLANNER_OVERESTIMATE
        undivided = statistics.geometric_mean(ratios) / div
        print(f"capacity / the planner's undivided figure (seed x {div:g}): geometric mean {undivided:.3f}, "
              f"so a divisor of {1 / undivided:.2f} would centre the seeds")
        # The rule for the constant (pipeline/predict.py): the first bracket spans x g either side of
        # the seed, so a divisor off centre by less than sqrt(g) leaves the typical seed's bracket
        # holding the capacity; only a drift past that (a refit, a new kind of workload) is worth a change.
        centre, slack = 1 / undivided, math.sqrt(g)
        verdict = ("keep it" if div / slack <= centre <= div * slack
                   else f"change it to {centre:.2f} (re-run over every example spec first)")
        print(f"the centring divisor is {centre / div:.2f}x the one in use ({div:g}); within x{slack:.2f} "
              f"(sqrt of the bracket's growth) either way: {verdict}")
        # the divisor that puts the most seeds inside the first bracket (ties: nearest the median)
        raw = [r / div for r in ratios]
        med = statistics.median(raw)
        grid = [0.1 * 1.02**k for k in range(300)]
        best = max(grid, key=lambda d: (sum(1 / g <= u * d <= g for u in raw), -abs(math.log(d * med))))
        n = sum(1 / g <= u * best <= g for u in raw)
        print(f"a divisor of {best:.2f} puts {n} of {len(raw)} within the x{g:g} bracket "
              f"(median capacity / undivided {med:.3f})")


if __name__ == "__main__":
    main()
