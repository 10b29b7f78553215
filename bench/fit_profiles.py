"""Fit per-GPU, per-engine calibration profiles to the fidelity table, and cross-validate them.

    PYTHONPATH=. python bench/fit_profiles.py [--group h200/tensorrt-llm] [--write] [--folds 3]

Cases are grouped by GPU and engine family (each source's `engine_family` in
bench/fidelity_cases.yaml): a profile is for one GPU and one engine. Per group, the constants that
`orch calibrate` fits (hbm_efficiency, compute_efficiency, step_overhead_s, + moe_compute_efficiency
when a case is MoE; only hbm_efficiency and step_overhead_s where the group has too few numbers for
more) are fitted to every published number of the group's cases, each case run in its source's mode
(bench/fidelity.py run_case), by the Levenberg-Marquardt of `orch calibrate`
(orchestrator/calibrate/fitting.py fit_constants), starting from the GPU preset. `layer_overhead_s`
stays at the preset's guess: fitted too, it ran to 0.3 us in one fold and to 250 us on A100, trading
against the harness costs of served and offline sources; held out per source it did worse than kept
fixed (docs/fidelity.md).

- `--write`: fit on all of a group's cases (in-sample) and store the profile as
  orchestrator/catalog/profiles/<trtllm|vllm>-<gpu>.yaml.
- `--folds K`: K-fold cross-validation: the group's cases are dealt into K folds of equal size (in
  the order of a hash of the case ids, so a fold does not depend on the table's order); for each
  fold the constants are fitted on the other folds only, from the preset (`--fold-iterations`
  Levenberg-Marquardt iterations). The folds' constants go to bench/fidelity_heldout.json, and
  bench/fidelity.py predicts every case with the constants of the fit that did not see it.

- `--by-source`: for each source of a group, the constants fitted on the group's cases from the other
  sources only (`--fold-iterations` iterations); bench/fidelity.py predicts the source's cases with
  them (its by-source column and per-source summary): a profile's error on a publisher it never saw.

`--cap F` (default 2): an error beyond a factor F counts as F, so one case the model gets
structurally wrong (a TTFT 10x off) does not drag every constant to a bound.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import fidelity  # noqa: E402  (bench/fidelity.py, beside this file)

from orchestrator.calibrate.fitting import DEFAULT_CONSTANTS, MOE_CONSTANTS, fit_constants  # noqa: E402
from orchestrator.catalog.loader import load_gpu, load_model  # noqa: E402
from orchestrator.catalog.profiles import NO_PROFILE, write_profile  # noqa: E402
from orchestrator.errors import OrchError  # noqa: E402

PROFILES = ROOT / "orchestrator" / "catalog" / "profiles"
PREFIX = {"tensorrt-llm": "trtllm", "vllm": "vllm", "sglang": "sglang"}
FEW = ("hbm_efficiency", "step_overhead_s")  # what decode-only numbers can separate


def _errors(cases: list[Any], sources: dict[str, Any], constants: dict[str, float] | None,
            ) -> list[tuple[str, float]]:
    """(metric, log(predicted/measured)) for every measured number of the cases."""
    out = []
    for case in cases:
        try:
            got = fidelity.run_case(case, sources[case.source], NO_PROFILE, constants or {})
        except OrchError:
            got = {}
        for metric, measured in case.measured.items():
            value = got.get(metric)
            err = math.log(value / measured) if value and value > 0 else math.log(100.0)
            out.append((metric, err))
    return out


def _median_abs(errs: list[tuple[str, float]], ttft: bool) -> float | None:
    vals = [abs(math.exp(e) - 1) for m, e in errs if (m.startswith("ttft")) == ttft]
    return float(statistics.median(vals)) if vals else None


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def constants_for(cases: list[Any]) -> list[str] | None:
    """The constants these cases can pin: all of orch calibrate's where there are enough numbers
    (constants + 1), else hbm_efficiency and step_overhead_s, else None (too few to fit)."""
    numbers = sum(len(c.measured) for c in cases)
    names = list(DEFAULT_CONSTANTS)
    if any(load_model(c.model).is_moe for c in cases):
        names += list(MOE_CONSTANTS)
    for choice in (names, list(FEW)):
        if numbers >= len(choice) + 1:
            return choice
    return None


def fit_group(cases: list[Any], sources: dict[str, Any], gpu: str, names: list[str], *, cap: float,
              iterations: int, label: str) -> tuple[dict[str, float], tuple[str, ...]]:
    preset = load_gpu(gpu)
    start = {n: float(getattr(preset, n)) for n in names}
    log_cap = math.log(cap) if cap > 1 else 0.0

    def residuals(c: dict[str, float]) -> np.ndarray[Any, Any]:
        errs = [e for _, e in _errors(cases, sources, c)]
        return np.asarray([max(-log_cap, min(log_cap, e)) for e in errs] if log_cap else errs)

    result = fit_constants(residuals, start, max_iterations=iterations,
                           progress=lambda line: print(f"{label}: {line}", flush=True))
    return result.fitted, result.unconstrained


def fold_of(case_ids: list[str], k: int) -> dict[str, int]:
    """Cases dealt into k folds of equal size (+-1), in the order of a hash of their ids: the folds
    do not depend on the table's order, and a case keeps its fold while others are added."""
    ranked = sorted(case_ids, key=lambda cid: hashlib.sha256(cid.encode()).hexdigest())
    return {cid: i % k for i, cid in enumerate(ranked)}


def cross_validate(group: list[Any], sources: dict[str, Any], gpu: str, key: str, *, k: int, cap: float,
                   iterations: int) -> dict[str, Any]:
    folds: list[dict[str, Any]] = []
    notes: list[str] = []
    fold = fold_of([c.id for c in group], k)
    for i in range(k):
        held = [c for c in group if fold[c.id] == i]
        train = [c for c in group if fold[c.id] != i]
        if not held:
            continue
        names = constants_for(train)
        if names is None:
            notes.append(f"fold {i + 1}: {len(train)} training case(s), too few numbers to fit; "
                         f"{', '.join(c.id for c in held)} not held out")
            continue
        t0 = time.perf_counter()
        fitted, _ = fit_group(train, sources, gpu, names, cap=cap, iterations=iterations,
                              label=f"{key} fold {i + 1}/{k}")
        print(f"{key} fold {i + 1}/{k}: trained on {len(train)} cases in {time.perf_counter() - t0:.0f} s: "
              + ", ".join(f"{n} {v:.4g}" for n, v in fitted.items()), flush=True)
        folds.append({"held_out": [c.id for c in held], "trained_on": len(train),
                      "constants": {n: float(f"{v:.4g}") for n, v in fitted.items()}})
    return {"k": k, "cap": cap, "iterations": iterations,
            "table_hash": fidelity.table_hash(group, sources), "folds": folds, "note": "; ".join(notes)}


def by_source(group: list[Any], sources: dict[str, Any], gpu: str, key: str, *, cap: float,
              iterations: int) -> dict[str, Any]:
    """Per source of the group: constants fitted on the other sources' cases only."""
    fits: dict[str, Any] = {}
    notes: list[str] = []
    names_in_group = sorted({c.source for c in group})
    if len(names_in_group) < 2:
        notes.append(f"one source ({names_in_group[0]}): nothing else to fit on")
    else:
        for src in names_in_group:
            held = [c for c in group if c.source == src]
            train = [c for c in group if c.source != src]
            names = constants_for(train)
            if names is None:
                notes.append(f"{src}: the other sources have too few numbers to fit")
                continue
            t0 = time.perf_counter()
            fitted, _ = fit_group(train, sources, gpu, names, cap=cap, iterations=iterations,
                                  label=f"{key} without {src}")
            print(f"{key} without {src}: trained on {len(train)} cases in {time.perf_counter() - t0:.0f} s: "
                  + ", ".join(f"{n} {v:.4g}" for n, v in fitted.items()), flush=True)
            fits[src] = {"held_out": [c.id for c in held], "trained_on": len(train),
                         "constants": {n: float(f"{v:.4g}") for n, v in fitted.items()}}
    return {"cap": cap, "iterations": iterations, "table_hash": fidelity.table_hash(group, sources),
            "sources": fits, "note": "; ".join(notes)}


def _store_heldout(key: str, entry: dict[str, Any], section: str = "groups") -> None:
    """Read-modify-write of one group's entry; several groups may be fitted in parallel."""
    path = fidelity.HELDOUT
    with open(Path(tempfile.gettempdir()) / "orch-fidelity-heldout.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        doc = json.loads(path.read_text()) if path.is_file() else {}
        doc.setdefault(section, {})[key] = entry
        doc["written_by"] = "bench/fit_profiles.py --folds"
        path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--group", action="append", help="only these GPU/engine groups, e.g. h200/tensorrt-llm")
    ap.add_argument("--write", action="store_true", help="fit on all cases, write the bundled profiles")
    ap.add_argument("--folds", type=int, default=0,
                    help="K-fold cross-validation (writes the held-out cache)")
    ap.add_argument("--by-source", action="store_true",
                    help="per source: fit on the group's other sources (writes the held-out cache)")
    ap.add_argument("--iterations", type=int, default=4, help="of the full (in-sample) fit")
    ap.add_argument("--fold-iterations", type=int, default=3, help="of each cross-validation fit")
    ap.add_argument("--cap", type=float, default=2.0, help="errors beyond this factor count as it")
    args = ap.parse_args()
    sources, cases = fidelity.load_cases()
    groups: dict[str, list[Any]] = {}
    for c in cases:
        groups.setdefault(fidelity.group_key(c, sources[c.source]), []).append(c)
    for key in sorted(groups):
        if args.group and key not in args.group:
            continue
        group = groups[key]
        gpu, family = key.split("/")
        if args.folds > 1:
            _store_heldout(key, cross_validate(group, sources, gpu, key, k=args.folds, cap=args.cap,
                                               iterations=args.fold_iterations))
        if args.by_source:
            _store_heldout(key, by_source(group, sources, gpu, key, cap=args.cap,
                                          iterations=args.fold_iterations), section="by_source")
        if not args.write:
            continue
        names = constants_for(group)
        if names is None:
            print(f"{key}: too few numbers to fit a profile", flush=True)
            continue
        t0 = time.perf_counter()
        before = _errors(group, sources, None)
        fitted, unconstrained = fit_group(group, sources, gpu, names, cap=args.cap,
                                          iterations=args.iterations, label=key)
        rounded = {k: float(f"{v:.4g}") for k, v in fitted.items() if k not in unconstrained}
        after = _errors(group, sources, rounded)
        fit = {"cases": len(group), "numbers": len(before),
               "median_abs_error_before": {"ttft": _median_abs(before, True),
                                           "rest": _median_abs(before, False)},
               "median_abs_error_after": {"ttft": _median_abs(after, True),
                                          "rest": _median_abs(after, False)},
               "in_sample": True, "unconstrained": list(unconstrained), "error_cap_factor": args.cap,
               "iterations": args.iterations}
        b, a = fit["median_abs_error_before"], fit["median_abs_error_after"]
        print(f"{key}: {len(group)} cases, {len(before)} numbers, {time.perf_counter() - t0:.0f} s; "
              + ", ".join(f"{k} {v:.4g}" for k, v in rounded.items())
              + f"; median |error| TTFT {_pct(b['ttft'])} -> {_pct(a['ttft'])}, rest {_pct(b['rest'])} -> "
              f"{_pct(a['rest'])} (in-sample)", flush=True)
        docs = sorted({f"{sources[c.source]['document']} ({sources[c.source]['version']})" for c in group})
        write_profile(PROFILES / f"{PREFIX[family]}-{gpu}.yaml", gpu=gpu, engine=family, constants=rounded,
                      source=f"fitted by bench/fit_profiles.py --write to the {len(group)} {key} cases of "
                      "bench/fidelity_cases.yaml (in-sample): " + "; ".join(docs),
                      extra={"regime": {"input_tokens": [min(c.input_tokens for c in group),
                                                          max(c.input_tokens for c in group)],
                                        "output_tokens": [min(c.output_tokens for c in group),
                                                          max(c.output_tokens for c in group)]},
                             "started_from": {n: float(getattr(load_gpu(gpu), n)) for n in names},
                             "cases": [c.id for c in group], "fit": fit})


if __name__ == "__main__":
    main()
