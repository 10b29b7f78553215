"""The simulated server with speculative decoding, over real HTTP: bursts on the wire, exact token
counts, and vLLM's acceptance counters read back through orch's own scrape."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from orchestrator.loadgen.client import ClientConfig, RequestSpec, run_closed_loop
from orchestrator.loadgen.engine_metrics import fetch_text
from orchestrator.loadgen.spec_decode_metrics import measured_acceptance, parse_spec_decode

K = 4
CONFIG = json.dumps({"method": "ngram", "num_speculative_tokens": K})


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _server(*extra: str) -> Iterator[str]:
    port = _port()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.sim.server", "--model", "llama-3.1-8b",
                             "--layout", "tp1", "--gpu", "h100-sxm", "--max-model-len", "8192",
                             "--time-scale", "0.2", *extra, "--port", str(port)])
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    break
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_speculative_tokens_arrive_in_bursts_and_are_counted() -> None:
    with _server("--speculative-config", CONFIG, "--speculative-acceptance", "0.7") as base:
        specs = [RequestSpec(str(i), "word " * 300, max_tokens=60) for i in range(6)]

        async def run() -> tuple[str, list, str]:  # type: ignore[type-arg]
            before = await fetch_text(base + "/metrics")
            records = await run_closed_loop(ClientConfig(base, "llama-3.1-8b"), specs, 3)
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
                           "--layout", "tp1", "--gpu", "h100-sxm", "--port", str(_port()),
                           "--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 1}),
                           "--speculative-acceptance", "0.8"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "mtp drafts with the model's multi-token-prediction layers" in proc.stderr
