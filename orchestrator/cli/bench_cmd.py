"""`orch bench`: measure any OpenAI-compatible streaming endpoint at load points, or search for the
highest request rate that meets an SLO. Metric definitions: orchestrator/loadgen/metrics.py.

Exit codes a CI job can act on (README "Exit codes"): 0 every point passed; 6 (RequestsFailed) a
point's failed fraction passed --max-error-rate or no request completed; 7 (SLONotMet) --slo given
and a point missed it (--search: no rate met it); 2 bad flags; 130 interrupted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orchestrator.cli import app, make_console
from orchestrator.cli.bench_tables import print_points
from orchestrator.cli.progress import RequestLines, stderr_is_terminal
from orchestrator.errors import OrchError, RequestsFailed, SLONotMet, SpecError

if TYPE_CHECKING:  # the load generator (numpy, orjson) is imported only when `orch bench` runs
    from orchestrator.loadgen.bench import BenchRun, PointResult, WorkloadFactory
    from orchestrator.loadgen.records import RequestRecord
    from orchestrator.loadgen.texts import Tokenizer

WORKLOAD_KINDS = ("random", "sharegpt", "prefix", "trace", "conversation", "agentic")
# Stated here as well as in loadgen.client (the option's default must be a literal for --help): a test
# keeps the two equal.
DEFAULT_IDLE_TIMEOUT_S = 60.0
DEFAULT_OUTPUT_LEN = "128"
BALANCE_KINDS = ("round_robin", "least_outstanding", "prefix_aware")
ARRIVALS = ("poisson", "gamma", "constant")


def _choice(value: str, allowed: tuple[str, ...], flag: str) -> str:
    if value not in allowed:
        raise SpecError(f"{flag}: {value!r} is not one of {', '.join(allowed)}")
    return value


def _numbers(text: str, flag: str, *, integer: bool = False) -> list[float]:
    out: list[float] = []
    for part in text.split(","):
        p = part.strip().lower()
        try:
            v = float(p) if p != "inf" or integer else math.inf
        except ValueError:
            raise SpecError(f"{flag}: {part!r} is not a number (e.g. {flag} 4,8,16)") from None
        if math.isnan(v) or (math.isinf(v) and p != "inf"):
            raise SpecError(f"{flag}: {part!r} is not a finite number (e.g. {flag} 4,8,16"
                            + ("; inf sends all at once)" if not integer else ")"))
        if v <= 0 or (integer and v != int(v)):
            kind = "positive integers" if integer else "positive numbers"
            raise SpecError(f"{flag}: {part!r}: give {kind} separated by commas")
        out.append(v)
    return out


def parse_slo_flag(text: str | None) -> dict[str, float]:
    """'ttft_p99_ms=2000,itl_p99_ms=50' -> {"ttft_p99_ms": 2000.0, "itl_p99_ms": 50.0}."""
    from orchestrator.loadgen.slo import parse_slo

    if not text:
        return {}
    out: dict[str, float] = {}
    for part in text.split(","):
        key, sep, val = part.partition("=")
        try:
            out[key.strip()] = float(val)
        except ValueError:
            sep = ""
        if not sep:
            raise SpecError(f"--slo: {part!r} must be KEY=MS, e.g. --slo ttft_p99_ms=2000,itl_p99_ms=50")
    try:
        parse_slo(out)
    except ValueError as exc:
        raise SpecError(f"--slo: {exc}") from None
    return out


def _workload_factory(kind: str, input_len: str, output_len: str | None, prefix_len: int, num_prefixes: int,
                      dataset: str | None, tokenizer_dir: str | None, seed: int,
                      sessions: dict[str, Any] | None = None, duration_s: float | None = None,
                      trace_format: str = "auto", time_scale: float = 1.0) -> WorkloadFactory:
    from orchestrator.loadgen.texts import load_tokenizer
    from orchestrator.loadgen.workloads import (
        parse_length,
        prefix_workload,
        random_workload,
        sharegpt_workload,
        trace_workload,
    )

    tok: Tokenizer | None = load_tokenizer(tokenizer_dir) if tokenizer_dir else None
    n_in = parse_length(input_len, "--input-len")
    given_out = parse_length(output_len, "--output-len") if output_len is not None else None
    n_out = given_out if given_out is not None else parse_length(DEFAULT_OUTPUT_LEN, "--output-len")
    if kind in ("sharegpt", "trace") and not dataset:
        raise SpecError(f"--workload {kind} needs --dataset FILE")
    if kind in ("conversation", "agentic"):
        return _session_factory(kind, input_len, output_len, given_out, dataset, tok, seed, sessions or {})
    if kind == "random":
        return partial(random_workload, input_len=n_in, output_len=n_out, seed=seed, tokenizer=tok)
    if kind == "prefix":
        return partial(prefix_workload, prefix_len=prefix_len, input_len=n_in, output_len=n_out,
                       num_prefixes=num_prefixes, seed=seed, tokenizer=tok)
    assert dataset is not None
    if kind == "sharegpt":
        sharegpt_workload(dataset, 1, tokenizer=tok)  # fail now on a bad file, not mid-run
        return partial(sharegpt_workload, dataset, output_len=given_out, seed=seed, tokenizer=tok)
    from orchestrator.loadgen.traces import TRACE_FORMATS, TraceFormat

    tf: TraceFormat = _choice(trace_format, TRACE_FORMATS, "--trace-format")  # type: ignore[assignment]
    if not time_scale > 0:
        raise SpecError(f"--time-scale: {time_scale} must be positive (2 replays the trace twice as fast)")
    until = None if duration_s is None or math.isinf(duration_s) else duration_s
    trace_workload(dataset, n=1, fmt=tf, tokenizer=tok)  # fail now on a bad file, not mid-run
    # streamed: only the requests used are read (--num-requests, or those before --duration-s)
    return lambda n: trace_workload(dataset, n=n or None, duration_s=until, fmt=tf, time_scale=time_scale,
                                    seed=seed, tokenizer=tok)


def _session_factory(kind: str, input_len: str, output_len: str | None, given_out: Any, dataset: str | None,
                     tok: Tokenizer | None, seed: int, opts: dict[str, Any]) -> WorkloadFactory:
    """Conversations (or ShareGPT conversations with every turn, with --dataset) and agentic sessions,
    the flags as a workload spec."""
    from pydantic import ValidationError

    from orchestrator.loadgen.spec_workload import session_factory
    from orchestrator.spec.workload import WorkloadSpec

    conversation: dict[str, Any] = {"think_time_s": opts.get("think_time_s") or 0.0,
                                    "system_prompt_tokens": opts.get("system_prompt_len") or 0}
    for key, flag in (("turns", "turns"), ("first_input_tokens", "first_input_len")):
        if opts.get(flag):
            conversation[key] = _length_field(opts[flag], "--" + flag.replace("_", "-"))
    try:
        w = WorkloadSpec(kind=kind, input_tokens=_length_field(input_len, "--input-len"),
                         output_tokens=_length_field(output_len or DEFAULT_OUTPUT_LEN, "--output-len"),
                         conversation=conversation if kind == "conversation" else None,
                         dataset_path=dataset, num_requests=1, seed=seed)  # (the count is the run's)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = next((str(x) for x in reversed(err["loc"]) if str(x) in _FLAG_OF), "")
        raise SpecError(f"{_FLAG_OF.get(field, 'session flags')}: {err['msg']}") from None
    build = session_factory(w, opts.get("max_model_len"), tokenizer=tok,
                            reencodable_answers=bool(opts.get("reencodable_answers")),
                            dataset_output_len=given_out)
    build(1)  # fail now on a bad dataset, not mid-run
    return build


_FLAG_OF = {"turns": "--turns", "think_time_s": "--think-time-s",
            "system_prompt_tokens": "--system-prompt-len", "first_input_tokens": "--first-input-len",
            "input_tokens": "--input-len", "output_tokens": "--output-len", "dataset_path": "--dataset"}


def _length_field(text: str, flag: str) -> Any:
    from orchestrator.loadgen.workloads import parse_length

    return parse_length(text, flag)

class _Bar:
    """Rich progress bar fed by every completed record (drawn on stderr so --json stays clean)."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task: Any = None

    def begin(self, label: str, total: int | None) -> None:
        if self.task is not None:
            self.progress.update(self.task, visible=False)
        self.task = self.progress.add_task(label, total=total, failed=0)
        self.failed = 0

    def append(self, rec: RequestRecord, /) -> None:
        if rec.error is not None:
            self.failed += 1
            self.progress.update(self.task, advance=1, failed=self.failed)
        else:
            self.progress.advance(self.task)


@app.command()
def bench(
    base_url: Annotated[str, typer.Option("--base-url", help="Server URL(s), comma-separated replicas.")],
    model: Annotated[str, typer.Option("--model", help="Model name the server serves.")],
    endpoint: Annotated[str, typer.Option(help="completions or chat.")] = "completions",
    workload: Annotated[str, typer.Option(
        help="random, sharegpt, prefix, trace, conversation or agentic (sessions: --rate and "
             "--num-requests count sessions).")] = "random",
    input_len: Annotated[str, typer.Option(help="N, uniform:MIN-MAX, normal:MEAN,STD, lognormal:MEAN,STD.")]
    = "1024",
    output_len: Annotated[str | None, typer.Option(
        help="Output tokens, same forms as --input-len (default 128; sharegpt: the reply's length).")] = None,
    prefix_len: Annotated[int, typer.Option(help="prefix workload: shared prefix tokens.")] = 512,
    num_prefixes: Annotated[int, typer.Option(help="prefix workload: distinct shared prefixes.")] = 1,
    dataset: Annotated[str | None, typer.Option(
        help="ShareGPT JSON (conversation: every turn) or a trace (Mooncake, Azure, BurstGPT, orch).")]
    = None,
    trace_format: Annotated[str, typer.Option(
        help="trace: auto, mooncake, azure, burstgpt or orch.")] = "auto",
    time_scale: Annotated[float, typer.Option(help="trace: replay speed (2: twice as fast).")] = 1.0,
    turns: Annotated[str | None, typer.Option(
        help="conversation: turns per session, same forms as --input-len (default 4).")] = None,
    first_input_len: Annotated[str | None, typer.Option(
        help="conversation: new user tokens of a session's first turn (default: --input-len).")] = None,
    think_time_s: Annotated[float, typer.Option(
        help="conversation: seconds between an answer and the next turn.")] = 0.0,
    system_prompt_len: Annotated[int, typer.Option(
        help="conversation: tokens of a system prompt every session shares.")] = 0,
    max_model_len: Annotated[int | None, typer.Option(
        min=1, help="Sessions are cut where a turn would pass it (the cut is reported).")] = None,
    reencodable_answers: Annotated[bool, typer.Option(
        "--reencodable-answers", help="conversation, agentic, with --tokenizer: answers made only of tokens "
        "of a space and a word (vLLM's allowed_token_ids), so a turn's history re-encodes to the tokens the "
        "engine generated and its prefix cache can reuse them (a random-weight test model's answers "
        "otherwise do not survive decoding).")] = False,
    tokenizer: Annotated[str | None, typer.Option(help="Local HF tokenizer dir (exact prompt lengths).")]
    = None,
    rate: Annotated[str | None, typer.Option(help="Request rates, comma-separated (inf: all at once).")]
    = None,
    concurrency: Annotated[str | None, typer.Option(help="Closed-loop concurrencies, comma-separated.")]
    = None,
    search: Annotated[bool, typer.Option("--search", help="Find the highest rate meeting --slo.")] = False,
    search_start: Annotated[float, typer.Option(help="First rate of --search, req/s.")] = 1.0,
    search_max: Annotated[float, typer.Option(help="Highest rate --search tries, req/s.")] = 1e6,
    search_tol: Annotated[float, typer.Option(help="--search stops when the bracket is this narrow.")]
    = 0.05,
    arrival: Annotated[str, typer.Option(help="poisson, gamma or constant.")] = "poisson",
    burstiness: Annotated[float, typer.Option(help="gamma shape: 1 is Poisson, below 1 burstier.")] = 1.0,
    max_concurrency: Annotated[int | None, typer.Option(help="Cap on requests in flight.")] = None,
    num_requests: Annotated[int | None, typer.Option(help="Requests per load point.")] = None,
    duration_s: Annotated[float | None, typer.Option(help="Seconds per load point.")] = None,
    warmup_s: Annotated[float, typer.Option(help="Seconds at the start excluded from metrics.")] = 0.0,
    cooldown_s: Annotated[float, typer.Option(help="Seconds at the end excluded from metrics.")] = 0.0,
    slo: Annotated[str | None, typer.Option(help="e.g. ttft_p99_ms=2000,itl_p99_ms=50")] = None,
    max_error_rate: Annotated[float, typer.Option(help="Largest failed fraction that passes.")] = 0.01,
    balance: Annotated[str, typer.Option(
        help="round_robin, least_outstanding or prefix_aware over replicas.")] = "round_robin",
    ignore_eos: Annotated[bool, typer.Option(help="Ask for exactly max_tokens (ignore_eos).")] = True,
    timeout_s: Annotated[float, typer.Option(help="Per-request timeout (connect to last byte).")] = 600.0,
    idle_timeout_s: Annotated[float, typer.Option(
        help="A request fails as 'stalled' when this long passes without its response head or a whole "
        "streamed event (a server dribbling bytes counts as silent).")] = DEFAULT_IDLE_TIMEOUT_S,
    max_response_bytes: Annotated[int, typer.Option(
        help="Body bytes one response may carry; a longer one fails as too_large.")] = 64 * 1024 * 1024,
    gpus: Annotated[int | None, typer.Option(help="GPUs behind the endpoints, for per-GPU figures.")] = None,
    workers: Annotated[int, typer.Option(help="Open-loop sender processes (when one core is not enough).")]
    = 1,
    seed: Annotated[int, typer.Option(help="Seed of prompts, lengths and arrivals.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    fmt: Annotated[str, typer.Option("--format", help="--json layout: orch, or vllm (`vllm bench serve "
                                     "--save-result`; a list when there are several points).")] = "orch",
    save: Annotated[str | None, typer.Option(help="Write every request record to FILE.jsonl.")] = None,
    wide: Annotated[bool, typer.Option("--wide", help="Every column, however narrow the terminal.")] = False,
) -> None:
    """Measure an OpenAI-compatible streaming server: TTFT, ITL, TPOT, E2E, throughput, goodput."""
    from orchestrator.loadgen.balance import Balance
    from orchestrator.loadgen.bench import BenchConfig, BenchRun, LoadPoint, run_bench, save_records
    from orchestrator.loadgen.client import Arrival, ClientConfig, Endpoint
    from orchestrator.loadgen.metrics import finite

    ep: Endpoint = _choice(endpoint, ("completions", "chat"), "--endpoint")  # type: ignore[assignment]
    kind = _choice(workload, WORKLOAD_KINDS, "--workload")
    arr: Arrival = _choice(arrival, ARRIVALS, "--arrival")  # type: ignore[assignment]
    bal: Balance = _choice(balance, BALANCE_KINDS, "--balance")  # type: ignore[assignment]
    _choice(fmt, ("orch", "vllm"), "--format")
    urls = [u.strip() for u in base_url.split(",") if u.strip()]
    if not urls or any(not u.startswith(("http://", "https://")) for u in urls):
        raise SpecError(f"--base-url: {base_url!r}: give http(s)://HOST:PORT[,http://HOST2:PORT2]")
    modes = sum(x is not None for x in (rate, concurrency)) + search
    if kind == "trace":
        if modes:
            raise SpecError("--workload trace: the trace sets arrivals; drop --rate/--concurrency/--search")
    elif modes != 1:
        raise SpecError("give exactly one of --rate R[,R2], --concurrency N[,N2] or --search")
    if num_requests is None and duration_s is None and kind != "trace":
        raise SpecError("give --num-requests N or --duration-s S (or both)")
    for flag, val in (("--num-requests", num_requests), ("--duration-s", duration_s),
                      ("--max-concurrency", max_concurrency), ("--timeout-s", timeout_s),
                      ("--idle-timeout-s", idle_timeout_s),
                      ("--burstiness", burstiness), ("--search-start", search_start), ("--gpus", gpus),
                      ("--search-max", search_max), ("--search-tol", search_tol), ("--workers", workers),
                      ("--max-response-bytes", max_response_bytes)):
        if val is not None and not (val > 0 and math.isfinite(val)):  # (not > catches NaN too)
            raise SpecError(f"{flag}: {val} must be a positive, finite number")
    for flag, val in (("--warmup-s", warmup_s), ("--cooldown-s", cooldown_s)):
        if not (val >= 0 and math.isfinite(val)):
            raise SpecError(f"{flag}: {val} must be a finite number of seconds, 0 or more")
    if not 0 <= max_error_rate <= 1:
        raise SpecError(f"--max-error-rate: {max_error_rate} must be a fraction from 0 to 1, e.g. 0.01")
    if workers > 1 and concurrency is not None:
        raise SpecError("--workers is for open-loop points (--rate, --search, trace), not --concurrency")
    if search_max < search_start:
        raise SpecError(f"--search-max ({search_max:g}) must be at least --search-start ({search_start:g})")
    slo_d = parse_slo_flag(slo)
    if search and not slo_d:
        raise SpecError("--search needs --slo, e.g. --slo ttft_p99_ms=2000")
    if rate is not None and any(math.isinf(r) for r in _numbers(rate, "--rate")) and num_requests is None:
        raise SpecError("--rate inf needs --num-requests N")
    factory = _workload_factory(
        kind, input_len, output_len, prefix_len, num_prefixes, dataset, tokenizer, seed,
        sessions={"turns": turns, "think_time_s": think_time_s, "system_prompt_len": system_prompt_len,
                  "max_model_len": max_model_len, "reencodable_answers": reencodable_answers,
                  "first_input_len": first_input_len},
        duration_s=duration_s, trace_format=trace_format, time_scale=time_scale,
    )
    if kind == "trace" and num_requests is None and duration_s is None:
        duration_s = math.inf  # the whole trace
    targets = tuple(ClientConfig(u, model, ep, timeout_s, ignore_eos, max_response_bytes=max_response_bytes,
                                 idle_timeout_s=idle_timeout_s) for u in urls)
    cfg = BenchConfig(targets, bal, arr, burstiness, num_requests, duration_s, max_concurrency, warmup_s,
                      cooldown_s, seed, slo_d, max_error_rate, gpus, workers)
    if kind == "trace":
        points = [LoadPoint(trace=True)]
    elif rate is not None:
        points = [LoadPoint(rate=r) for r in _numbers(rate, "--rate")]
    elif concurrency is not None:
        points = [LoadPoint(concurrency=int(c)) for c in _numbers(concurrency, "--concurrency", integer=True)]
    else:
        points = []
    run = BenchRun(cfg)
    console = make_console(stderr=as_json)  # off a terminal: wide enough that no column is cut
    interrupted = False
    # A live bar on a terminal; off one (a CI log, a pipe) a line per point and a count every 10 s.
    live = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("failed {task.fields[failed]}"), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True) if stderr_is_terminal() else None
    reporter = _Bar(live) if live is not None else RequestLines("bench ")
    try:
        with live if live is not None else contextlib.nullcontext():
            asyncio.run(run_bench(run, factory, points, search=search, start_rate=search_start,
                                  max_rate=search_max, rel_tol=search_tol, progress=reporter))
    except KeyboardInterrupt:
        interrupted = True
        partial_point = run.partial()
        if partial_point is not None:
            run.points.append(partial_point)
    except ValueError as exc:  # configuration the runner rejects
        raise OrchError(f"bench: {exc}") from None
    if save:
        n = save_records(save, run.points)
        console.print(f"saved {n} request records to {save}", markup=False)
    if as_json and fmt == "vllm":
        from orchestrator.loadgen.vllm_format import vllm_result

        results = [vllm_result(p, cfg, tokenizer) for p in run.points]
        typer.echo(json.dumps(finite(results[0] if len(results) == 1 else results), indent=2))
    elif as_json:
        typer.echo(json.dumps(finite(run.to_dict()), indent=2))
    else:
        print_points(console, run.points, "orch bench (latencies in ms as p50 / p99; throughput over the "
                     "measurement window)", wide=wide)
        if run.search_stopped_because is not None:
            best = "none" if run.best_rate is None else f"{run.best_rate:.3g} req/s"
            console.print(f"highest rate meeting the SLO: {best} ({run.search_stopped_because})")
    for p in run.points:
        m = p.metrics
        if m.n_requests and m.n_completed == 0 and m.n_failed == m.n_requests:
            kinds = ", ".join(m.failures)
            console.print(f"warning: every request of {p.point.label} failed ({kinds}); check --base-url, "
                          "--model and --endpoint", style="yellow", markup=False)
    if interrupted:
        raise typer.Exit(130)
    failure = _failure(run, max_error_rate)
    if failure is not None:
        raise failure


def _failure(run: BenchRun, max_error_rate: float) -> OrchError | None:
    """Why the run should exit non-zero (RequestsFailed before SLONotMet), or None."""
    from orchestrator.loadgen.search import verdict

    def too_many_failed(p: PointResult) -> str:
        why = verdict(p.metrics, {}, max_error_rate)  # completion and error rate only
        kinds = ", ".join(f"{k}={v}" for k, v in p.metrics.failures.items())
        return f"{p.point.label}: {why}" + (f" ({kinds})" if kinds else "") if why else ""

    if run.search_stopped_because is not None:  # failing points are how a search brackets
        if run.best_rate is not None:
            return None
        reasons = [too_many_failed(p) for p in run.points]
        if all(reasons):
            return RequestsFailed(f"bench --search: no rate met the SLO; requests failed at every rate "
                                  f"({reasons[0]})")
        return SLONotMet(f"bench --search: no rate met the SLO ({run.search_stopped_because})")
    failed = [why for p in run.points if (why := too_many_failed(p))]
    if failed:
        return RequestsFailed(f"bench: requests failed beyond --max-error-rate {max_error_rate:g}: "
                              + "; ".join(failed))
    missed = [f"{p.point.label}: {p.verdict}" for p in run.points if p.verdict]
    if missed:
        return SLONotMet("bench: " + "; ".join(missed))
    return None
