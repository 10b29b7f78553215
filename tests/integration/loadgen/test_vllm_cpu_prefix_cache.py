"""orch bench's conversations against vLLM on CPU (prefix caching on, as its default; its CPU block size
of 128): every prompt has the token count the session plan says, and vLLM's own hit counters match the
simulator's prediction for the same sessions, token for token (bench/vllm_prefix_cache.py prints the
same for more sessions and two block sizes).

Its own server: the vllm_cpu fixture shared by the agreement tests decodes each token to its byte-level
surface string, so an answer quoted in the next turn would not re-encode to the tokens vLLM cached."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.engines import SettingsRequest, resolve_settings
from orchestrator.layout import parse_layout
from orchestrator.loadgen.engine_metrics import parse_prometheus
from orchestrator.loadgen.sessions import conversation_sessions
from orchestrator.plan.checks import Cluster
from orchestrator.plan.inputs import PlanInputs
from orchestrator.sim.build import replica_engines
from orchestrator.sim.sessions import simulate_sessions
from orchestrator.spec.workload import ConversationSpec
from tests.support.cpu_vllm_helpers import build_tiny_model, vllm_python
from tests.support.ports import free_port
from tests.support.process_groups import stop_group

REPO = Path(__file__).resolve().parents[3]
READY_TIMEOUT_S = 420.0
N, MAX_LEN = 5, 512
CONV = ConversationSpec(turns=3, first_input_tokens=150, think_time_s=0.2)


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.read().decode()
    except OSError:
        return None


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    python = vllm_python()
    tmp = tmp_path_factory.mktemp("prefix")
    model = build_tiny_model(tmp / "model")
    port = free_port()
    log = (tmp / "vllm.log").open("w")
    argv = [str(Path(python).parent / "vllm"), "serve", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--max-model-len", str(MAX_LEN), "--enforce-eager"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while _get(url + "/health") is None:
            assert proc.poll() is None, (tmp / "vllm.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"vllm not healthy in {READY_TIMEOUT_S:.0f} s"
            time.sleep(2)
        yield url, model
    finally:
        stop_group(proc, log)


def _counters(url: str) -> tuple[float, float]:
    f = parse_prometheus(_get(url + "/metrics") or "")
    return f.get("prefix_hits", 0.0), f.get("prefix_queries", 0.0)


@pytest.mark.vllm_cpu
def test_conversations_hit_vllms_prefix_cache_as_the_simulator_predicts(
        served: tuple[str, Path], tmp_path: Path) -> None:
    url, model = served
    hits0, queries0 = _counters(url)
    out = tmp_path / "records.jsonl"
    argv = [vllm_python(), "-c", "from orchestrator.cli import main; main()", "bench", "--base-url", url,
            "--model", str(model), "--tokenizer", str(model), "--workload", "conversation",
            "--reencodable-answers", "--rate", "2", "--num-requests", str(N), "--turns", "3",
            "--first-input-len", "150", "--input-len", "30", "--output-len", "20", "--think-time-s", "0.2",
            "--max-model-len", str(MAX_LEN), "--seed", "3", "--json", "--save", str(out)]
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    hits1, queries1 = _counters(url)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    plans = conversation_sessions(N, CONV, 30, 20, seed=3, max_model_len=MAX_LEN).plans
    cfg, cpu = load_model(str(model / "config.json")), load_gpu("cpu")
    # vLLM's own settings for this model, at its CPU block size (vllm/platforms/cpu.py: 128 unless set)
    settings = resolve_settings("vllm", cpu, cfg, SettingsRequest(block_size=128, max_model_len=MAX_LEN))
    inputs = PlanInputs(cfg=cfg, gpu=cpu, cluster=Cluster(1, 2), settings=settings)
    predicted = simulate_sessions(replica_engines(inputs, parse_layout("tp1")), plans,
                                  starts=[0.5 * i for i in range(N)])
    planned = {r.request_id: r.prompt_tokens for r in predicted.records}
    assert len(records) == len(planned) == 3 * N and all(r["error"] is None for r in records)
    assert {r["request_id"]: r["prompt_tokens"] for r in records} == planned  # vLLM's usage, token for token
    assert queries1 - queries0 == sum(planned.values())  # each prompt looked up once
    cache = predicted.summary.prefix_cache
    assert cache is not None and cache.hits > 0
    assert hits1 - hits0 == cache.hits  # whole 128-token blocks of each turn's history, as predicted
