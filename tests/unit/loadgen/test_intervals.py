"""Bootstrap intervals over requests (loadgen/intervals.py)."""

from __future__ import annotations

import numpy as np

from orchestrator.loadgen.intervals import bootstrap_intervals, slo_margin
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.loadgen.records import RequestRecord

SLO = {"ttft_p99_ms": 80.0, "itl_p99_ms": 30.0, "tpot_p50_ms": 25.0}


def records(n: int, seed: int = 0) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = i * 0.1
        ttft = float(rng.lognormal(np.log(0.04), 0.4))
        gaps = rng.gamma(4.0, 0.005, size=int(rng.integers(8, 24)))
        chunks = tuple(t + ttft + np.concatenate([[0.0], np.cumsum(gaps)]))
        out.append(RequestRecord(str(i), t, t, done_s=chunks[-1], chunk_times_s=chunks,
                                 chunk_tokens=(1,) * len(chunks), output_tokens=len(chunks),
                                 prompt_tokens=10))
    return out


def test_intervals_contain_the_point_estimates_and_are_seeded() -> None:
    recs = records(400)
    m = compute_metrics(recs, gpus=2, slo=SLO)
    iv = bootstrap_intervals(recs, gpus=2, slo=SLO, seed=3)
    assert iv == bootstrap_intervals(recs, gpus=2, slo=SLO, seed=3)
    assert iv != bootstrap_intervals(recs, gpus=2, slo=SLO, seed=4)
    for key, point in (("ttft_p99_ms", m.ttft_ms.p99), ("itl_p99_ms", m.itl_chunk_ms.p99),
                       ("tpot_p50_ms", m.tpot_ms.p50), ("goodput", m.goodput),
                       ("output_throughput", m.output_throughput)):
        lo, hi = iv[key]
        assert point is not None and lo < hi and lo * 0.98 <= point <= hi * 1.02, key
    assert iv["goodput_per_gpu"] == [x / 2 for x in iv["goodput"]]
    assert iv["requests"] == 400 and iv["resamples"] == 200


def test_more_requests_give_a_narrower_interval() -> None:
    def width(n: int) -> float:
        lo, hi = bootstrap_intervals(records(n, seed=1), slo=SLO)["ttft_p99_ms"]
        return float(hi - lo)

    assert width(3000) < width(200)


def test_slo_margin() -> None:
    iv = {"ttft_p99_ms": [60.0, 70.0], "itl_p99_ms": [28.0, 32.0]}
    assert slo_margin(iv, {"ttft_p99_ms": 80}) == "holds"
    assert slo_margin(iv, {"ttft_p99_ms": 80, "itl_p99_ms": 30}) == "close"
    assert slo_margin(iv, {"ttft_p99_ms": 50, "itl_p99_ms": 30}) == "breaks"


def test_no_records_gives_no_interval() -> None:
    assert "goodput" not in bootstrap_intervals([], slo=SLO)
