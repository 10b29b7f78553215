"""`orch bench` as a library: run load points (rates, concurrencies or a rate search) and measure each.

A load point is an open-loop rate (arrivals from `arrival_offsets`), a closed-loop concurrency, or a
trace's own arrival times. Each ends after `num_requests` or `duration_s` (whichever comes first) and
is measured by `compute_metrics` with the warm-up and cool-down windows excluded. Every record is kept.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from orchestrator.loadgen.balance import Balance
from orchestrator.loadgen.client import (
    Arrival,
    ClientConfig,
    RequestSpec,
    arrival_offsets,
    run_closed_loop,
    run_open_loop,
)
from orchestrator.loadgen.metrics import Metrics, compute_metrics
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.search import SearchPoint, search_rate, verdict
from orchestrator.loadgen.session_runner import run_sessions
from orchestrator.loadgen.window import point_warmup_s
from orchestrator.loadgen.workloads import Workload
from orchestrator.verdict import Verdict

#: Builds a workload of (at least) n requests; a trace ignores n and returns its own requests.
WorkloadFactory = Callable[[int], Workload]
CLOSED_LOOP_SPECS = 1000  # distinct requests a duration-limited closed loop cycles through


@dataclass(frozen=True)
class LoadPoint:
    rate: float | None = None  # open loop, requests/s (inf: all at once)
    concurrency: int | None = None  # closed loop
    trace: bool = False  # the workload's own arrival offsets

    @property
    def label(self) -> str:
        if self.trace:
            return "trace"
        if self.concurrency is not None:
            return f"concurrency={self.concurrency}"
        return f"rate={self.rate:g}/s"


@dataclass(frozen=True)
class BenchConfig:
    targets: tuple[ClientConfig, ...]
    balance: Balance = "round_robin"
    arrival: Arrival = "poisson"
    burstiness: float = 1.0
    num_requests: int | None = None
    duration_s: float | None = None
    max_concurrency: int | None = None
    warmup_s: float = 0.0
    cooldown_s: float = 0.0
    seed: int = 0
    slo: dict[str, float] = field(default_factory=dict)
    max_error_rate: float = 0.01
    gpus: int | None = None
    workers: int = 1  # open-loop sender processes (orchestrator.loadgen.workers)

    def __post_init__(self) -> None:
        if not self.targets:
            raise ValueError("need at least one endpoint")
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("give num_requests or duration_s")


@dataclass(frozen=True)
class PointResult:
    point: LoadPoint
    metrics: Metrics
    records: tuple[RequestRecord, ...]
    verdict: str | None  # None without an SLO; "" when the point passes; else why it failed
    interrupted: bool = False
    note: str | None = None  # what the workload left out (sessions cut at max_model_len, trace rows)

    @property
    def passed(self) -> bool | None:
        return None if self.verdict is None else not self.verdict

    @property
    def judgement(self) -> Verdict:
        """The verdict as a value: passed, failed, or unjudged (orchestrator/verdict.py)."""
        return Verdict.of(self.passed, self.verdict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.point.label,
            "rate": self.point.rate,
            "concurrency": self.point.concurrency,
            "passed": self.passed,
            "verdict": self.verdict,
            "interrupted": self.interrupted,
            "note": self.note,
            "metrics": self.metrics.to_dict(),
        }


class Progress(Protocol):
    """Told when a load point starts (total None when only a duration bounds it) and each record."""

    def begin(self, label: str, total: int | None) -> None: ...

    def append(self, rec: RequestRecord, /) -> None: ...


@dataclass
class BenchRun:
    """Mutable state of a run, so that an interrupted run (Ctrl-C) still reports what was measured."""

    config: BenchConfig
    points: list[PointResult] = field(default_factory=list)
    current: list[RequestRecord] = field(default_factory=list)
    current_point: LoadPoint | None = None
    search_stopped_because: str | None = None
    best_rate: float | None = None

    def measure(
        self, point: LoadPoint, records: Sequence[RequestRecord], interrupted: bool = False
    ) -> PointResult:
        c = self.config
        warmup = point_warmup_s(records, c.warmup_s, point.concurrency)
        m = compute_metrics(records, warmup_s=warmup, cooldown_s=c.cooldown_s, gpus=c.gpus, slo=c.slo)
        why = verdict(m, c.slo, c.max_error_rate) if c.slo else None
        return PointResult(point, m, tuple(records), why, interrupted)

    def partial(self) -> PointResult | None:
        """The load point in progress, measured over the records it completed."""
        if self.current_point is None or not self.current:
            return None
        return self.measure(self.current_point, list(self.current), interrupted=True)

    def to_dict(self) -> dict[str, Any]:
        c = self.config
        cfg = {k: v for k, v in asdict(c).items() if k != "targets"}
        cfg["targets"] = [t.url for t in c.targets]
        out: dict[str, Any] = {"config": cfg, "points": [p.to_dict() for p in self.points]}
        if self.search_stopped_because is not None:
            out["search"] = {"best_rate": self.best_rate, "stopped_because": self.search_stopped_because}
        return out


class _Tee:
    def __init__(self, keep: list[RequestRecord], progress: Progress | None) -> None:
        self.keep, self.progress = keep, progress

    def append(self, rec: RequestRecord, /) -> None:
        self.keep.append(rec)
        if self.progress is not None:
            self.progress.append(rec)


async def _open_loop(
    c: BenchConfig, specs: list[RequestSpec], offsets: list[float], sink: _Tee
) -> list[RequestRecord]:
    if c.workers == 1:
        return await run_open_loop(list(c.targets), specs, offsets, c.max_concurrency, sink=sink,
                                   balance=c.balance)
    from orchestrator.loadgen.workers import run_open_loop_workers  # multiprocessing: only when asked

    recs = await asyncio.to_thread(run_open_loop_workers, list(c.targets), specs, offsets, c.workers,
                                   c.max_concurrency, c.balance)
    for r in recs:  # worker processes report at their end
        sink.append(r)
    return recs


async def run_point(
    run: BenchRun, workload_for: WorkloadFactory, point: LoadPoint, progress: Progress | None = None
) -> PointResult:
    """Run one load point and measure it; the result is also appended to run.points.

    Before the point, everything alive is collected once and frozen (gc.freeze): a full collection
    of a large heap (transformers imported: about 350k objects) stalls the event loop for 100 ms or
    more, which would show up as late chunks. Objects made during the point are still collected.
    """
    gc.collect()
    gc.freeze()
    try:
        return await _run_point(run, workload_for, point, progress)
    finally:
        gc.unfreeze()


async def _run_point(
    run: BenchRun, workload_for: WorkloadFactory, point: LoadPoint, progress: Progress | None
) -> PointResult:
    c = run.config
    run.current, run.current_point = [], point
    sink = _Tee(run.current, progress)
    note: str | None = None
    if point.trace:
        wl = workload_for(c.num_requests or 0)
        note = wl.note
        if wl.offsets_s is None:
            raise ValueError("a trace load point needs a workload with arrival offsets")
        specs, offsets = list(wl.specs), list(wl.offsets_s)
        if c.duration_s is not None:
            keep = [i for i, t in enumerate(offsets) if t < c.duration_s]
            specs, offsets = [specs[i] for i in keep], [offsets[i] for i in keep]
        if c.num_requests is not None:
            specs, offsets = specs[: c.num_requests], offsets[: c.num_requests]
        if progress is not None:
            progress.begin(point.label, len(specs))
        recs = await _open_loop(c, specs, offsets, sink)
    elif point.concurrency is not None:
        n = c.num_requests or CLOSED_LOOP_SPECS
        if progress is not None:
            progress.begin(point.label, c.num_requests if c.duration_s is None else None)
        wl = workload_for(n)
        note = wl.note
        if wl.sessions is not None:  # concurrency counts sessions in flight
            ran = await run_sessions(list(c.targets), wl.sessions.plans[:n], concurrency=point.concurrency,
                                     duration_s=c.duration_s, balance=c.balance, texts=wl.texts, sink=sink,
                                     extra_body=wl.extra_body)
            recs = ran.records
        else:
            recs = await run_closed_loop(list(c.targets), list(wl.specs[:n]), point.concurrency,
                                         sink=sink, balance=c.balance, duration_s=c.duration_s)
            if c.num_requests is not None and c.duration_s is not None:
                recs = recs[: c.num_requests]
    else:
        rate = point.rate if point.rate is not None else math.inf
        if math.isinf(rate) and c.num_requests is None:
            raise ValueError("an infinite rate needs num_requests")
        duration = None if math.isinf(rate) else c.duration_s
        offsets = arrival_offsets(c.num_requests, rate, c.arrival, c.burstiness, c.seed, duration)
        wl = workload_for(len(offsets))
        note = wl.note
        if wl.sessions is not None:  # the rate is of sessions; their later turns follow the answers
            plans = wl.sessions.plans[: len(offsets)]
            if progress is not None:
                progress.begin(point.label, sum(p.calls for p in plans))
            ran = await run_sessions(list(c.targets), plans, starts=offsets[: len(plans)],
                                     duration_s=duration, balance=c.balance, texts=wl.texts, sink=sink,
                                     extra_body=wl.extra_body)
            recs = ran.records
        else:
            specs = list(wl.specs[: len(offsets)])
            if progress is not None:
                progress.begin(point.label, len(offsets))
            recs = await _open_loop(c, specs, offsets, sink)
    result = replace(run.measure(point, recs), note=note)
    run.points.append(result)
    run.current, run.current_point = [], None
    return result


async def run_bench(
    run: BenchRun,
    workload_for: WorkloadFactory,
    points: Sequence[LoadPoint] = (),
    *,
    search: bool = False,
    start_rate: float = 1.0,
    max_rate: float = 1e6,
    rel_tol: float = 0.05,
    max_runs: int = 16,
    progress: Progress | None = None,
    on_search_point: Callable[[SearchPoint], None] | None = None,
) -> BenchRun:
    """Run each load point in order, or search for the highest rate meeting run.config.slo."""
    if not search:
        for p in points:
            await run_point(run, workload_for, p, progress)
        return run

    async def at_rate(rate: float) -> Metrics:
        return (await run_point(run, workload_for, LoadPoint(rate=rate), progress)).metrics

    res = await search_rate(at_rate, run.config.slo, start_rate=start_rate, max_rate=max_rate,
                            min_rate=min(start_rate, 0.01 * start_rate), rel_tol=rel_tol, max_runs=max_runs,
                            max_error_rate=run.config.max_error_rate, on_point=on_search_point)
    run.best_rate, run.search_stopped_because = res.best_rate, res.stopped_because
    return run


def save_records(path: str | Path, points: Sequence[PointResult]) -> int:
    """Every RequestRecord as one JSON line, with the load point's label; returns the count."""
    n = 0
    with Path(path).open("w", encoding="utf-8") as f:
        for p in points:
            for r in p.records:
                f.write(json.dumps({"point": p.point.label, **asdict(r)}) + "\n")
                n += 1
    return n
