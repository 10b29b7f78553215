"""Fit per-GPU calibration profiles to the fidelity table (bench/fidelity_cases.yaml).

    PYTHONPATH=. python bench/fit_profiles.py [--gpu h100-sxm] [--write]   (needs bench/fidelity.py)

For each GPU, the constants that `orch calibrate` fits (hbm_efficiency, compute_efficiency,
step_overhead_s, + moe_compute_efficiency when a case is MoE) are fitted to every published number
of that GPU's cases, each case run in its source's mode (bench/fidelity.py run_case), by the same
Levenberg-Marquardt as `orch calibrate` (orchestrator/calibrate/fit.py fit_constants). The sources
are TensorRT-LLM (directly or inside NIM), so the profiles are named trtllm-<gpu>. The fit is
in-sample: the "after" error is on the cases it was fitted to. `--write` stores the profiles in
orchestrator/catalog/profiles/.
"""

from __future__ import annotations

import argparse
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

from orchestrator.calibrate.fit import DEFAULT_CONSTANTS, MOE_CONSTANTS, fit_constants  # noqa: E402
from orchestrator.catalog.loader import load_gpu, load_model  # noqa: E402
from orchestrator.catalog.profiles import write_profile  # noqa: E402
from orchestrator.errors import OrchError  # noqa: E402

PROFILES = ROOT / "orchestrator" / "catalog" / "profiles"


def _errors(cases: list[Any], sources: dict[str, Any], profile: str | None) -> list[tuple[str, float]]:
    """(metric, log(predicted/measured)) for every measured number of the cases."""
    out = []
    for case in cases:
        try:
            got = fidelity.run_case(case, sources[case.source], profile)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", action="append", help="only these GPUs (default: every GPU of the table)")
    ap.add_argument("--write", action="store_true",
                    help="write orchestrator/catalog/profiles/trtllm-GPU.yaml")
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--cap", type=float, default=0.0, help="robust: errors beyond this factor count as it")
    args = ap.parse_args()
    cap = math.log(args.cap) if args.cap > 1 else 0.0
    sources, cases = fidelity.load_cases()
    gpus = args.gpu or sorted({c.gpu for c in cases})
    tmp = Path(tempfile.mkdtemp(prefix="orch-fit-"))
    for gpu in gpus:
        group = [c for c in cases if c.gpu == gpu]
        names = list(DEFAULT_CONSTANTS)
        if any(load_model(c.model).is_moe for c in group):
            names += list(MOE_CONSTANTS)
        preset = load_gpu(gpu)
        start = {n: float(getattr(preset, n)) for n in names}
        trial = tmp / f"{gpu}.yaml"

        def residuals(c: dict[str, float], group: list[Any] = group, gpu: str = gpu,
                      trial: Path = trial) -> np.ndarray[Any, Any]:
            write_profile(trial, gpu=gpu, engine="tensorrt-llm", constants=c, source="trial", extra={})
            # --cap F: an error beyond a factor F counts as F, so one case the model gets structurally
            # wrong (a TTFT 10x off) does not drag every constant to a bound.
            errs = [e for _, e in _errors(group, sources, str(trial))]
            return np.asarray([max(-cap, min(cap, e)) for e in errs] if cap else errs)

        t0 = time.perf_counter()
        before = _errors(group, sources, None)
        result = fit_constants(residuals, start, max_iterations=args.iterations,
                               progress=lambda line, gpu=gpu: print(f"{gpu}: {line}", flush=True))
        write_profile(trial, gpu=gpu, engine="tensorrt-llm", constants=result.fitted, source="fit", extra={})
        after = _errors(group, sources, str(trial))
        fit = {
            "cases": len(group), "numbers": len(before),
            "median_abs_error_before": {"ttft": _median_abs(before, True),
                                        "rest": _median_abs(before, False)},
            "median_abs_error_after": {"ttft": _median_abs(after, True),
                                       "rest": _median_abs(after, False)},
            "in_sample": True, "unconstrained": list(result.unconstrained),
            "iterations": result.iterations, "error_cap_factor": args.cap or None,
        }
        print(f"{gpu}: {len(group)} cases, {len(before)} numbers, {time.perf_counter() - t0:.0f} s; "
              + ", ".join(f"{k} {start[k]:.4g} -> {v:.4g}" for k, v in result.fitted.items()))
        b, a = fit["median_abs_error_before"], fit["median_abs_error_after"]
        print(f"{gpu}: median |error| TTFT {_pct(b['ttft'])} -> {_pct(a['ttft'])}, rest {_pct(b['rest'])} -> "
              f"{_pct(a['rest'])} (in-sample)", flush=True)
        if args.write:
            rounded = {k: float(f"{v:.4g}") for k, v in result.fitted.items()}
            write_profile(PROFILES / f"trtllm-{gpu}.yaml", gpu=gpu, engine="tensorrt-llm", constants=rounded,
                          source="fitted by bench/fit_profiles.py to the " + gpu + " cases of "
                          "bench/fidelity_cases.yaml (TensorRT-LLM 0.17 throughput and 0.14 serving "
                          "tables of perf-overview.md, NIM 1.8.0 Llama-3.3-70B); in-sample",
                          extra={"started_from": start, "fit": fit})


if __name__ == "__main__":
    main()
