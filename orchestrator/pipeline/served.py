"""The measure step: one load point against served OpenAI endpoints over HTTP (vLLM, SGLang, or the
simulated engine's server with `orch sweep --served`), with the engines' /metrics scraped meanwhile.
`bench_point` is the one function; `LocalBench` runs it in this process for the serve step's
clients, and pipeline/loadgen_proc.py runs it in a process of its own (side by side)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from orchestrator.disagg import AnyLayout
from orchestrator.loadgen.bench import BenchConfig, BenchRun, LoadPoint, PointResult, run_point
from orchestrator.loadgen.client import ClientConfig
from orchestrator.loadgen.engine_metrics import DEFAULT_INTERVAL_S, series_to_dict, with_engine_metrics
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.spec_workload import slo_bounds, spec_workload_factory
from orchestrator.pipeline.harness import read_counters, unreliable_because
from orchestrator.pipeline.repeats import reseeded
from orchestrator.pipeline.timescale import unscale
from orchestrator.plan.from_spec import engine_settings
from orchestrator.spec.models import SweepSpec


class Observer(Protocol):
    def point_start(self, layout: str, label: str, total: int | None) -> None: ...

    def begin(self, label: str, total: int | None) -> None: ...

    def append(self, rec: RequestRecord, /) -> None: ...


@dataclass(frozen=True)
class _Relabelled:
    """The wall-clock point's progress under the point's own label: a simulated server at time scale s
    is sent s times the rate, and the progress lines must name the point being measured (a 2/s point
    at scale 0.5 read "rate=4/s" before)."""

    inner: Observer
    label: str

    def begin(self, label: str, total: int | None) -> None:
        self.inner.begin(self.label, total)

    def append(self, rec: RequestRecord, /) -> None:
        self.inner.append(rec)


def bench_point(
    spec: SweepSpec,
    obs: Observer,
    clients: tuple[ClientConfig, ...],
    layout: AnyLayout,
    point: LoadPoint,
    num_requests: int | None,
    scale: float,
    engine_metrics_interval_s: float = DEFAULT_INTERVAL_S,
    engines: Sequence[tuple[str, str]] = (),
) -> tuple[PointResult, dict[str, Any]]:
    """One load point over HTTP, with the engines' /metrics scraped meanwhile (the series is the
    second result). A simulated server at time scale s gets s times the rate and its records are
    mapped back to simulated seconds (a closed loop keeps its concurrency); its clock is checked
    (harness.py) before judging. `engines`: (OpenAI base URL, role) of the servers to scrape when
    they are not the clients' (a prefill/decode pair's pools behind its router), by pool."""
    w, s = spec.workload, scale
    slo = slo_bounds(spec.slo)
    n = num_requests or w.num_requests
    duration = None if num_requests else w.duration_s
    wall = BenchConfig(
        targets=clients,
        balance=spec.routing_policies()[0],  # a spec comparing policies is split per policy first
        arrival=w.arrival,
        burstiness=w.burstiness,
        num_requests=n,
        duration_s=None if duration is None else duration * s,
        max_concurrency=w.max_concurrency,
        seed=w.seed,
        gpus=layout.gpus,
    )
    obs.point_start(str(layout), point.label, n)
    urls = [url for url, _ in engines] or [c.base_url for c in clients]
    roles = [role for _, role in engines if role in ("prefill", "decode")]
    # A simulated server reports how it kept its clock (orch_sim_*); a real engine has no such counters.
    before = read_counters(urls)
    wall_point = point if point.rate is None else LoadPoint(rate=point.rate / s)
    # sessions are cut where the engines' resolved max_model_len ends (engines/settings.py)
    factory = spec_workload_factory(spec, engine_settings(spec).max_model_len)
    work = run_point(BenchRun(wall), factory, wall_point, _Relabelled(obs, point.label))
    interval_wall_s = engine_metrics_interval_s * s
    raw, poller = asyncio.run(with_engine_metrics(work, urls, interval_wall_s))
    series = series_to_dict(poller.samples, interval_wall_s, s,
                            roles=roles if len(roles) == len(urls) else ())
    records = unscale(raw.records, s)
    measure = replace(
        wall,
        duration_s=duration,
        warmup_s=w.warmup_s,
        slo=slo,
        max_error_rate=spec.slo.max_error_rate,
    )
    result = BenchRun(measure).measure(point, records)
    bounds = list(slo.values()) if slo else []
    why = unreliable_because(read_counters(urls) - before, s, min(bounds) if bounds else None)
    if why is not None:
        result = replace(result, verdict=why)  # not a verdict on the layout: it never passes
    return result, series


@dataclass(frozen=True)
class LocalBench:
    """`bench_point` in this process, for one served candidate's clients (pipeline/points.Bench)."""

    spec: SweepSpec
    obs: Observer
    clients: tuple[ClientConfig, ...]
    layout: AnyLayout
    scale: float
    engine_metrics_interval_s: float = DEFAULT_INTERVAL_S
    engines: tuple[tuple[str, str], ...] = ()  # (OpenAI base URL, role) scraped instead of the clients'

    def point(self, point: LoadPoint, num_requests: int | None, k: int) -> tuple[PointResult, dict[str, Any]]:
        """Try k of the point: measured with workload seed + k (pipeline/repeats.py)."""
        return bench_point(reseeded(self.spec, k), self.obs, self.clients, self.layout, point, num_requests,
                           self.scale, self.engine_metrics_interval_s, self.engines)

