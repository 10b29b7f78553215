"""Held-out error of a calibration: fit on some measured points of a stored run, predict the others.

    python bench/calibration_heldout.py RUN --store results.db --train-layouts tp2,pp2 --train-rates 1,4

Fits the default constants (orch calibrate) to the points of the training layouts at the training
rates, then prints, for every other point (another layout, another load point), the simulator's error
with the preset constants and with the fitted ones. Prints ratios, asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.calibrate.fitting import METRICS, fit, points_from_store, predict_point
from orchestrator.store.db import Store


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run")
    p.add_argument("--store", required=True)
    p.add_argument("--train-layouts", required=True, help="comma-separated, e.g. tp2,pp2")
    p.add_argument("--train-rates", required=True, help="comma-separated requests/s, e.g. 1,4")
    p.add_argument("--metrics", default=None, help="fit only these, e.g. tpot_mean_ms,output_tokens_per_s")
    args = p.parse_args()
    layouts = set(args.train_layouts.split(","))
    rates = {float(r) for r in args.train_rates.split(",")}
    store = Store(args.store)
    points = points_from_store(store, [args.run])
    store.close()
    train = [pt for pt in points if str(pt.layout) in layouts and pt.rate in rates]
    held = [pt for pt in points if pt not in train]
    print(f"{len(train)} training points, {len(held)} held out")
    t0 = time.perf_counter()
    cal = fit(train, progress=print, metrics=args.metrics.split(",") if args.metrics else None)
    print(f"fit in {time.perf_counter() - t0:.0f} s: "
          + ", ".join(f"{k} {cal.start[k]:.4g} -> {v:.4g}" for k, v in cal.fitted.items()))
    print(f"training median |error|: before {cal.median_abs_error('before'):.1%}, "
          f"after {cal.median_abs_error('after'):.1%}")
    errs: dict[str, list[float]] = {"before": [], "after": []}
    print(f"{'held-out point':32} " + " ".join(f"{m:>34}" for m, _ in METRICS))
    for pt in held:
        before = predict_point(pt, cal.start)
        after = predict_point(pt, cal.fitted)
        cells = []
        for m, _ in METRICS:
            meas = pt.measured.get(m)
            if meas is None or m not in before or m not in after:
                cells.append(f"{'-':>34}")
                continue
            eb, ea = before[m] / meas - 1, after[m] / meas - 1
            errs["before"].append(abs(eb))
            errs["after"].append(abs(ea))
            cells.append(f"{meas:10.1f} {eb:+10.1%} -> {ea:+9.1%}")
        print(f"{pt.name:32} " + " ".join(cells))
    if errs["before"]:
        print(f"held-out median |error|: before {statistics.median(errs['before']):.1%}, "
              f"after {statistics.median(errs['after']):.1%} (TTFT mean, TPOT mean, output tok/s)")


if __name__ == "__main__":
    main()
