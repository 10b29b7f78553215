"""One load point of each peer load generator, run as a subprocess and judged on its own output.

bench/loadgen_ceiling.py calls `run_peer` once per target rate; `find_peers` says which tools exist.
Each point asks the tool for `n = max(2, round(rate * duration_s))` requests at `rate` req/s with the
closest it has to constant arrivals, a ~8-token synthetic prompt, 32 output tokens, streaming POSTs to
`<url>/v1/completions`, at most `cap` in flight, every file it writes in a fresh temp dir (also its
cwd). Nothing here pins anything: pass `preexec_fn` (e.g. a sched_setaffinity call) to pin the tool;
its child processes inherit it. Start-up (imports, tokenizer, data generation before the first send,
the tools' own probe requests) is not counted: `duration_s` and `achieved_rate` come from the tool's
own timestamps. Tools are run offline: HF_HUB_OFFLINE=1 / TRANSFORMERS_OFFLINE=1 (not for AIPerf, see
below) and HF_ENDPOINT pointed at a closed local port, so a stray hub call fails at once.

achieved_rate = the tool's achieved *send* rate, from the per-request send times it writes itself:
(number of sends - 1) / (last send - first send), the same definition as orchestrator.loadgen.metrics'
achieved_rate. None of the three reports an aggregate send rate, but all three record each request's
start; the tool's own throughput figure (completed / its benchmark duration) is kept in
`reported_rate`, and `note` says which fields were used.

Tested versions and exact flags (N = request count, R = rate, C = cap, T = tokenizer dir, D = temp dir):

vllm bench serve (vLLM 0.32.0+cpu), `<ORCH_VLLM_PYTHON's bin>/vllm`:
  bench serve --backend openai --base-url URL --endpoint /v1/completions --model m --tokenizer T
  --dataset-name random --random-input-len 8 --random-output-len 32 --num-prompts N --request-rate R
  --burstiness 10000 --max-concurrency C --ignore-eos --seed 0 --disable-tqdm --save-result
  --save-detailed --result-dir D --result-filename result.json
  (burstiness 10000 = gamma inter-arrivals with CV 1%: vLLM has no constant schedule.)
  From result.json: n_sent = len(start_times), n_completed = completed, n_failed = failed,
  duration_s = duration (its timer starts after the initial single-prompt test request),
  achieved_rate = span rate of start_times (perf_counter when each request func starts, i.e. after
  the concurrency semaphore), reported_rate = request_throughput (= completed / duration).

guidellm (0.8.1):
  run --backend kind=openai_http,target=URL,model=m,request_format=/v1/completions,stream=true
  --profile kind=constant,rate=R,max_concurrency=C --constraint kind=max_requests,count=N
  --tokenizer kind=huggingface_auto,model=T --data kind=synthetic_text,prompt_tokens=8,output_tokens=32
  --seed kind=static,value=0 --output kind=json,path=D/benchmarks.json --disable-console
  From benchmarks[0] of the JSON: n_completed = len(requests.successful), n_failed = len(errored) +
  len(incomplete), n_sent = requests with info.timings.request_start, duration_s = duration,
  achieved_rate = span rate of request_start, reported_rate = metrics.requests_per_second.successful.mean.
  (Its metrics.request_totals can count fewer requests than the per-request lists: 3998 of 4000 seen;
  the lists are used, and a mismatch is noted.)

aiperf (0.13.0):
  profile --url URL --model m --endpoint-type completions --streaming --tokenizer T --isl 8
  --isl-stddev 0 --output-tokens-mean 32 --output-tokens-stddev 0 --request-rate R
  --arrival-pattern constant --concurrency C --request-count N --random-seed 0 --artifact-dir D
  --export-level records --no-server-metrics --no-gpu-telemetry --ui none
  Run WITHOUT HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE: in offline mode AIPerf 0.13.0 resolves the tokenizer
  name through snapshot_download(local_files_only=True), which rejects a local directory path
  (HFValidationError); online, a local path is loaded directly (HF_ENDPOINT still points nowhere).
  From D/profile_export.jsonl (one record per request, profiling phase): n_sent = records,
  n_failed = records with an error, n_completed = the rest; achieved_rate = span rate of
  metadata.request_start_ns; from D/profile_export_aiperf.json: duration_s = benchmark_duration,
  reported_rate = request_throughput.

A tool that exits non-zero or writes no result raises RuntimeError naming the tool and the tail of its
output; one that runs past `timeout_s` is killed and returns a point with nothing completed (a fail).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VLLM = "vllm bench serve"
GUIDELLM = "guidellm"
AIPERF = "aiperf"
PROMPT_TOKENS = 8
OUTPUT_TOKENS = 32
DEFAULT_TIMEOUT_S = 600.0
_NO_HUB = "http://127.0.0.1:9"  # discard port: nothing listens, so any hub request fails at once

PreexecFn = Callable[[], None] | None


@dataclass(frozen=True)
class PeerPoint:
    tool: str
    target_rate: float
    n_sent: int
    n_completed: int
    n_failed: int
    achieved_rate: float  # sends/s from the tool's own per-request send times (module docstring)
    duration_s: float  # the tool's own benchmark duration, start-up excluded
    note: str
    reported_rate: float | None = None  # the tool's own request throughput figure


def find_peers() -> dict[str, str]:
    """{tool: executable} for the peers whose executables exist, from ORCH_VLLM_PYTHON (a Python whose
    bin dir holds `vllm`), ORCH_GUIDELLM and ORCH_AIPERF (paths to the executables)."""
    found: dict[str, str] = {}
    vpy = os.environ.get("ORCH_VLLM_PYTHON")
    if vpy:
        exe = Path(vpy).parent / "vllm"
        if exe.is_file() and os.access(exe, os.X_OK):
            found[VLLM] = str(exe)
    for tool, var in ((GUIDELLM, "ORCH_GUIDELLM"), (AIPERF, "ORCH_AIPERF")):
        path = os.environ.get(var)
        if path and Path(path).is_file() and os.access(path, os.X_OK):
            found[tool] = path
    return found


def _n_requests(rate: float, duration_s: float) -> int:
    return max(2, round(rate * duration_s))


def _span_rate(times: Sequence[float]) -> float:
    """(n - 1) / (last - first), as orchestrator.loadgen.metrics computes achieved_rate; 0 if < 2."""
    if len(times) < 2:
        return 0.0
    span = max(times) - min(times)
    return (len(times) - 1) / span if span > 0 else float("inf")


def _env(offline: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_ENDPOINT=_NO_HUB, HF_HUB_DISABLE_TELEMETRY="1", DO_NOT_TRACK="1",
               VLLM_NO_USAGE_STATS="1", TOKENIZERS_PARALLELISM="false")
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        if offline:
            env[var] = "1"
        else:
            env.pop(var, None)
    return env


def _run(tool: str, argv: list[str], cwd: str, env: dict[str, str], timeout_s: float,
         preexec_fn: PreexecFn) -> float | None:
    """Run the tool; its wall time (start-up included), or None if it ran past timeout_s."""
    log = Path(cwd, "tool-output.log")
    t0 = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, preexec_fn=preexec_fn, start_new_session=True)
        try:
            rc = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # its own session: the tool and the workers it spawned
            proc.wait()
            return None
        except BaseException:  # interrupted: the tool must not outlive the benchmark
            os.killpg(proc.pid, 9)
            proc.wait()
            raise
    if rc != 0:
        tail = log.read_bytes()[-3000:].decode(errors="replace")
        raise RuntimeError(f"{tool} exited with {rc}; `{' '.join(argv)}`; output tail:\n{tail}")
    return time.perf_counter() - t0


def _timed_out(tool: str, rate: float, n: int, timeout_s: float) -> PeerPoint:
    return PeerPoint(tool, rate, 0, 0, 0, 0.0, 0.0, f"killed after {timeout_s:g} s (asked for {n} requests)")


def _load(tool: str, path: Path) -> Any:
    if not path.is_file():
        raise RuntimeError(f"{tool} exited 0 but wrote no {path.name}")
    return json.loads(path.read_text())


def run_vllm(url: str, rate: float, duration_s: float, cap: int, tokenizer: str, exe: str,
             preexec_fn: PreexecFn = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> PeerPoint:
    """One point of `vllm bench serve` (flags and derivation in the module docstring)."""
    n = _n_requests(rate, duration_s)
    with tempfile.TemporaryDirectory(prefix="orch-peer-vllm-") as d:
        argv = [exe, "bench", "serve", "--backend", "openai", "--base-url", url,
                "--endpoint", "/v1/completions", "--model", "m", "--tokenizer", tokenizer,
                "--dataset-name", "random", "--random-input-len", str(PROMPT_TOKENS),
                "--random-output-len", str(OUTPUT_TOKENS), "--num-prompts", str(n),
                "--request-rate", f"{rate:g}", "--burstiness", "10000", "--max-concurrency", str(cap),
                "--ignore-eos", "--seed", "0", "--disable-tqdm", "--save-result", "--save-detailed",
                "--result-dir", d, "--result-filename", "result.json"]
        wall = _run(VLLM, argv, d, _env(offline=True), timeout_s, preexec_fn)
        if wall is None:
            return _timed_out(VLLM, rate, n, timeout_s)
        res = _load(VLLM, Path(d, "result.json"))
    starts = [float(t) for t in res.get("start_times") or [] if t]
    return PeerPoint(
        VLLM, rate, n_sent=len(starts), n_completed=int(res["completed"]), n_failed=int(res["failed"]),
        achieved_rate=_span_rate(starts), duration_s=float(res["duration"]),
        note=(f"send rate from start_times; request_throughput {res['request_throughput']:.0f}/s; "
              f"gamma arrivals, burstiness 10000; {n} asked; wall {wall:.1f} s"),
        reported_rate=float(res["request_throughput"]))


def run_guidellm(url: str, rate: float, duration_s: float, cap: int, tokenizer: str, exe: str,
                 preexec_fn: PreexecFn = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> PeerPoint:
    """One point of `guidellm run` (flags and derivation in the module docstring)."""
    n = _n_requests(rate, duration_s)
    with tempfile.TemporaryDirectory(prefix="orch-peer-guidellm-") as d:
        out = Path(d, "benchmarks.json")
        argv = [exe, "run",
                "--backend", f"kind=openai_http,target={url},model=m,request_format=/v1/completions,"
                             "stream=true",
                "--profile", f"kind=constant,rate={rate:g},max_concurrency={cap}",
                "--constraint", f"kind=max_requests,count={n}",
                "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
                "--data", f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={OUTPUT_TOKENS}",
                "--seed", "kind=static,value=0",
                "--output", f"kind=json,path={out}", "--disable-console"]
        wall = _run(GUIDELLM, argv, d, _env(offline=True), timeout_s, preexec_fn)
        if wall is None:
            return _timed_out(GUIDELLM, rate, n, timeout_s)
        res = _load(GUIDELLM, out)
    benches = res.get("benchmarks") or []
    if len(benches) != 1:
        raise RuntimeError(f"guidellm wrote {len(benches)} benchmarks, expected 1")
    b = benches[0]
    reqs = b["requests"]
    ok, errored, incomplete = (reqs.get(k) or [] for k in ("successful", "errored", "incomplete"))
    starts = [float(t) for r in (*ok, *errored, *incomplete)
              if (t := ((r.get("info") or {}).get("timings") or {}).get("request_start"))]
    totals = b["metrics"]["request_totals"]
    mismatch = "" if int(totals["successful"]) == len(ok) else (
        f"; its request_totals say {totals['successful']} successful, its request list {len(ok)}")
    reported = float(b["metrics"]["requests_per_second"]["successful"]["mean"])
    return PeerPoint(
        GUIDELLM, rate, n_sent=len(starts), n_completed=len(ok), n_failed=len(errored) + len(incomplete),
        achieved_rate=_span_rate(starts), duration_s=float(b["duration"]),
        note=(f"send rate from requests[].info.timings.request_start; requests_per_second "
              f"{reported:.0f}/s; {n} asked; wall {wall:.1f} s{mismatch}"),
        reported_rate=reported)


def run_aiperf(url: str, rate: float, duration_s: float, cap: int, tokenizer: str, exe: str,
               preexec_fn: PreexecFn = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> PeerPoint:
    """One point of `aiperf profile` (flags and derivation in the module docstring)."""
    n = _n_requests(rate, duration_s)
    with tempfile.TemporaryDirectory(prefix="orch-peer-aiperf-") as d:
        argv = [exe, "profile", "--url", url, "--model", "m", "--endpoint-type", "completions",
                "--streaming", "--tokenizer", tokenizer, "--isl", str(PROMPT_TOKENS), "--isl-stddev", "0",
                "--output-tokens-mean", str(OUTPUT_TOKENS), "--output-tokens-stddev", "0",
                "--request-rate", f"{rate:g}", "--arrival-pattern", "constant", "--concurrency", str(cap),
                "--request-count", str(n), "--random-seed", "0", "--artifact-dir", d,
                "--export-level", "records", "--no-server-metrics", "--no-gpu-telemetry", "--ui", "none"]
        wall = _run(AIPERF, argv, d, _env(offline=False), timeout_s, preexec_fn)
        if wall is None:
            return _timed_out(AIPERF, rate, n, timeout_s)
        summary = _load(AIPERF, Path(d, "profile_export_aiperf.json"))
        records_path = Path(d, "profile_export.jsonl")
        if not records_path.is_file():
            raise RuntimeError("aiperf exited 0 but wrote no profile_export.jsonl")
        records = [json.loads(line) for line in records_path.read_text().splitlines() if line.strip()]
    records = [r for r in records
               if (r.get("metadata") or {}).get("benchmark_phase", "profiling") == "profiling"]
    failed = sum(1 for r in records if r.get("error"))
    starts = [int(t) / 1e9 for r in records if (t := r["metadata"].get("request_start_ns"))]
    reported = float(summary["request_throughput"]["avg"]) if "request_throughput" in summary else None
    reported_s = f"{reported:.0f}/s" if reported is not None else "absent"
    return PeerPoint(
        AIPERF, rate, n_sent=len(records), n_completed=len(records) - failed, n_failed=failed,
        achieved_rate=_span_rate(starts), duration_s=float(summary["benchmark_duration"]["avg"]),
        note=(f"send rate from profile_export.jsonl request_start_ns; request_throughput {reported_s}; "
              f"{n} asked; wall {wall:.1f} s"),
        reported_rate=reported)


RUNNERS: dict[str, Callable[..., PeerPoint]] = {VLLM: run_vllm, GUIDELLM: run_guidellm, AIPERF: run_aiperf}


def run_peer(tool: str, exe: str, url: str, rate: float, duration_s: float, cap: int, tokenizer: str,
             preexec_fn: PreexecFn = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> PeerPoint:
    """One load point of `tool` (a key of find_peers())."""
    if tool not in RUNNERS:
        raise ValueError(f"unknown peer tool {tool!r}; known: {', '.join(RUNNERS)}")
    return RUNNERS[tool](url, rate, duration_s, cap, tokenizer, exe, preexec_fn, timeout_s)
