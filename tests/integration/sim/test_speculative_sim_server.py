"""The simulated server with speculative decoding, over real HTTP: bursts on the wire, exact token
counts, and vLLM's acceptance counters read back through orch's own scrape."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from orchestrator.loadgen.client import ClientConfig, RequestSpec, run_closed_loop
from orchestrator.loadgen.engine_metrics import fetch_text
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.spec_decode_metrics import measured_acceptance, parse_spec_decode
from tests.support.ports import free_port
from tests.support.sim_serving import MODEL, sim_server, wait_healthy

K = 4
CONFIG = json.dumps({"method": "ngram", "num_speculative_tokens": K})


def test_speculative_tokens_arrive_in_bursts_and_are_counted() -> None:
    with sim_server(0.2, "--speculative-config", CONFIG, "--speculative-acceptance", "0.7") as base:
        assert wait_healthy(base)
        specs = [RequestSpec(str(i), "word " * 300, max_tokens=60) for i in range(6)]

        async def run() -> tuple[str, list[RequestRecord], str]:
            before = await fetch_text(base + "/metrics")
            records = await run_closed_loop(ClientConfig(base, MODEL), specs, 3)
            return before, records, await fetch_text(base + "/metrics")

        before, records, after = asyncio.run(run())
    assert all(r.ok and r.output_tokens == 60 for r in records), [r.error for r in records]
    assert sum(r.output_tokens for r in records) == sum(sum(r.chunk_tokens) for r in records)
    # 1 + 0.7 + 0.49 + 0.343 + 0.2401 = 2.77 tokens per step: most chunks carry 2 or 3.
    bursts = [t for r in records for t in r.chunk_tokens[1:]]
    assert max(bursts) <= 3 and sum(1 for t in bursts if t > 1) > len(bursts) / 2
    b, a = parse_spec_decode(before), parse_spec_decode(after)
    assert b is not None and a is not None
    acc = measured_acceptance(b, a)
    assert acc is not None
    assert acc.tokens_per_step == pytest.approx(2.7731, abs=0.1)  # the rate, up to the capped last bursts
    assert acc.decode_steps == acc.drafts and acc.draft_tokens == K * acc.drafts


def test_bad_speculative_flags_are_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "orchestrator.sim.server", "--model", "llama-3.1-8b",
                           "--layout", "tp1", "--gpu", "h100-sxm", "--port", str(free_port()),
                           "--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 1}),
                           "--speculative-acceptance", "0.8"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "mtp drafts with the model's multi-token-prediction layers" in proc.stderr
