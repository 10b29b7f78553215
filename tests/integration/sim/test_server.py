"""The simulated server over real HTTP on a free loopback port, driven by our own load generator."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from orchestrator.loadgen.client import ClientConfig, RequestSpec, run_open_loop
from orchestrator.pipeline.timescale import unscale
from orchestrator.sim.virtual import SimRequest
from tests.support.sim_serving import (
    MODEL,
    poisson_workload,
    sim_server,
    simulate_virtual,
    status,
    wait_healthy,
)


@pytest.fixture()
def server() -> Iterator[str]:
    with sim_server(0.2, "--startup-s", "1.5") as base:
        deadline = time.monotonic() + 30
        seen_loading = False
        while time.monotonic() < deadline:
            code = status(base + "/health")
            seen_loading |= code == 503
            if code == 200:
                break
            time.sleep(0.1)
        assert seen_loading, "/health should answer 503 while the simulated model loads"
        yield base


def test_streams_exact_token_counts_no_faster_than_the_model(server: str) -> None:
    specs = [RequestSpec(str(i), "word " * 200, max_tokens=20) for i in range(6)]
    cfg = ClientConfig(server, "qwen2.5-72b")
    records = asyncio.run(run_open_loop(cfg, specs, [0.05 * i for i in range(6)]))
    assert all(r.ok for r in records), [r.error for r in records]
    assert all(r.output_tokens == 20 and len(r.chunk_times_s) == 20 for r in records)
    assert all(r.prompt_tokens == 200 for r in records)
    # Tokens are released at simulated times x 0.2: a decode step of TP8 is > 5 ms simulated. The mean
    # gap is the robust figure (a busy machine delivers some tokens together, but never early).
    gaps = [g for r in records for g in r.itl_chunk_s]
    assert sum(gaps) / len(gaps) > 0.2 * 0.005
    with urllib.request.urlopen(server + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    assert "vllm:num_requests_running" in text and "vllm:kv_cache_usage_perc" in text
    assert "orch_sim_behind_seconds_sum" in text and "orch_sim_steps_total" in text
    assert 'vllm:generation_tokens_total{model_name="qwen2.5-72b"} 120' in text


def test_bad_requests_get_400(server: str) -> None:
    req = urllib.request.Request(server + "/v1/completions", data=b'{"prompt": "x", "max_tokens": 100000}',
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code == 400


SCALE = 2.0


def test_served_and_virtual_time_give_the_same_answers() -> None:
    """The same requests through the HTTP server and through virtual time: every request completes with
    the same number of tokens on both paths. How close their latencies are depends on how busy the
    machine is, so that is measured by bench/sim_served_agreement.py, which prints the ratios."""
    n = 24
    offsets, prompts, outputs = poisson_workload(7, n)
    virtual = simulate_virtual([SimRequest(str(i), offsets[i], prompts[i], outputs[i]) for i in range(n)])
    with sim_server(SCALE) as base:
        assert wait_healthy(base), "the simulated server did not become healthy in 60 s"
        cfg = ClientConfig(base, MODEL)
        specs = [RequestSpec(str(i), "word " * prompts[i], max_tokens=outputs[i]) for i in range(n)]
        served = unscale(asyncio.run(run_open_loop(cfg, specs, [t * SCALE for t in offsets])), SCALE)
    assert all(r.ok for r in served), [r.error for r in served if not r.ok]
    by_id = {r.request_id: r for r in virtual}
    for r in served:
        assert r.output_tokens == by_id[r.request_id].output_tokens == outputs[int(r.request_id)]
        assert r.prompt_tokens == by_id[r.request_id].prompt_tokens
