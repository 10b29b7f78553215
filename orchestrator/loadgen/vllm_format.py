"""A load point in the JSON layout of `vllm bench serve --save-result`, so its dashboards read ours.

Only names change: every value comes from compute_metrics (or, for the standard deviations and the
per-request lists, from the same RequestRecord properties). vLLM's `itl` is our per-chunk ITL and its
`e2el` our E2E; `duration` is our measurement window.
"""

from __future__ import annotations

import math
import time
from typing import Any

from orchestrator.loadgen.bench import BenchConfig, PointResult
from orchestrator.loadgen.metrics import Distribution, stddev
from orchestrator.loadgen.window import in_window, point_warmup_s


def _stats(prefix: str, d: Distribution, values_ms: list[float]) -> dict[str, Any]:
    return {
        f"mean_{prefix}_ms": d.mean,
        f"median_{prefix}_ms": d.p50,
        f"std_{prefix}_ms": stddev(values_ms),
        f"p90_{prefix}_ms": d.p90,
        f"p95_{prefix}_ms": d.p95,
        f"p99_{prefix}_ms": d.p99,
    }


def vllm_result(p: PointResult, cfg: BenchConfig, tokenizer_id: str | None = None) -> dict[str, Any]:
    m = p.metrics
    warmup_s = point_warmup_s(p.records, cfg.warmup_s, p.point.concurrency)
    ok = [r for r in in_window(p.records, warmup_s, cfg.cooldown_s)[1] if r.ok]
    ttft = [r.ttft_s * 1e3 for r in ok if r.ttft_s is not None]
    tpot = [r.tpot_s * 1e3 for r in ok if r.tpot_s is not None]
    itl = [g * 1e3 for r in ok for g in r.itl_chunk_s]
    e2e = [r.e2e_s * 1e3 for r in ok if r.e2e_s is not None]
    target = cfg.targets[0]
    rate: float | str | None = p.point.rate
    if isinstance(rate, float) and math.isinf(rate):
        rate = "inf"
    out: dict[str, Any] = {
        "date": time.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai-chat" if target.endpoint == "chat" else "openai",
        "backend": "orch",
        "label": p.point.label,
        "model_id": target.model,
        "tokenizer_id": tokenizer_id,
        "num_prompts": m.n_requests,
        "request_rate": rate,
        "burstiness": cfg.burstiness,
        "max_concurrency": p.point.concurrency or cfg.max_concurrency,
        "duration": m.window_s,
        "completed": m.n_completed,
        "failed": m.n_failed,
        "total_input_tokens": m.total_input_tokens,
        "total_output_tokens": m.total_output_tokens,
        "request_throughput": m.request_throughput,
        "request_goodput": m.goodput,
        "output_throughput": m.output_throughput,
        "total_token_throughput": m.total_throughput,
        "input_lens": [r.prompt_tokens or 0 for r in ok],
        "output_lens": [r.n_output_tokens for r in ok],
        "ttfts": [t / 1e3 for t in ttft],
        "itls": [[g for g in r.itl_chunk_s] for r in ok],
        "latencies": [e / 1e3 for e in e2e],
        "errors": [r.error or "" for r in p.records if not r.ok],
    }
    out |= _stats("ttft", m.ttft_ms, ttft) | _stats("tpot", m.tpot_ms, tpot)
    out |= _stats("itl", m.itl_chunk_ms, itl) | _stats("e2el", m.e2e_ms, e2e)
    return out
