"""The two-layout spec the side-by-side sweeps share (tests/integration/pipeline/test_sweep_side_by_side.py,
test_ray_side_by_side.py and bench/side_by_side.py): Qwen2.5-72B on 2 nodes x 8 H100s, tp8 and tp4x2 at
one rate, served by the simulated engine. tp8 meets the TPOT bound (about 14.4 ms predicted), tp4x2 does
not (about 18.1 ms): a clear winner, so a sweep that runs them at once must still tell them apart. The
bound moves with the cost model; it lives here once."""

from __future__ import annotations

from typing import Any


def side_by_side_spec(num_requests: int) -> dict[str, Any]:
    return {
        "model": {"name": "qwen2.5-72b", "max_model_len": 4096},
        "hardware": {"gpu": "h100-sxm", "nodes": 2, "gpus_per_node": 8},
        "engine": {"name": "sim", "time_scale": 1.0, "startup_s": 60},  # 0.5 doubles clock jitter
        "workload": {"input_tokens": 128, "output_tokens": 24, "rates_per_s": [2],
                     "num_requests": num_requests, "seed": 3, "warmup_s": 0},
        "slo": {"ttft_p99_ms": 3000, "tpot_p50_ms": 16},
        "layouts": ["tp8", "tp4x2"],
    }
