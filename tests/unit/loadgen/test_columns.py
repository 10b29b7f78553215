"""The array path of the metrics (loadgen.columns) gives what the per-request definitions give: the
percentiles of the expanded values as numpy computes them, and each request's own SLO verdict as a
sort of its own gaps would, for any records hypothesis can think of."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.loadgen.columns import GapSet, columns_from_records, gaps_within, weighted_summary
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.slo import slo_mask
from orchestrator.loadgen.window import measurement_window, streamed_until

finite_ms = st.floats(min_value=0.0, max_value=200.0, allow_nan=False, allow_infinity=False)


@st.composite
def records(draw: st.DrawFn) -> list[RequestRecord]:
    out = []
    for i in range(draw(st.integers(1, 12))):
        sent = draw(st.floats(0, 5))
        common = st.sampled_from([0.001, 0.0025, 0.004, 0.01, 0.05])  # ties and values on the bounds
        gaps = draw(st.lists(common | finite_ms.map(lambda x: x / 1e3), max_size=20))
        first = sent + draw(st.floats(0.0001, 0.5))
        times = [first]
        for g in gaps:
            times.append(times[-1] + g)
        tokens = draw(st.lists(st.integers(1, 4), min_size=len(times), max_size=len(times)))
        error = draw(st.sampled_from([None, None, None, "timeout"]))
        has_chunks = draw(st.booleans()) or error is None
        out.append(RequestRecord(
            f"r{i}", scheduled_s=sent - draw(st.floats(0, 0.01)), sent_s=sent,
            done_s=times[-1] + 0.001 if has_chunks else None,
            chunk_times_s=tuple(times) if has_chunks else (),
            chunk_tokens=tuple(tokens) if has_chunks else (),
            output_tokens=sum(tokens) if draw(st.booleans()) else None,
            prompt_tokens=draw(st.integers(1, 99)), error=error))
    return out


def _naive_stat(gaps_ms: list[float], stat: str) -> float | None:
    if not gaps_ms:
        return None
    if stat == "mean":
        return float(np.mean(gaps_ms))
    if stat == "max":
        return max(gaps_ms)
    return float(np.percentile(gaps_ms, int(stat[1:])))


@settings(max_examples=200, deadline=None)
@given(records(), st.sampled_from(["p50", "p90", "p95", "p99", "max", "mean"]),
       st.sampled_from([1.0, 2.5, 4.0, 10.0, 50.0, 100.0]), st.sampled_from(["itl", "itl_token"]))
def test_each_request_is_judged_on_its_own_gaps(recs: list[RequestRecord], stat: str, bound: float,
                                                 metric: str) -> None:
    got = slo_mask(columns_from_records(recs), {f"{metric}_{stat}_ms": bound})
    for r, verdict in zip(recs, got, strict=True):
        gaps = r.itl_chunk_s if metric == "itl" else r.itl_token_s
        value = _naive_stat([g * 1e3 for g in gaps], stat)
        expected = r.ok and (value is None or value <= bound)
        if stat == "mean" and value is not None and math.isclose(value, bound, rel_tol=1e-12):
            continue  # a mean summed in another order may land on either side of an equal bound
        assert bool(verdict) == expected, (r, stat, bound, value)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite_ms, min_size=1, max_size=30), st.data())
def test_weighted_percentiles_equal_numpy_on_the_expanded_values(values: list[float], data: st.DataObject
                                                                 ) -> None:
    weights = data.draw(st.lists(st.integers(0, 5), min_size=len(values), max_size=len(values)))
    expanded = np.repeat(np.asarray(values), weights)
    count, mean, pct, top = weighted_summary(np.asarray(values), np.asarray(weights, dtype=np.int64))
    assert count == expanded.size
    if not expanded.size:
        assert mean is None and top is None
        return
    for name, q in (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99)):
        assert pct[name] == float(np.percentile(expanded, q)), name  # bit for bit
    assert top == float(expanded.max())
    assert mean is not None and math.isclose(mean, float(expanded.mean()), rel_tol=1e-12, abs_tol=1e-12)


@settings(max_examples=100, deadline=None)
@given(records(), st.floats(0, 0.2), st.floats(0, 0.2))
def test_metrics_equal_the_per_record_definitions(recs: list[RequestRecord], warmup: float,
                                                  cooldown: float) -> None:
    slo = {"ttft_p99_ms": 300.0, "itl_p90_ms": 10.0}
    m = compute_metrics(recs, warmup_s=warmup, cooldown_s=cooldown, slo=slo)
    # The window as defined per record (measurement_window, Window.holds); the arrays must agree.
    w = measurement_window(recs, warmup, cooldown)
    done = [r for r in recs if r.ok and w.holds(r)]
    assert m.n_completed == len(done)
    streamed = sum(float(np.diff(streamed_until(r, np.array([w.start_s, w.end_s])))[0]) for r in recs)
    assert math.isclose(m.output_throughput * w.length_s, streamed, rel_tol=1e-9, abs_tol=1e-9)
    itl = [g * 1e3 for r in done for g in r.itl_chunk_s]
    itl_token = [g * 1e3 for r in done for g in r.itl_token_s]
    for dist, values in ((m.itl_chunk_ms, itl), (m.itl_token_ms, itl_token)):
        assert dist.count == len(values)
        if values:
            assert dist.p99 == float(np.percentile(values, 99)) and dist.max == max(values)
    ttft = [r.ttft_s * 1e3 for r in done if r.ttft_s is not None]
    assert m.ttft_ms.count == len(ttft)
    if ttft:
        assert m.ttft_ms.p50 == float(np.percentile(ttft, 50))
    assert m.total_output_tokens == sum(r.n_output_tokens for r in done)


def test_shared_gaps_count_once_per_request_running_through_them() -> None:
    # Three gaps of one engine's steps; request 0 spans all three, request 1 the last two, request 2
    # none: the aggregate holds five values, and each request is judged on its own.
    gs = GapSet(np.array([0.010, 0.020, 0.030]), None, np.array([0, 1]), np.array([0, 1]), np.array([3, 3]))
    cover = gs.coverage(np.array([True, True, True]))
    assert cover.tolist() == [1, 2, 2]
    assert gaps_within(gs, 3, "max", 25.0).tolist() == [False, False, True]
    assert gaps_within(gs, 3, "p50", 24.0).tolist() == [True, False, True]  # 20 ms; 25 ms (interpolated)
