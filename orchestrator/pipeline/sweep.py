"""`orch sweep` without the printing: per layout plan -> compile -> deploy -> warm up -> bench each load
point -> tear down -> store; then select. Results are committed after every load point, so a sweep
interrupted at any moment resumes with `--resume RUN_ID` and loses nothing already measured."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from orchestrator.deploy.base import deployed, free_base_port
from orchestrator.deploy.targets import make_target, preflight, probe_host
from orchestrator.engines import get_engine
from orchestrator.engines.base import secret_values
from orchestrator.engines.from_spec import engine_options, placement, secret_env
from orchestrator.engines.sim import sim_args_from_spec
from orchestrator.errors import DeployError, OrchError, StoreError
from orchestrator.layout import Layout
from orchestrator.loadgen.bench import BenchConfig, BenchRun, LoadPoint, PointResult, run_point
from orchestrator.loadgen.client import ClientConfig, RequestSpec, run_open_loop
from orchestrator.loadgen.engine_metrics import (
    DEFAULT_INTERVAL_S,
    series_to_dict,
    summarize_series,
    with_engine_metrics,
)
from orchestrator.loadgen.metrics import finite
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.spec_workload import slo_bounds, workload_factory
from orchestrator.pipeline.harness import read_counters, unreliable_because
from orchestrator.pipeline.predict import predicted_metrics
from orchestrator.pipeline.provenance import hardware_seen, model_config_hash, new_run_id, orch_version
from orchestrator.pipeline.timescale import unscale
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.plan.planner import PlanRow, plan_layout
from orchestrator.plan.run import itl_bound_ms
from orchestrator.selection import LayoutOutcome, PointOutcome, Selection, select
from orchestrator.spec.load import spec_hash
from orchestrator.spec.models import KubernetesTarget, SweepSpec
from orchestrator.store.db import Store
from orchestrator.store.run_ids import checked_run_id

DEFAULT_READY_TIMEOUT_S = 900.0
WARMUP_MAX_TOKENS = 8


class Observer(Protocol):
    """Told what the sweep is doing, for progress displays; `begin`/`append` are the bench runner's
    per-request progress (loadgen.bench.Progress)."""

    def phase(self, layout: str, phase: str) -> None: ...

    def point_start(self, layout: str, label: str, total: int | None) -> None: ...

    def begin(self, label: str, total: int | None) -> None: ...

    def append(self, rec: RequestRecord, /) -> None: ...

    def point_done(self, layout: str, result: PointResult) -> None: ...

    def layout_done(self, layout: str, status: str, reason: str | None) -> None: ...


@dataclass(frozen=True)
class SweepOptions:
    layouts: tuple[Layout, ...] | None = None
    rates: tuple[float, ...] | None = None
    num_requests: int | None = None
    force: bool = False
    workdir: str | None = None
    ready_timeout_s: float | None = None
    engine_metrics_interval_s: float = DEFAULT_INTERVAL_S  # /metrics scrapes, in measured (simulated) time


@dataclass(frozen=True)
class SweepResult:
    run_id: str
    selection: Selection
    outcomes: tuple[LayoutOutcome, ...]


def point_outcome(
    label: str,
    rate: float | None,
    passed: bool | None,
    verdict: str | None,
    metrics: dict[str, Any],
    gpus: int,
) -> PointOutcome:
    per_gpu = metrics.get("per_gpu") or {}
    goodput = metrics.get("goodput")
    return PointOutcome(
        label=label,
        rate=rate,
        passed=bool(passed),
        verdict=verdict or "",
        goodput_per_gpu=(goodput or 0.0) / gpus
        if goodput is not None
        else per_gpu.get("request_throughput", 0.0),
        output_tokens_per_s_per_gpu=per_gpu.get("output_throughput", 0.0),
        ttft_p99_ms=(metrics.get("ttft_ms") or {}).get("p99"),
        itl_p99_ms=(metrics.get("itl_chunk_ms") or {}).get("p99"),
    )


class Sweep:
    def __init__(
        self,
        spec: SweepSpec,
        store: Store,
        observer: Observer,
        *,
        spec_path: str | None = None,
        options: SweepOptions | None = None,
        run_id: str | None = None,
    ) -> None:
        self.spec, self.store, self.obs = spec, store, observer
        self.opts = options or SweepOptions()
        self.spec_path = spec_path
        self.resuming = run_id is not None
        self.run_id = checked_run_id(run_id or new_run_id())  # it names the work directory
        preflight(spec.target)
        if not isinstance(spec.target, KubernetesTarget):
            # Every secret the engines need must be in orch's environment before anything starts; the
            # values are read again at deploy time and never kept. (On Kubernetes the pods read them
            # from their Secrets.)
            secret_values(secret_env(spec), os.environ)
        self.engine = get_engine(spec.engine.name)
        self.inputs = plan_inputs(spec)
        self.scale = spec.engine.time_scale if spec.engine.name == "sim" else 1.0
        base = self.opts.workdir or getattr(spec.target, "workdir", None) or tempfile.mkdtemp(prefix="orch-")
        self.workdir = Path(base) / self.run_id
        self.engine_series: dict[str, Any] = {}  # the last load point's scraped /metrics

    # -- run ------------------------------------------------------------------------------------
    def run(self) -> SweepResult:
        spec = self.spec
        self.store.journal_run(self.run_id)  # every write of this run reaches a journal first
        if not self.resuming:
            self.store.create_run(
                run_id=self.run_id,
                spec_path=self.spec_path,
                spec_json=spec.model_dump(mode="json"),
                spec_hash=spec_hash(spec),
                engine=spec.engine.name,
                engine_version=spec.engine.version
                or (f"orch-sim {orch_version()}" if spec.engine.name == "sim" else None),
                model=self.inputs.cfg.name,
                model_config_hash=model_config_hash(self.inputs.cfg),
                orch_version=orch_version(),
                hardware=hardware_seen(),
                metadata=dict(spec.metadata),
            )
        layouts = list(self.opts.layouts or spec.layouts)
        done = {row.layout: row for row in self.store.layouts(self.run_id)}
        try:
            for layout in layouts:
                prior = done.get(str(layout))
                if prior is not None and prior.status in ("rejected", "failed", "measured"):
                    continue
                self._one_layout(layout)
        except KeyboardInterrupt:
            self.store.finish_run(self.run_id, "interrupted", None)
            raise
        result = self.result([str(x) for x in layouts])
        self.store.finish_run(self.run_id, "done", result.selection.to_dict())
        return result

    def result(self, layouts: Sequence[str] | None = None) -> SweepResult:
        outcomes = outcomes_from_store(self.store, self.run_id, layouts)
        return SweepResult(self.run_id, select(outcomes, self.spec.objective), tuple(outcomes))

    def _one_layout(self, layout: Layout) -> None:
        name = str(layout)
        obs, spec = self.obs, self.spec
        obs.phase(name, "plan")
        row = plan_layout(
            self.inputs,
            layout,
            prompt_tokens=_mean(spec.workload.input_tokens),
            context_tokens=_mean(spec.workload.input_tokens) + _mean(spec.workload.output_tokens) // 2,
            itl_bound_ms=itl_bound_ms(spec),
        )
        plan_d = finite(row.to_dict())
        if row.rejected_because and not self.opts.force:
            reason = "; ".join(row.rejected_because)
            self.store.set_layout(self.run_id, name, layout.gpus, "rejected", reason=reason, plan=plan_d)
            obs.layout_done(name, "rejected", reason)
            return
        try:
            self._deploy_and_measure(layout, row, plan_d)
        except StoreError:
            raise  # not the layout's fault: the sweep stops (the journal keeps what was measured)
        except (DeployError, OrchError, OSError) as exc:
            reason = str(exc)
            self.store.set_layout(self.run_id, name, layout.gpus, "failed", reason=reason)
            obs.layout_done(name, "failed", reason.splitlines()[0])
            return
        self.store.set_layout(self.run_id, name, layout.gpus, "measured")
        obs.layout_done(name, "measured", None)

    def _deploy_and_measure(self, layout: Layout, row: PlanRow, plan_d: dict[str, Any]) -> None:
        name, spec, obs = str(layout), self.spec, self.obs
        obs.phase(name, "compile")
        opts = engine_options(spec, extra_env=tuple(sorted(spec.engine.env.items())))
        if spec.engine.name == "sim":
            opts = replace(opts, sim_args=sim_args_from_spec(spec))
        where = placement(spec)
        reasons = self.engine.unsupported(layout, where)
        if reasons:
            raise DeployError(f"{spec.engine.name} cannot run {name}: " + "; ".join(reasons))
        base_port = free_base_port(max(layout.replicas, 1), probe_host(spec.target, where))
        where = replace(where, base_port=base_port)
        launch = self.engine.launch_plan(layout, opts, where)
        self.store.set_layout(self.run_id, name, layout.gpus, "pending", plan=plan_d, launch=launch.to_dict())
        target = make_target(
            spec.target, self.workdir / name, where, run_id=self.run_id, spec_hash=spec_hash(spec)
        )
        obs.phase(name, "deploy")
        timeout = self.opts.ready_timeout_s or spec.engine.startup_s or DEFAULT_READY_TIMEOUT_S
        with deployed(target, launch, timeout) as dep:
            clients = tuple(
                ClientConfig(ep.openai_base_url, opts.served_model_name or opts.model, ignore_eos=True)
                for ep in dep.endpoints
            )
            obs.phase(name, "warm-up")
            asyncio.run(_warm_up(clients))
            measured = {p.label for p in self.store.points(self.run_id, name)}
            for rate in self.opts.rates or spec.workload.rates_per_s:
                point = LoadPoint(rate=rate)
                if point.label in measured:
                    continue
                obs.phase(name, f"bench {point.label}")
                result = self._bench_point(clients, layout, rate)
                target.check_alive(dep)
                metrics = finite(result.metrics.to_dict())
                metrics["predicted"] = finite(
                    predicted_metrics(spec, self.inputs, layout, rate, self.opts.num_requests)
                )
                metrics["engine"] = finite(summarize_series(self.engine_series))
                # The point first: if the store fails, the journal has the measurement itself.
                self.store.add_point(
                    self.run_id, name, point.label, rate, result.passed, result.verdict, metrics,
                    result.records,
                )
                self.store.add_engine_metrics(self.run_id, name, point.label, self.engine_series)
                obs.point_done(name, result)
            obs.phase(name, "teardown")

    def _bench_point(self, clients: tuple[ClientConfig, ...], layout: Layout, rate: float) -> PointResult:
        w, s = self.spec.workload, self.scale
        slo = slo_bounds(self.spec.slo)
        n = self.opts.num_requests or w.num_requests
        duration = None if self.opts.num_requests else w.duration_s
        wall = BenchConfig(
            targets=clients,
            balance="least_outstanding",
            arrival=w.arrival,
            burstiness=w.burstiness,
            num_requests=n,
            duration_s=None if duration is None else duration * s,
            max_concurrency=w.max_concurrency,
            seed=w.seed,
            gpus=layout.gpus,
        )
        label = LoadPoint(rate=rate).label
        self.obs.point_start(str(layout), label, n)
        urls = [c.base_url for c in clients]
        before = read_counters(urls) if self.spec.engine.name == "sim" else None
        work = run_point(BenchRun(wall), workload_factory(w), LoadPoint(rate=rate / s), self.obs)
        interval_wall_s = self.opts.engine_metrics_interval_s * s
        raw, poller = asyncio.run(with_engine_metrics(work, urls, interval_wall_s))
        self.engine_series = series_to_dict(poller.samples, interval_wall_s, s)
        records = unscale(raw.records, s)
        measure = replace(
            wall,
            duration_s=duration,
            warmup_s=w.warmup_s,
            slo=slo,
            max_error_rate=self.spec.slo.max_error_rate,
        )
        result = BenchRun(measure).measure(LoadPoint(rate=rate), records)
        if before is not None:
            bounds = list(slo.values()) if slo else []
            why = unreliable_because(read_counters(urls) - before, s, min(bounds) if bounds else None)
            if why is not None:
                result = replace(result, verdict=why)  # not a verdict on the layout: it never passes
        return result


async def _warm_up(clients: Sequence[ClientConfig]) -> None:
    """One short request per endpoint: first requests after start are slow on real engines."""
    specs = [RequestSpec(f"warmup-{i}", "warm up " * 8, WARMUP_MAX_TOKENS) for i in range(len(clients))]
    recs = await run_open_loop(list(clients), specs, [0.0] * len(specs), balance="round_robin")
    bad = [r.error for r in recs if r.error]
    if bad:
        raise DeployError(f"warm-up request failed: {bad[0]} (the engine is up but does not serve)")


def _mean(value: object) -> int:
    from orchestrator.plan.from_spec import mean_tokens
    from orchestrator.spec.models import TokenDistribution

    assert isinstance(value, int | TokenDistribution)
    return mean_tokens(value)


def outcomes_from_store(
    store: Store, run_id: str, layouts: Sequence[str] | None = None
) -> list[LayoutOutcome]:
    rows = store.layouts(run_id)
    if layouts is not None:
        order = {name: i for i, name in enumerate(layouts)}
        rows = sorted((r for r in rows if r.layout in order), key=lambda r: order[r.layout])
    out = []
    for r in rows:
        points = tuple(
            point_outcome(p.label, p.rate, p.passed, p.verdict, p.metrics, r.gpus)
            for p in store.points(run_id, r.layout)
        )
        status = r.status if r.status in ("rejected", "failed", "measured") else "failed"
        reason = r.reason if r.status != "pending" else "interrupted before it finished"
        out.append(LayoutOutcome(r.layout, r.gpus, status, reason, points))  # type: ignore[arg-type]
    return out
