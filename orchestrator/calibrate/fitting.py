"""`orch calibrate` without the printing: fit the cost model's guessed constants to measured points.

Each measured load point (a stored run's layout at an open-loop rate, with its mean TTFT and TPOT and
output throughput) is re-predicted by the simulator (`orch simulate`, the same requests in virtual time)
under trial constants. The fit minimises the squared log errors of all points' metrics with
Levenberg-Marquardt over the logarithms of the constants (forward-difference Jacobian), so a
constant that is 2x too high and one that is 2x too low weigh the same. The simulator is
deterministic for a given spec, so the residuals are smooth enough for finite differences.

Fitted by default: hbm_efficiency, compute_efficiency, step_overhead_s, request_overhead_s when TTFT
is among the fitted metrics, and moe_compute_efficiency for MoE models. layer_overhead_s is fittable
on request (--constants), where the points span models of different depths. A weak pull toward the
starting guesses (PRIOR_WEIGHT) keeps a constant the points cannot see near its start.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from orchestrator.catalog.loader import canonical_gpu
from orchestrator.catalog.types import GPUSpec
from orchestrator.errors import SpecError
from orchestrator.layout import Layout, parse_layout
from orchestrator.loadgen.records import RequestRecord
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.sim.run import simulate_point
from orchestrator.spec.load import spec_from_json
from orchestrator.spec.models import SweepSpec

# (metric name, how to read it from Metrics.to_dict() and the point's records). Means, not medians:
# a median is one request's value and jumps as the schedule shifts, which defeats finite differences.
# Output tokens/s over the whole run (makespan_rate), not the window's throughput: a window cuts the
# start-up ramp and the drain at fixed times, so a small change of a constant that shifts which
# requests are in the batch at the window's end moves it by a percent or more, up and down (a tp8
# point past capacity: +-0.7% between hbm_efficiency steps of 0.4%), and the fit cannot follow.
# The makespan counts every token once and moves smoothly.
Reader = Callable[[dict[str, Any], Sequence[RequestRecord]], float | None]
METRICS: tuple[tuple[str, Reader], ...] = (
    ("ttft_mean_ms", lambda m, _r: (m.get("ttft_ms") or {}).get("mean")),
    ("tpot_mean_ms", lambda m, _r: (m.get("tpot_ms") or {}).get("mean")),
    ("output_tokens_per_s", lambda _m, r: makespan_rate(r)),
)


def makespan_rate(records: Sequence[RequestRecord]) -> float | None:
    """Output tokens of the completed requests over the run's whole span (first scheduled send to last
    end), per second; None without records (a point stored without them)."""
    done = [r for r in records if r.ok and r.done_s is not None]
    if not done:
        return None
    span = max(r.done_s or 0.0 for r in done) - min(r.scheduled_s for r in records)
    return sum(r.n_output_tokens for r in done) / span if span > 0 else None


DEFAULT_CONSTANTS = ("hbm_efficiency", "compute_efficiency", "step_overhead_s")
MOE_CONSTANTS = ("moe_compute_efficiency",)
TTFT_CONSTANTS = ("request_overhead_s",)  # fitted by default when TTFT is: nothing else sees it
# layer_overhead_s on request only (--constants), where the points span models of different depths: on
# one model it moves every step by as much as step_overhead_s does, and the two cannot be told apart.
FITTABLE = ("hbm_efficiency", "compute_efficiency", "moe_compute_efficiency", "step_overhead_s",
            "layer_overhead_s", "request_overhead_s")
# Bounds of each constant during the fit (the efficiencies are fractions of the datasheet).
_BOUNDS = {"hbm_efficiency": (0.05, 1.0), "compute_efficiency": (0.02, 1.0),
           "moe_compute_efficiency": (0.01, 1.0), "step_overhead_s": (1e-5, 0.5),
           "layer_overhead_s": (1e-7, 1e-3),
           "request_overhead_s": (1e-5, 1.0)}
# Where the fit starts a constant whose preset value is below its bound (0: not set). The fit runs in
# logs, and at 10 us a factor-e change moves no prediction, so the constant would pass as unseen.
_START_IF_UNSET = {"step_overhead_s": 1e-4, "layer_overhead_s": 1e-5, "request_overhead_s": 1e-3}
# Weight of the pull toward the starting constants, per unit of log: a factor of 2 away costs
# (0.01 ln 2)^2 = 5e-5, what a 0.7% error on one metric costs.
PRIOR_WEIGHT = 0.01
UNSEEN_SENSITIVITY = 0.01
_RATE_LABEL = re.compile(r"^rate=([0-9.eE+-]+)/s$")


@dataclass(frozen=True)
class MeasuredPoint:
    run_id: str
    spec: SweepSpec
    layout: Layout
    rate: float
    num_requests: int
    measured: dict[str, float]  # metric -> value (only the ones the run has)
    engine: str = ""  # what the run measured (the store's engine: sim for the simulated engine)

    @property
    def name(self) -> str:
        return f"{self.run_id[-6:]} {self.layout} rate={self.rate:g}/s"


@dataclass(frozen=True)
class PointError:
    point: str
    measured: dict[str, float]
    before: dict[str, float]  # predicted with the starting constants
    after: dict[str, float]  # predicted with the fitted constants

    def error(self, metric: str, which: str) -> float | None:
        """Relative error (predicted - measured) / measured."""
        pred = (self.before if which == "before" else self.after).get(metric)
        meas = self.measured.get(metric)
        if pred is None or meas is None or meas == 0:
            return None
        return (pred - meas) / meas


@dataclass(frozen=True)
class Calibration:
    gpu: str
    engine: str
    model: str
    start: dict[str, float]
    fitted: dict[str, float]
    points: tuple[PointError, ...]
    iterations: int
    evaluations: int
    metrics: tuple[str, ...] = tuple(name for name, _ in METRICS)  # the ones fitted
    unconstrained: tuple[str, ...] = ()  # constants the points do not move: kept at their start

    def median_abs_error(self, which: str, metrics: Sequence[str] | None = None) -> float | None:
        """Median |relative error| over the points and the fitted metrics (or `metrics`)."""
        use = self.metrics if metrics is None else tuple(metrics)
        errs = [abs(e) for p in self.points for m in use if (e := p.error(m, which)) is not None]
        return float(np.median(errs)) if errs else None


    def worse_after(self) -> dict[str, tuple[int, int]]:
        """Per fitted metric: (points whose |error| grew with the fitted constants, points with both
        errors). A median near 0 can hide a fit that made most points worse."""
        out: dict[str, tuple[int, int]] = {}
        for m in self.metrics:
            pairs = [(b, a) for p in self.points
                     if (b := p.error(m, "before")) is not None and (a := p.error(m, "after")) is not None]
            out[m] = (sum(1 for b, a in pairs if abs(a) > abs(b)), len(pairs))
        return out


def simulated_runs(points: Sequence[MeasuredPoint]) -> list[str]:
    """The runs among `points` that measured the simulated engine: calibrating on them fits the
    simulator to its own output (errors near 0 by construction; the fit only chases noise)."""
    return sorted({p.run_id for p in points if p.engine == "sim"})


def points_from_store(store: Any, run_ids: Sequence[str]) -> list[MeasuredPoint]:
    """The open-loop measured points of stored runs (closed-loop and trace points are skipped)."""
    out = []
    for ref in run_ids:
        run = store.run(ref)
        spec = spec_from_json(store.spec_json(run.run_id), f"run {run.run_id}")
        records: dict[tuple[str, str], list[RequestRecord]] = {}
        for layout, label, rec in store.records(run.run_id):
            records.setdefault((layout, label), []).append(rec)
        for p in store.points(run.run_id):
            found = _RATE_LABEL.match(p.label)
            if found is None or p.rate is None:
                continue
            recs = records.get((p.layout, p.label), [])
            measured = {name: float(v) for name, read in METRICS
                        if (v := read(p.metrics, recs)) is not None and math.isfinite(v) and v > 0}
            if not measured:
                continue
            n = int(p.metrics.get("n_requests") or spec.workload.num_requests or 0)
            out.append(MeasuredPoint(run.run_id, spec, parse_layout(p.layout), float(p.rate), n, measured,
                                     run.engine))
    return out


def _check_same(points: Sequence[MeasuredPoint], allow_mixed: bool) -> tuple[str, str, str]:
    gpus = {canonical_gpu(p.spec.hardware.gpu) for p in points}
    if len(gpus) > 1:
        raise SpecError(f"calibrate: the runs are on different GPUs ({', '.join(sorted(gpus))}); a profile "
                        "is for one GPU: calibrate each GPU's runs separately")
    models = {p.spec.model.name or p.spec.model.config_path or "" for p in points}
    engines = {p.spec.engine.name for p in points}
    if (len(models) > 1 or len(engines) > 1) and not allow_mixed:
        raise SpecError(f"calibrate: the runs mix models ({', '.join(sorted(models))}) or engines "
                        f"({', '.join(sorted(engines))}); pass --allow-mixed to fit one profile to them all")
    return gpus.pop(), "+".join(sorted(engines)), "+".join(sorted(models))


def predict_point(point: MeasuredPoint, constants: dict[str, float],
                  max_requests: int | None = None) -> dict[str, float]:
    """The simulator's mean TTFT, mean TPOT and output tokens/s for a point under `constants`."""
    inputs = plan_inputs(point.spec)
    inputs = replace(inputs, gpu=with_constants(inputs.gpu, constants))
    n = point.num_requests or None
    if n and max_requests:
        n = min(n, max_requests)
    sp = simulate_point(point.spec, inputs, point.layout, point.rate, num_requests=n)
    m = sp.result.metrics.to_dict()
    return {name: float(v) for name, read in METRICS
            if (v := read(m, sp.result.records)) is not None and math.isfinite(float(v))}


def with_constants(gpu: GPUSpec, constants: dict[str, float]) -> GPUSpec:
    unknown = set(constants) - set(FITTABLE)
    if unknown:
        raise SpecError(f"calibrate: cannot fit {sorted(unknown)[0]!r}; fittable: {', '.join(FITTABLE)}")
    out = gpu
    for name, value in constants.items():
        out = replace(out, **{name: float(value)})  # type: ignore[arg-type]  # names checked above
    return out


def _residuals(points: Sequence[MeasuredPoint], preds: Sequence[dict[str, float]],
               metrics: Sequence[str]) -> np.ndarray[Any, Any]:
    out = []
    for p, pred in zip(points, preds, strict=True):
        for name in metrics:
            if name in p.measured:
                value = pred.get(name)
                # A metric the prediction lacks (no request finished) counts as far off, not as perfect.
                out.append(math.log(value / p.measured[name]) if value and value > 0 else math.log(100.0))
    return np.asarray(out, dtype=np.float64)


def fit(points: Sequence[MeasuredPoint], *, constants: Sequence[str] | None = None,
        allow_mixed: bool = False, max_requests: int | None = None, max_iterations: int = 12,
        metrics: Sequence[str] | None = None, progress: Callable[[str], None] | None = None) -> Calibration:
    """Fit `constants` (default: DEFAULT_CONSTANTS, + MOE_CONSTANTS for MoE models) to the points'
    `metrics` (default: every one in METRICS)."""
    known = [name for name, _ in METRICS]
    use = list(metrics or known)
    for name in use:
        if name not in known:
            raise SpecError(f"calibrate: unknown metric {name!r}; known: {', '.join(known)}")
    if len(points) < 2:
        raise SpecError(f"calibrate: {len(points)} measured open-loop point(s); need at least 2 (two load "
                        "points or two layouts) to fit anything")
    gpu_name, engine, model = _check_same(points, allow_mixed)
    base_inputs = plan_inputs(points[0].spec)
    names = list(constants or DEFAULT_CONSTANTS)
    if constants is None and base_inputs.cfg.is_moe:
        names += list(MOE_CONSTANTS)
    if constants is None and "ttft_mean_ms" in use:
        names += list(TTFT_CONSTANTS)
    for n in names:
        if n not in FITTABLE:
            raise SpecError(f"calibrate: cannot fit {n!r}; fittable: {', '.join(FITTABLE)}")
    observations = sum(1 for p in points for name in use if name in p.measured)
    if observations < len(names) + 1:
        raise SpecError(f"calibrate: {observations} measured values for {len(names)} constants; measure more "
                        "load points or layouts")
    gpu = base_inputs.gpu
    start = {n: float(getattr(gpu, n)) for n in names}
    unset = any(start[n] < _BOUNDS[n][0] for n in names)  # then the fit starts elsewhere
    before: list[dict[str, float]] = [predict_point(p, start, max_requests) for p in points] if unset else []

    def residuals(c: dict[str, float]) -> np.ndarray[Any, Any]:
        preds = [predict_point(p, c, max_requests) for p in points]
        if not before:
            before.extend(preds)
        return _residuals(points, preds, use)

    result = fit_constants(residuals, start, max_iterations=max_iterations, progress=progress)
    fitted, iterations, evaluations = result.fitted, result.iterations, result.evaluations
    after = [predict_point(p, fitted, max_requests) for p in points]
    errors = tuple(PointError(p.name, p.measured, b, a)
                   for p, b, a in zip(points, before, after, strict=True))
    return Calibration(gpu_name, engine, model, start, fitted, errors, iterations, evaluations, tuple(use),
                       result.unconstrained)


@dataclass(frozen=True)
class FitResult:
    fitted: dict[str, float]
    iterations: int
    evaluations: int  # calls of the residual function
    unconstrained: tuple[str, ...]  # kept at their start: the residuals do not move them
    cost: float  # final sum of squared residuals (prior included)


def fit_constants(residuals: Callable[[dict[str, float]], np.ndarray[Any, Any]], start: dict[str, float],
                  *, max_iterations: int = 12,
                  progress: Callable[[str], None] | None = None) -> FitResult:
    """Levenberg-Marquardt over the logs of `start`'s constants, within _BOUNDS, minimising the sum of
    squares of `residuals(constants)` (log errors) plus a weak pull toward `start`. A constant unset
    in `start` (below its bound: 0) starts at _START_IF_UNSET and is not pulled anywhere."""
    names = list(start)
    lo = np.log([_BOUNDS[n][0] for n in names])
    hi = np.log([_BOUNDS[n][1] for n in names])
    evaluations = 0

    def consts(theta: np.ndarray[Any, Any]) -> dict[str, float]:
        return {n: float(math.exp(t)) for n, t in zip(names, theta, strict=True)}

    theta = np.clip(np.log([start[n] if start[n] >= _BOUNDS[n][0] else _START_IF_UNSET.get(n, _BOUNDS[n][0])
                            for n in names]), lo, hi)
    theta0 = theta.copy()
    pulled = np.array([start[n] >= _BOUNDS[n][0] for n in names], dtype=np.float64)

    def full(th: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        nonlocal evaluations
        evaluations += 1
        # A weak pull toward the starting guesses keeps a constant the points cannot see (an
        # efficiency of a 2 MB model) where it was instead of drifting to a bound.
        return np.concatenate([residuals(consts(th)), PRIOR_WEIGHT * pulled * (th - theta0)])

    r = full(theta)
    cost = float(r @ r)
    damping, h, iterations = 1e-2, 0.1, 0
    n_data = len(r) - len(names)
    active = np.ones(len(names), dtype=bool)
    for iterations in range(1, max_iterations + 1):
        jac = np.zeros((len(r), len(names)))
        for j in np.flatnonzero(active):
            step = np.zeros(len(names))
            # Step inward at an upper bound, so the difference stays inside the box.
            step[j] = -h if theta[j] + h > hi[j] else h
            jac[:, j] = (full(theta + step) - r) / step[j]
        if iterations == 1:
            # A constant whose factor-e change moves the predictions by under ~1% is not fitted.
            active &= np.linalg.norm(jac[:n_data], axis=0) >= UNSEEN_SENSITIVITY
            if not active.any():
                break
        cols = np.flatnonzero(active)
        improved = False
        for _ in range(6):
            a = jac[:, cols].T @ jac[:, cols]
            a += damping * np.diag(np.diag(a) + 1e-9)
            delta = np.zeros(len(names))
            delta[cols] = np.linalg.solve(a, -jac[:, cols].T @ r)
            trial = np.clip(theta + delta, lo, hi)
            r_trial = full(trial)
            c_trial = float(r_trial @ r_trial)
            if c_trial < cost:
                theta, r, improved = trial, r_trial, cost - c_trial > 1e-6 * max(cost, 1e-12)
                cost = c_trial
                damping = max(damping / 3, 1e-6)
                break
            damping *= 4
        if progress is not None:
            progress(f"iteration {iterations}: {_fmt(consts(theta))}, squared log error {cost:.4g}")
        if not improved or cost < 1e-8:
            break
    unseen = tuple(n for n, a in zip(names, active, strict=True) if not a)
    return FitResult(consts(theta), iterations, evaluations, unseen, cost)


def _fmt(c: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in c.items())


def profile_extra(cal: Calibration, run_ids: Sequence[str]) -> dict[str, Any]:
    """What a profile file records beside its constants: where they came from and how well they fit."""
    def rounded(d: dict[str, float]) -> dict[str, float]:
        return {k: float(f"{v:.6g}") for k, v in d.items()}

    return {
        "model": cal.model,
        "fitted_from": list(run_ids),
        "fitted_metrics": list(cal.metrics),
        "unconstrained": list(cal.unconstrained),
        "started_from": rounded(cal.start),
        "fit": {
            "median_abs_error_before": cal.median_abs_error("before"),
            "median_abs_error_after": cal.median_abs_error("after"),
            "points": [{"point": p.point, "measured": rounded(p.measured), "before": rounded(p.before),
                        "after": rounded(p.after)} for p in cal.points],
        },
    }
