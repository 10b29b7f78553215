"""How one load point is measured with confidence: measured again when it could not be judged, and
repeated when its verdict is close to the SLO, deciding on the pooled records.

- Unjudged ("unreliable": the served simulation lost its clock): measured once more; if that one
  is unjudged too, the point stays unjudged (the capacity search treats it as unknown).
- Close (slo_margin 'close': the interval of an SLO percentile straddles its bound, so the
  verdict could go either way under noise): measured again up to REPEATS_WHEN_CLOSE more times, each
  time with the next workload seed (seed + k: other prompts, lengths and arrival times, so that in
  virtual time, where one seed always gives the same answer, the repeat is informative; served, it
  is another run as well). The verdict, metrics and intervals are then those of the pooled records,
  and it stops early once the pooled verdict is no longer close.

Pooling lays the repeats end to end: each repeat after the first keeps the requests sent inside
its own measurement window (its warm-up is dropped) and is shifted in time so that its window starts
where the previous one's ended (the last send: loadgen.window.measurement_window), so the pooled
window is the sum of the windows and the one metric code (loadgen.metrics) computes throughput,
goodput and percentiles over all of them unchanged. (An earlier run's drain then streams into the
next one's start, where the next one's own dropped warm-up would have been streaming.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from orchestrator.loadgen.bench import PointResult
from orchestrator.loadgen.intervals import straddled_bounds
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.search import verdict
from orchestrator.loadgen.spec_workload import slo_bounds
from orchestrator.loadgen.window import measurement_window, point_warmup_s
from orchestrator.spec.models import SweepSpec

#: extra measurements of a point whose verdict is close to the SLO (so at most 1 + 2 in all)
REPEATS_WHEN_CLOSE = 2
#: measured when the first try could not be judged
REMEASURE_WHEN_UNJUDGED = 1

#: (try number k, 0 first) -> the point measured with workload seed + k, and what to store beside it
TryFn = Callable[[int], tuple[PointResult, dict[str, Any]]]


def unjudged(result: PointResult) -> bool:
    return not result.judgement.judged


def reseeded(spec: SweepSpec, k: int) -> SweepSpec:
    """The spec with workload seed + k (k = 0: the spec itself)."""
    if k == 0:
        return spec
    w = spec.workload
    return spec.model_copy(update={"workload": w.model_copy(update={"seed": (w.seed + k) % 2**63})})


def _shifted(r: RequestRecord, dt: float, k: int) -> RequestRecord:
    return replace(
        r,
        request_id=f"{r.request_id}#{k}",  # ids repeat across seeds; the store keeps them apart
        scheduled_s=r.scheduled_s + dt,
        sent_s=r.sent_s + dt,
        done_s=None if r.done_s is None else r.done_s + dt,
        chunk_times_s=tuple(t + dt for t in r.chunk_times_s),
        # a session's turns are grouped by this tag (loadgen.metrics): each run's sessions are their own
        extra={**r.extra, "session": f"{r.extra['session']}#{k}"} if "session" in r.extra else r.extra,
    )


def pooled_records(
    runs: Sequence[Sequence[RequestRecord]], warmup_s: float, concurrency: int | None = None
) -> list[RequestRecord]:
    """The runs' records end to end (module docstring): each run's measurement window starts where the
    previous one's ended (its last send), so the pooled window is the sum of the windows and holds
    each run's own requests; a later run's warm-up, and the last send that closes an earlier run's
    window, are left out. Each run's warm-up is loadgen.window.point_warmup_s (a closed loop's
    default: past its own first wave)."""
    kept = [list(recs) for recs in runs if recs]
    if not kept:
        return []
    out: list[RequestRecord] = []
    end = 0.0
    for k, recs in enumerate(kept):
        w = measurement_window(recs, point_warmup_s(recs, warmup_s, concurrency))
        dt = 0.0 if k == 0 else end - w.start_s
        last = k == len(kept) - 1
        chosen = [r for r in recs if (k == 0 or r.sent_s >= w.start_s) and (last or r.sent_s < w.end_s)]
        out.extend(r if k == 0 else _shifted(r, dt, k) for r in chosen)
        end = w.end_s + dt
    return out


def pooled_result(results: Sequence[PointResult], spec: SweepSpec, gpus: int) -> PointResult:
    """One PointResult over the pooled records, measured and judged as every point is."""
    concurrency = results[0].point.concurrency
    records = pooled_records([r.records for r in results], spec.workload.warmup_s, concurrency)
    slo = slo_bounds(spec.slo)
    # Over the pooled records, as pipeline/points.judge computes the intervals of this result: a closed
    # loop with fewer than three requests per client in one run but enough in the pool would otherwise
    # be measured from 0 s and judged after its first wave.
    warmup_s = point_warmup_s(records, spec.workload.warmup_s, concurrency)
    m = compute_metrics(records, warmup_s=warmup_s, gpus=gpus, slo=slo)
    why = verdict(m, slo, spec.slo.max_error_rate) if slo else None
    return PointResult(results[0].point, m, tuple(records), why)


def measure_point(
    try_fn: TryFn,
    judge: Callable[[PointResult], dict[str, Any]],
    spec: SweepSpec,
    gpus: int,
    phase: Callable[[str], None],
) -> tuple[PointResult, dict[str, Any], dict[str, Any]]:
    """(result, what to store beside it, its judgement: intervals and slo_margin); module docstring."""
    k = 0
    result, extra = try_fn(k)
    notes: dict[str, Any] = {}
    if unjudged(result):
        first = result.verdict or ""
        for _ in range(REMEASURE_WHEN_UNJUDGED):
            k += 1
            phase(f"again ({first[:40]}...)")
            result, extra = try_fn(k)
            if not unjudged(result):
                break
        notes["remeasured_because"] = first
    judged = judge(result)
    if unjudged(result) or judged.get("slo_margin") != "close":
        return result, {**extra, **notes}, judged
    slo = slo_bounds(spec.slo)
    because = "; ".join(straddled_bounds(judged["intervals"], slo))
    kept, seeds, skipped = [result], [spec.workload.seed + k], 0
    for i in range(REPEATS_WHEN_CLOSE):
        k += 1
        phase(f"repeat {i + 1}/{REPEATS_WHEN_CLOSE} (close to the SLO: {because[:40]})")
        again, extra_k = try_fn(k)
        if unjudged(again):
            skipped += 1  # not pooled: its records are not a measurement of the layout
            continue
        kept.append(again)
        seeds.append(spec.workload.seed + k)
        extra = extra_k  # the engine's view and the prediction of the last repeat
        result = pooled_result(kept, spec, gpus)
        judged = judge(result)
        if judged.get("slo_margin") != "close":
            break
    extra = {
        **extra,
        **notes,
        "repeated": {
            "measurements": len(kept),
            "because": f"close to the SLO: {because}",
            "workload_seeds": seeds,
            "unjudged_repeats": skipped,
            "margin_after": judged.get("slo_margin"),
            "rule": f"up to {REPEATS_WHEN_CLOSE} repeats while an SLO interval straddles its bound; "
            "verdict on the pooled records",
        },
    }
    return result, extra, judged
