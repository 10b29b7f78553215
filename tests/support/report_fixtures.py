"""A short synthetic sweep in a real store, for report and export tests: two measured layouts at two load
points (one passing, one failing, one not judged), a rejected layout, requests whose metrics come from
the real compute_metrics, and engine metric series shaped like the simulator's."""

from __future__ import annotations

import random
from pathlib import Path

from orchestrator.loadgen.engine_metrics import EngineSample, series_to_dict, summarize_series
from orchestrator.loadgen.metrics import compute_metrics, finite
from orchestrator.loadgen.records import RequestRecord
from orchestrator.spec.load import load_spec
from orchestrator.store.db import Store
from tests.support.paths import ROOT

REPO = ROOT
RUN_ID = "20260101-000000-synthe"
SLO = {"ttft_p99_ms": 2000.0, "itl_p99_ms": 100.0}
# (layout, gpus, rate, TTFT ms, ITL ms, passed)
POINTS = (
    ("tp8", 8, 2.0, 120.0, 20.0, True),
    ("tp8", 8, 8.0, 2600.0, 45.0, False),
    ("tp4x2", 8, 2.0, 200.0, 35.0, True),
    ("tp4x2", 8, 8.0, 900.0, 60.0, None),
)


def _records(label: str, rate: float, ttft_ms: float, itl_ms: float, n: int = 40) -> list[RequestRecord]:
    rng = random.Random(label)
    out = []
    for i in range(n):
        sent = i * 0.5  # 20 s of sends, so the spec's 5 s warm-up leaves most of them measured
        first = sent + ttft_ms / 1e3 * rng.uniform(0.5, 1.5)
        chunks = tuple(first + k * itl_ms / 1e3 * rng.uniform(0.8, 1.2) for k in range(16))
        out.append(RequestRecord(f"{label}-{i}", sent, sent, chunks[-1], chunks, (1,) * 16, 16, 512))
    return out


def _series(rate: float, endpoints: int) -> dict[str, object]:
    samples = [
        EngineSample(
            t_s=k * 0.5, endpoint=e, running=rate * 2 + k % 3, waiting=max(0.0, rate - 4) * k / 4,
            kv_usage=min(1.0, 0.05 * rate + 0.01 * k), preemptions=float(k // 8) if rate > 4 else 0.0,
        )
        for k in range(20)
        for e in range(endpoints)
    ]
    return series_to_dict(samples, 0.5)


def build_store(path: Path) -> str:
    spec = load_spec(str(REPO / "layouts" / "qwen72b.yaml"))
    store = Store(path)
    store.create_run(
        run_id=RUN_ID, spec_path="layouts/qwen72b.yaml", spec_json=spec.model_dump(mode="json"),
        spec_hash="synthetic", engine="sim", engine_version="orch-sim test", model="qwen2.5-72b",
        model_config_hash=None, orch_version="test", hardware={}, metadata=dict(spec.metadata),
    )
    for layout, gpus, rate, ttft, itl, passed in POINTS:
        label = f"rate={rate:g}/s"
        recs = _records(f"{layout}-{label}", rate, ttft, itl)
        metrics = finite(compute_metrics(recs, warmup_s=spec.workload.warmup_s, gpus=gpus, slo=SLO).to_dict())
        metrics["predicted"] = {"ttft_p99_ms": metrics["ttft_ms"]["p99"] * 1.1,
                                "tpot_p50_ms": metrics["tpot_ms"]["p50"] * 0.9,
                                "output_tokens_per_s_per_gpu": rate * 16 / gpus * 1.05}
        series = _series(rate, 2 if "x2" in layout else 1)
        metrics["engine"] = finite(summarize_series(series))
        verdict = "" if passed else ("ttft_p99 2600 > 2000 ms" if passed is False else None)
        store.set_layout(RUN_ID, layout, gpus, "pending")
        store.add_engine_metrics(RUN_ID, layout, label, series)
        store.add_point(RUN_ID, layout, label, rate, passed, verdict, metrics, recs)
        store.set_layout(RUN_ID, layout, gpus, "measured")
    store.set_layout(RUN_ID, "tp2x4", 8, "rejected", reason="weights do not fit: 72.7 GB per GPU > 72 GB")
    store.finish_run(RUN_ID, "done", None)
    store.close()
    return RUN_ID
