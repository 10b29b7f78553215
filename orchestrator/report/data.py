"""What a report shows, read once from the store: every load point with its verdict class, the SLO
bounds, per-point latency samples for the CDFs (thinned to quantiles) and the engine metric series."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.engines import ENGINES, get_engine
from orchestrator.report.pairs import PairView, pair_views
from orchestrator.selection import LayoutOutcome, Selection
from orchestrator.store.db import Store
from orchestrator.verdict import Verdict

Judged = Literal["pass", "fail", "unjudged"]
CDF_POINTS = 200  # quantiles kept per CDF: enough for the eye, small enough for one file


@dataclass(frozen=True)
class PointView:
    layout: str
    gpus: int
    label: str
    rate: float | None
    judged: Judged
    verdict: str
    metrics: dict[str, Any]
    engine_series: dict[str, Any] = field(default_factory=dict)
    ttft_ms: tuple[float, ...] = ()  # thinned to CDF_POINTS quantiles
    itl_ms: tuple[float, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.layout} {self.label}"

    @property
    def load(self) -> float | None:
        """The offered load: the rate, or a closed loop's concurrency (label `concurrency=N`)."""
        if self.rate is not None:
            return self.rate
        head, _, n = self.label.partition("=")
        return float(n) if head == "concurrency" and n.isdigit() else None

    def stat(self, metric: str, stat: str) -> float | None:
        v = (self.metrics.get(metric) or {}).get(stat)
        return float(v) if isinstance(v, int | float) else None

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        v = (self.metrics.get("per_gpu") or {}).get("output_throughput")
        return float(v) if isinstance(v, int | float) else None

    @property
    def prefix_hit_rate(self) -> float | None:
        """The prefix-cache hit rate the point saw: the simulator's cache counters in virtual time,
        else the engines' own (`/metrics`: vLLM's hits / queries, SGLang's rate), else the cached
        tokens the responses reported; None where nothing was cached or counted."""
        m = self.metrics
        for v in (((m.get("sim") or {}).get("prefix_cache") or {}).get("hit_rate"),
                  (m.get("engine") or {}).get("prefix_hit_rate"), m.get("prefix_hit_rate")):
            if isinstance(v, int | float):
                return float(v)
        return None

    @property
    def predicted_prefix_hit_rate(self) -> float | None:
        """The simulator's prediction for a served point (pipeline/predict.py)."""
        v = (self.metrics.get("predicted") or {}).get("prefix_hit_rate")
        return float(v) if isinstance(v, int | float) else None

    @property
    def tokens_per_s_per_user(self) -> float | None:
        """Decode speed one user sees: 1000 / TPOT p50 (InferenceMAX's interactivity axis)."""
        tpot = self.stat("tpot_ms", "p50")
        return 1e3 / tpot if tpot else None


@dataclass(frozen=True)
class ReportData:
    run: dict[str, Any]
    selection: Selection
    outcomes: tuple[LayoutOutcome, ...]
    points: tuple[PointView, ...]
    slo_ms: dict[str, float]  # {"ttft_p99_ms": 2000.0, ...}
    pairs: tuple[PairView, ...] = ()  # prefill/decode pairs: their split, plan and per-pool points

    @property
    def simulated(self) -> bool:
        engine = str(self.run.get("engine"))
        return engine in ENGINES and get_engine(engine).simulated

    @property
    def virtual_time(self) -> bool:
        """The sweep ran the simulator in virtual time (no servers): every point says so."""
        return bool(self.points) and all(p.metrics.get("measured_in") == "virtual time" for p in self.points)

    @property
    def layouts(self) -> list[str]:
        return [o.layout for o in self.outcomes]


def judged(passed: bool | None, verdict: str | None) -> Judged:
    """Unjudged: no SLO, or the simulated clock slipped ("unreliable: ..."), so no verdict on the layout."""
    if passed is None or not Verdict.of(passed, verdict).judged:
        return "unjudged"
    return "pass" if passed else "fail"


def quantiles(values: Sequence[float], n: int = CDF_POINTS) -> tuple[float, ...]:
    """n evenly spaced order statistics (all values when there are fewer): a CDF drawn from them keeps
    its shape, tails included (the first and last values are kept)."""
    xs = sorted(values)
    if len(xs) <= n:
        return tuple(xs)
    return tuple(xs[round(i * (len(xs) - 1) / (n - 1))] for i in range(n))


def load_report(
    store: Store, run_id: str, selection: Selection, outcomes: Sequence[LayoutOutcome]
) -> ReportData:
    run = store.run_info(run_id)
    slo = {
        k: float(v)
        for k, v in ((run.get("spec") or {}).get("slo") or {}).items()
        if k.endswith("_ms") and isinstance(v, int | float)
    }
    ttft: dict[tuple[str, str], list[float]] = {}
    itl: dict[tuple[str, str], list[float]] = {}
    for layout, label, rec in store.records(run_id):
        if rec.ok and rec.ttft_s is not None:
            ttft.setdefault((layout, label), []).append(rec.ttft_s * 1e3)
        itl.setdefault((layout, label), []).extend(g * 1e3 for g in rec.itl_chunk_s)
    series = store.engine_metrics(run_id)
    gpus = {o.layout: o.gpus for o in outcomes}
    views = []
    for o in outcomes:
        for p in store.points(run_id, o.layout):
            key = (p.layout, p.label)
            views.append(
                PointView(
                    layout=p.layout,
                    gpus=gpus[p.layout],
                    label=p.label,
                    rate=p.rate,
                    judged=judged(p.passed, p.verdict),
                    verdict=p.verdict or "",
                    metrics=p.metrics,
                    engine_series=series.get(key, {}),
                    ttft_ms=quantiles(ttft.get(key, [])),
                    itl_ms=quantiles(itl.get(key, [])),
                )
            )
    return ReportData(run, selection, tuple(outcomes), tuple(views), slo, tuple(pair_views(store, run_id)))
