"""Measuring one load point with confidence (pipeline/repeats.py): remeasured when unjudged,
repeated with the next workload seed when close to the SLO, judged on the pooled records."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.loadgen.bench import LoadPoint, PointResult
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.window import in_window, point_warmup_s
from orchestrator.pipeline.repeats import (
    REPEATS_WHEN_CLOSE,
    measure_point,
    pooled_records,
    pooled_result,
    reseeded,
)
from orchestrator.spec.load import load_spec
from orchestrator.spec.models import SweepSpec

UNRELIABLE = "unreliable: the simulated servers lost 30% of their clock (test)"


@pytest.fixture(scope="module")
def spec() -> SweepSpec:
    return load_spec("layouts/qwen72b.yaml")  # warmup_s 5, SLO ttft_p99 2000 ms, itl_p99 100 ms


def records(n: int, gap_s: float, start_s: float = 0.0, every_s: float = 1.0) -> list[RequestRecord]:
    """n requests sent every `every_s`, 10 tokens each `gap_s` apart."""
    out = []
    for i in range(n):
        t = start_s + i * every_s
        chunks = tuple(t + 0.1 + j * gap_s for j in range(10))
        out.append(RequestRecord(f"req-{i}", t, t, chunks[-1], chunks, (1,) * 10, 10, 100))
    return out


def result_of(recs: list[RequestRecord], spec: SweepSpec, verdict: str | None = None) -> PointResult:
    r = pooled_result([PointResult(LoadPoint(rate=1.0), compute_metrics([]), tuple(recs), None)], spec, 8)
    return r if verdict is None else PointResult(r.point, r.metrics, r.records, verdict)


def test_pooled_records_lie_end_to_end_without_the_later_warmups() -> None:
    a, b = records(20, 0.05), records(20, 0.05, start_s=1000.0)
    pooled = pooled_records([a, b], warmup_s=5.0)
    assert len(pooled) == 20 + 15  # the second run's five warm-up requests are left out
    assert len({r.request_id for r in pooled}) == len(pooled)
    window_a, inside_a = in_window(a, 5.0)
    window_b, inside_b = in_window(b, 5.0)
    window, inside = in_window(pooled, 5.0)
    assert window == pytest.approx(window_a + window_b) and len(inside) == len(inside_a) + len(inside_b)
    # the same rates as each run alone: nothing double counted, no gap counted
    one, both = compute_metrics(a, warmup_s=5.0), compute_metrics(pooled, warmup_s=5.0)
    assert both.request_throughput == pytest.approx(one.request_throughput, rel=1e-9)
    assert both.achieved_rate == pytest.approx(one.achieved_rate, rel=1e-9)
    assert both.output_throughput == pytest.approx(one.output_throughput, rel=1e-9)


def test_a_pooled_closed_loop_is_measured_after_the_warmup_its_intervals_use(spec: SweepSpec) -> None:
    # Two runs of 4 clients with 2 requests each: neither run alone has the three per client a closed
    # loop's default warm-up needs, the pool has. pipeline/points.judge takes the pooled records' warm-up.
    closed = spec.model_copy(update={"workload": spec.workload.model_copy(update={"warmup_s": 0.0})})
    point = LoadPoint(concurrency=4)
    runs = [
        PointResult(point, compute_metrics([]), tuple(records(8, 0.05, start_s=s)), None) for s in (0, 100)
    ]
    pooled = pooled_result(runs, closed, 8)
    warmup_s = point_warmup_s(pooled.records, 0.0, 4)
    assert warmup_s > 0 and point_warmup_s(runs[0].records, 0.0, 4) == 0.0
    assert pooled.metrics == compute_metrics(
        list(pooled.records), warmup_s=warmup_s, gpus=8, slo=pooled.metrics.slo
    )
    assert pooled.metrics.n_completed < len(pooled.records)  # the first wave is out of the window


def test_reseeded_moves_only_the_workload_seed(spec: SweepSpec) -> None:
    assert reseeded(spec, 0) is spec
    again = reseeded(spec, 2)
    assert again.workload.seed == spec.workload.seed + 2 and again.slo == spec.slo


def fake_tries(
    spec: SweepSpec, gaps: list[float], unjudged_at: frozenset[int] = frozenset()
) -> tuple[Any, list[int]]:
    tried: list[int] = []

    def try_fn(k: int) -> tuple[PointResult, dict[str, Any]]:
        tried.append(k)
        r = result_of(records(30, gaps[min(k, len(gaps) - 1)], start_s=100.0 * k), spec)
        if k in unjudged_at:
            r = PointResult(r.point, r.metrics, r.records, UNRELIABLE)
        return r, {"try": k}

    return try_fn, tried


def judge_by(margins: list[str]) -> Any:
    seen: list[PointResult] = []

    def judge(r: PointResult) -> dict[str, Any]:
        seen.append(r)
        margin = margins[min(len(seen) - 1, len(margins) - 1)]
        return {"intervals": {"itl_p99_ms": [97.0, 104.0]}, "slo_margin": margin}

    return judge, seen


def test_a_point_well_inside_or_outside_the_slo_is_measured_once(spec: SweepSpec) -> None:
    try_fn, tried = fake_tries(spec, [0.05])
    judge, _ = judge_by(["holds"])
    result, extra, judged = measure_point(try_fn, judge, spec, 8, lambda what: None)
    assert tried == [0] and "repeated" not in extra and judged["slo_margin"] == "holds" and result.passed


def test_a_close_point_is_repeated_with_the_next_seeds_until_it_is_no_longer_close(spec: SweepSpec) -> None:
    try_fn, tried = fake_tries(spec, [0.05, 0.05, 0.05])
    judge, seen = judge_by(["close", "holds"])
    phases: list[str] = []
    result, extra, _ = measure_point(try_fn, judge, spec, 8, phases.append)
    assert tried == [0, 1]  # stopped once the pooled verdict held
    rep = extra["repeated"]
    assert rep["measurements"] == 2 and rep["workload_seeds"] == [0, 1] and rep["margin_after"] == "holds"
    assert rep["because"] == "close to the SLO: itl_p99_ms [97, 104] around 100"
    assert len(result.records) == 30 + 25 and seen[-1] is result  # pooled
    assert phases and phases[0].startswith("repeat 1/2")


def test_a_point_that_stays_close_gets_the_stated_number_of_repeats_and_the_pooled_verdict(
    spec: SweepSpec,
) -> None:
    # the first run passes (ITL 90 ms), the repeats fail (120 ms): the pooled p99 fails
    try_fn, tried = fake_tries(spec, [0.09, 0.12, 0.12])
    judge, _ = judge_by(["close"])
    result, extra, _ = measure_point(try_fn, judge, spec, 8, lambda what: None)
    assert tried == list(range(1 + REPEATS_WHEN_CLOSE))
    assert extra["repeated"]["measurements"] == 1 + REPEATS_WHEN_CLOSE
    assert extra["repeated"]["margin_after"] == "close"
    assert result.passed is False and "itl_p99_ms" in (result.verdict or "")


def test_an_unjudged_point_is_remeasured_and_an_unjudged_repeat_is_not_pooled(spec: SweepSpec) -> None:
    try_fn, tried = fake_tries(spec, [0.05], unjudged_at=frozenset({0, 2}))
    judge, _ = judge_by(["close", "close", "close"])
    result, extra, _ = measure_point(try_fn, judge, spec, 8, lambda what: None)
    assert extra["remeasured_because"] == UNRELIABLE
    assert tried == [0, 1, 2, 3]  # 0 unjudged, 1 judged (close), repeats 2 (unjudged, skipped) and 3
    assert extra["repeated"]["unjudged_repeats"] == 1 and extra["repeated"]["workload_seeds"] == [1, 3]
    assert not (result.verdict or "").startswith("unreliable")


def test_a_point_unjudged_twice_stays_unjudged_and_is_not_repeated(spec: SweepSpec) -> None:
    try_fn, tried = fake_tries(spec, [0.05], unjudged_at=frozenset({0, 1}))
    judge, _ = judge_by(["close"])
    result, extra, _ = measure_point(try_fn, judge, spec, 8, lambda what: None)
    assert tried == [0, 1] and result.verdict == UNRELIABLE and "repeated" not in extra
