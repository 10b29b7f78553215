"""Do a load point's intervals cover what a rerun gives? (virtual time, the simulated engine)

    PYTHONPATH=. .venv/bin/python bench/interval_coverage.py [--seeds 60] [SPEC LAYOUT RATE ...]
    PYTHONPATH=. .venv/bin/python bench/interval_coverage.py --batches 5,10,20 [--seeds 40] [...]

Per (spec, layout, rate): runs the point with workload seeds 0..N-1 (other arrivals, prompts and
lengths each: independent reruns), takes the mean of the N estimates as the value a rerun is
centred on, and counts how often each seed's 95% interval contains it. Side by side: the intervals
orch computes now (loadgen/intervals.py: batch means and a block bootstrap over time batches of the
send window) and the ones it computed before (a percentile bootstrap over requests, over the window
that ran to the last request's end). A 95% interval should cover about 95% of the time; zero-width
counts the seeds whose goodput interval was a point. Prints, asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.layout import parse_layout  # noqa: E402
from orchestrator.loadgen.intervals import point_intervals  # noqa: E402
from orchestrator.loadgen.metrics import compute_metrics  # noqa: E402
from orchestrator.loadgen.records import RequestRecord  # noqa: E402
from orchestrator.loadgen.slo import meets_slo  # noqa: E402
from orchestrator.loadgen.spec_workload import slo_bounds  # noqa: E402
from orchestrator.pipeline.repeats import reseeded  # noqa: E402
from orchestrator.plan.from_spec import plan_inputs  # noqa: E402
from orchestrator.sim.run import simulate_point  # noqa: E402
from orchestrator.spec.load import load_spec  # noqa: E402

# The main job's layouts below, at and past their SLO capacity (orch sweep layouts/qwen72b.yaml).
DEFAULT = [("layouts/qwen72b.yaml", "tp8", 14.29), ("layouts/qwen72b.yaml", "tp8", 16.96),
           ("layouts/qwen72b.yaml", "tp4x2", 17.23), ("layouts/qwen72b.yaml", "tp8", 21.43)]
KEYS = ("goodput", "output_throughput", "itl_p99_ms", "ttft_p99_ms")


def _before(records: Sequence[RequestRecord], warmup_s: float, slo: dict[str, float],
            seed: int) -> tuple[dict[str, float], dict[str, list[float]]]:
    """The former estimates and intervals: window to the last end, bootstrap over requests."""
    start = min(r.scheduled_s for r in records) + warmup_s
    end = max(r.done_s or r.sent_s for r in records)
    window = end - start
    done = [r for r in records if r.ok and r.sent_s >= start and (r.done_s or r.sent_s) <= end]
    n = len(done)
    good = np.array([meets_slo(r, slo) for r in done], dtype=np.float64)
    tokens = np.array([r.n_output_tokens for r in done], dtype=np.float64)
    itl = [np.array([g * 1e3 for g in r.itl_chunk_s]) for r in done]
    ttft = np.array([(r.ttft_s or 0.0) * 1e3 for r in done])
    rng = np.random.default_rng(seed)
    reps: dict[str, list[float]] = {k: [] for k in KEYS}
    for _ in range(200):
        pick = rng.integers(0, n, n)
        reps["goodput"].append(good[pick].sum() / window)
        reps["output_throughput"].append(tokens[pick].sum() / window)
        reps["itl_p99_ms"].append(float(np.percentile(np.concatenate([itl[i] for i in pick]), 99)))
        reps["ttft_p99_ms"].append(float(np.percentile(ttft[pick], 99)))
    point = {"goodput": good.sum() / window, "output_throughput": tokens.sum() / window,
             "itl_p99_ms": float(np.percentile(np.concatenate(itl), 99)),
             "ttft_p99_ms": float(np.percentile(ttft, 99))}
    return point, {k: [float(x) for x in np.percentile(v, [2.5, 97.5])] for k, v in reps.items()}


def _now(records: Sequence[RequestRecord], warmup_s: float, slo: dict[str, float],
         seed: int) -> tuple[dict[str, float], dict[str, list[float]]]:
    m = compute_metrics(records, warmup_s=warmup_s, slo=slo)
    iv = point_intervals(records, warmup_s=warmup_s, slo=slo, seed=seed)
    point = {"goodput": m.goodput or 0.0, "output_throughput": m.output_throughput,
             "itl_p99_ms": m.itl_chunk_ms.p99 or 0.0, "ttft_p99_ms": m.ttft_ms.p99 or 0.0}
    return point, {k: iv[k] for k in KEYS if k in iv}


def batch_widths(spec_path: str, layout_name: str, rate: float, seeds: int, batches: Sequence[int]) -> None:
    """Per batch count: the mean width of the ITL p99 and TTFT p99 intervals over the width the reruns'
    spread asks for (2 x 1.96 sd); 1 is right, below 1 too narrow."""
    spec = load_spec(ROOT / spec_path)
    inputs, layout = plan_inputs(spec), parse_layout(layout_name)
    slo, warmup = slo_bounds(spec.slo), spec.workload.warmup_s
    runs = [simulate_point(reseeded(spec, k), inputs, layout, rate).result.records for k in range(seeds)]
    sd = {key: statistics.stdev([_now(r, warmup, slo, 0)[0][key] for r in runs]) for key in KEYS[2:]}
    print(f"\n{spec_path} {layout_name} rate={rate:g}/s: interval width / (3.92 x rerun sd), {seeds} seeds")
    for k in batches:
        widths = {key: [] for key in KEYS[2:]}  # type: dict[str, list[float]]
        for r in runs:
            iv = point_intervals(r, warmup_s=warmup, slo=slo, batches=k)
            for key in widths:
                widths[key].append(iv[key][1] - iv[key][0])
        print(f"  {k:>2} batches: " + ", ".join(
            f"{key} {statistics.mean(w) / (3.92 * sd[key]):.2f}" for key, w in widths.items()))


def study(spec_path: str, layout_name: str, rate: float, seeds: int) -> None:
    spec = load_spec(ROOT / spec_path)
    inputs, layout = plan_inputs(spec), parse_layout(layout_name)
    slo, warmup = slo_bounds(spec.slo), spec.workload.warmup_s
    runs: dict[str, list[tuple[dict[str, float], dict[str, list[float]]]]] = {"before": [], "now": []}
    t0 = time.process_time()
    requests = []
    for k in range(seeds):
        recs = simulate_point(reseeded(spec, k), inputs, layout, rate).result.records
        requests.append(len(recs))
        runs["before"].append(_before(recs, warmup, slo, k))
        runs["now"].append(_now(recs, warmup, slo, k))
    cpu = time.process_time() - t0
    print(f"\n{spec_path} {layout_name} rate={rate:g}/s: {seeds} seeds, {statistics.mean(requests):.0f} "
          f"requests a point, {cpu:.0f} CPU s")
    print(f"  {'metric':<18} {'rerun mean':>11} {'rerun sd':>9}   {'coverage before':>15} {'now':>6}   "
          f"{'mean width before':>17} {'now':>8}   {'zero-width before':>17} {'now':>4}")
    for key in KEYS:
        row: dict[str, Any] = {}
        for which, got in runs.items():
            estimates = [p[key] for p, _ in got]
            centre = statistics.mean(estimates)
            ivs = [iv[key] for _, iv in got if key in iv]
            row[which] = (
                centre, statistics.stdev(estimates),
                sum(lo <= centre <= hi for lo, hi in ivs) / len(ivs) if ivs else float("nan"),
                statistics.mean(hi - lo for lo, hi in ivs) if ivs else float("nan"),
                sum(hi - lo <= 1e-12 * max(abs(hi), 1.0) for lo, hi in ivs),
            )
        b, n = row["before"], row["now"]
        print(f"  {key:<18} {n[0]:>11.4g} {n[1]:>9.3g}   {b[2]:>15.0%} {n[2]:>6.0%}   {b[3]:>17.4g} "
              f"{n[3]:>8.4g}   {b[4]:>17d} {n[4]:>4d}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=60)
    ap.add_argument("--batches", default=None,
                    help="instead: compare batch counts, e.g. 5,10,20 (percentile interval widths)")
    ap.add_argument("cases", nargs="*", help="SPEC LAYOUT RATE triples")
    args = ap.parse_args()
    cases = DEFAULT
    if args.cases:
        it = iter(args.cases)
        cases = [(s, lay, float(r)) for s, lay, r in zip(it, it, it, strict=True)]
    for spec_path, layout, rate in cases:
        if args.batches:
            batch_widths(spec_path, layout, rate, args.seeds, [int(k) for k in args.batches.split(",")])
        else:
            study(spec_path, layout, rate, args.seeds)


if __name__ == "__main__":
    main()
