"""Fidelity: orch's simulator against published measurements that nobody here wrote.

Each case of bench/fidelity_cases.yaml (model, precision, GPU, layout, engine, lengths, load, the
measured numbers and their source) is run through `orch simulate`'s engine in virtual time in the mode
the source used: an offline burst (every request queued at once), a closed loop at a fixed
concurrency, or an open-loop rate. Printed per case: predicted vs measured and the signed error;
then the summary: median |error| and how many predictions fall within 10% and 25%, for TTFT apart
from the rest (throughput, TPOT, ITL), which the issue's goals treat separately.

Columns, each a summary of its own:
- preset:   the GPU preset's guessed constants (`hardware.calibration: none`);
- default:  what a spec without `hardware.calibration` gets: the bundled profile fitted for the case's
            GPU and engine (its source's `engine_family`), or the preset where there is none. The
            bundled profiles were fitted to these cases, so this column is in-sample;
- held-out: k-fold cross-validation per GPU and engine: each case predicted with constants fitted on
            the other folds only (bench/fit_profiles.py --folds K writes bench/fidelity_heldout.json;
            this script only re-predicts with the cached constants);
- by-source: each case predicted with its GPU and engine's constants fitted on the other sources' cases
            only (bench/fit_profiles.py --by-source): how a profile does on a publisher it never saw.
            Summaries per source follow the table;
- after:    `--calibration PROFILE`, the same cases with the spec naming that profile.

Run: PYTHONPATH=. /work/venv/bin/python bench/fidelity.py [--only SUBSTRING] [--json] [--calibration P]
Budget: under 2 minutes on one core (virtual time, no HTTP).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from orchestrator.catalog.loader import load_gpu, load_model
from orchestrator.catalog.profiles import NO_PROFILE, default_profile
from orchestrator.errors import OrchError
from orchestrator.layout import parse_layout
from orchestrator.loadgen.content import Content, text_key
from orchestrator.loadgen.metrics import Metrics, compute_metrics
from orchestrator.loadgen.records import RequestRecord
from orchestrator.loadgen.window import closed_loop_warmup_s
from orchestrator.plan.from_spec import plan_inputs
from orchestrator.plan.memory import SAMPLER_BYTES_PER_LOGIT
from orchestrator.plan.params import count_params
from orchestrator.sim.loops import closed_loop, simulate, single_request_s
from orchestrator.sim.run import spec_engines
from orchestrator.sim.virtual import SimRequest
from orchestrator.spec.models import HardwareSpec, SweepSpec

sys.path.insert(0, str(Path(__file__).parent))  # bench/ is scripts, not a package
from fidelity_pd import run_pool_case

CASES = Path(__file__).with_name("fidelity_cases.yaml")
HELDOUT = Path(__file__).with_name("fidelity_heldout.json")
MODES = ("offline", "open", "closed")
METRICS = ("output_tokens_per_s", "ttft_mean_ms", "tpot_mean_ms", "itl_mean_ms", "latency_mean_ms",
           "input_tokens_per_s")  # input: a prefill pool measured alone (bench/fidelity_pd.py)
ENGINE_FAMILIES = ("tensorrt-llm", "vllm", "sglang")
GOAL_S = 120.0


class CaseError(Exception):
    """Bad input to the bench (a malformed case, an unusable option): one line, exit code 2."""


@dataclass(frozen=True)
class Case:
    id: str
    source: str
    model: str
    precision: str
    gpu: str
    layout: str
    mode: str
    requests: int
    input_tokens: int
    output_tokens: int
    measured: dict[str, float]
    rate_per_s: float | None = None
    concurrency: int | None = None
    pool: str | None = None  # prefill or decode: one pool of a prefill/decode pair measured alone


def load_cases(path: Path = CASES) -> tuple[dict[str, dict[str, Any]], list[Case]]:
    """Sources and cases of the table; a malformed case is a one-line error naming it."""
    doc = yaml.safe_load(path.read_text())
    sources: dict[str, dict[str, Any]] = doc["sources"]
    cases: list[Case] = []
    for raw in doc["cases"]:
        where = f"{path}: case {raw.get('id', '?')}"
        try:
            case = Case(**raw)
        except TypeError as exc:
            raise CaseError(f"{where}: {exc}") from None
        if case.source not in sources:
            raise CaseError(f"{where}: source {case.source!r} is not listed under 'sources'")
        if sources[case.source].get("engine_family") not in ENGINE_FAMILIES:
            raise CaseError(f"{where}: source {case.source!r} needs engine_family: one of "
                            f"{', '.join(ENGINE_FAMILIES)} (which engine's profile its cases use)")
        profile = sources[case.source].get("sampler_profile")
        if profile is not None and profile not in SAMPLER_BYTES_PER_LOGIT:
            raise CaseError(f"{path}: source {case.source}: sampler_profile must be one of "
                            f"{', '.join(SAMPLER_BYTES_PER_LOGIT)}, got {profile!r}")
        if case.mode not in MODES:
            raise CaseError(f"{where}: mode must be one of {', '.join(MODES)}")
        needs = {"open": "rate_per_s", "closed": "concurrency"}.get(case.mode)
        if needs is not None and not getattr(case, needs):
            raise CaseError(f"{where}: mode {case.mode} needs {needs}")
        unknown = set(case.measured) - set(METRICS)
        if unknown:
            raise CaseError(f"{where}: unknown measured metric(s) {sorted(unknown)}; "
                             f"known: {', '.join(METRICS)}")
        cases.append(case)
    return sources, cases


def case_spec(case: Case, source: dict[str, Any], calibration: str | None = None,
              overrides: dict[str, float] | None = None) -> SweepSpec:
    """The sweep spec a user would write for the case (engine: the simulator, which models no engine
    of its own, so the profile is named: see default_calibration)."""
    settings = dict(source.get("engine_settings", {}))
    kv_dtype = "fp8" if case.precision in ("fp8", "nvfp4") and source.get("fp8_kv_cache") else "auto"
    if source.get("limits") == "trtllm-bench":
        settings.update(trtllm_bench_limits(case, kv_dtype == "fp8", settings["gpu_memory_utilization"]))
    hardware: dict[str, Any] = {"gpu": case.gpu, "nodes": 1, "overrides": dict(overrides or {})}
    if calibration is not None:
        hardware.update(calibration_fields(calibration))
    return SweepSpec.model_validate({
        "model": {"name": case.model, "weight_dtype": case.precision, "kv_cache_dtype": kv_dtype,
                  "max_model_len": case.input_tokens + case.output_tokens},
        "hardware": hardware,
        "engine": {"name": "sim", **settings},
        "workload": {"input_tokens": case.input_tokens, "output_tokens": case.output_tokens,
                     "rates_per_s": [case.rate_per_s or 1.0], "num_requests": case.requests},
        "layouts": [case.layout],
    })


# Bytes per weight and per KV value as trtllm-bench counts them (tensorrt_llm/bench/build/tuning.py
# BYTES_PER_ELEM, at commit 04cba882084a25665e7f80f5bda71b35b9790b6f).
TRTLLM_BENCH_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "nvfp4": 0.5}


def trtllm_bench_limits(case: Case, fp8_kv: bool, kv_fraction: float) -> dict[str, int]:
    """The max_batch_size and max_num_tokens `trtllm-bench throughput` picks for the run (tuning.py
    calc_engine_setting and finetune_setting), as the simulator's engine-wide limits.

    It estimates the requests the KV cache holds at ISL + OSL each from the GPUs' memory, the weights
    (parameters x bytes per weight) and the KV per token (2 x layers x max(tp, kv heads) x head dim x
    bytes); divides them (at most 4,096) by the pipeline stages; rounds up (to 32, 128 or 256, at
    least 64) for the batch size per micro-batch; and sets the tokens per micro-batch to that batch x
    (1 + ISL/OSL), at most 32,768 and at least 2,048. Under PP every stage runs PP micro-batches, so
    the engine holds PP times both."""
    layout = parse_layout(case.layout)
    cfg = load_model(case.model)
    gib = 1024.0 ** 3
    kv_per_token = (2 * cfg.num_layers * max(layout.tp, cfg.num_kv_heads) * cfg.head_dim
                    * (1.0 if fp8_kv else 2.0) / gib)
    weights = count_params(cfg).total * TRTLLM_BENCH_BYTES.get(case.precision, 2.0) / gib
    memory = load_gpu(case.gpu).memory_bytes / gib * layout.tp * layout.pp
    requests = (memory - weights) * kv_fraction / (kv_per_token * (case.input_tokens + case.output_tokens))
    raw_bs = min(requests, 4096) / layout.pp
    raw_tokens = min(raw_bs * (1 + case.input_tokens / case.output_tokens), 32768)
    step = 32 if raw_bs < 256 else 128 if raw_bs < 1024 else 256
    bs = max(64, step * math.ceil(raw_bs / step)) if raw_bs < 256 else step * math.ceil(raw_bs / step)
    step = 256 if raw_tokens < 4096 else 512 if raw_tokens < 8192 else 1024
    tokens = max(2048, step * math.ceil(raw_tokens / step))
    return {"max_num_seqs": bs * layout.pp, "max_num_batched_tokens": tokens * layout.pp}


def calibration_fields(profile: str) -> dict[str, Any]:
    """The hook for calibration (issue 14 item 7): how a spec names a calibration profile.

    Calibration plugs in here: today a spec names its profile as `hardware.calibration: FILE`.
    """
    if "calibration" not in HardwareSpec.model_fields:
        raise CaseError("--calibration: this orch has no hardware.calibration yet (issue 14 item 7); "
                         "run without --calibration for the defaults")
    return {"calibration": profile}


def default_calibration(case: Case, source: dict[str, Any]) -> str:
    """What a spec for this case gets without hardware.calibration, were its engine the source's:
    the bundled profile of (GPU, engine family), the same lookup as orch's, else the preset."""
    prof = default_profile(case.gpu, str(source["engine_family"]))
    return prof.name if prof is not None else NO_PROFILE


def run_case(case: Case, source: dict[str, Any], calibration: str | None = None,
             overrides: dict[str, float] | None = None) -> dict[str, float]:
    """Predicted metrics for the case, as the measured ones are named."""
    spec = case_spec(case, source, calibration, overrides)
    # The start-up sampler run the source's engine version makes (plan/memory.py
    # SAMPLER_BYTES_PER_LOGIT); the spec's engine (the simulator) stands for the vLLM we target.
    sampler_profile = source.get("sampler_profile")
    if case.pool is not None:  # one pool of a prefill/decode pair (bench/fidelity_pd.py)
        return run_pool_case(spec, case.layout, case.pool, case.requests, case.input_tokens,
                             case.output_tokens, sampler_profile)
    layout = parse_layout(case.layout)
    inputs = plan_inputs(spec)
    if sampler_profile is not None:
        inputs = replace(inputs, sampler_profile=sampler_profile)
    engines = spec_engines(spec, inputs, layout)
    n, inp, out = case.requests, case.input_tokens, case.output_tokens
    # Each prompt its own content, shared with no other (the benchmarks send random tokens): with
    # prefix caching (vLLM's default) a preempted request finds the blocks it computed before while
    # they stay cached, as the engine does, instead of recomputing its whole prompt. Under
    # TensorRT-LLM's guaranteed-no-evict nothing is preempted: the same numbers, without the cache's
    # bookkeeping (8x the CPU time of a 3,000-request offline case).
    preempts = source.get("engine_settings", {}).get("sim_scheduler") != "guaranteed-no-evict"
    contents = [Content(None, text_key(f"{case.id}/{i}"), inp) if preempts else None for i in range(n)]
    warmup = 0.0
    if case.mode == "offline":
        reqs = [SimRequest(str(i), 0.0, inp, out, contents[i]) for i in range(n)]
        records, _ = simulate(engines, reqs)
    elif case.mode == "open":
        assert case.rate_per_s is not None
        gaps = np.random.default_rng(0).exponential(1 / case.rate_per_s, n)
        t = np.concatenate([[0.0], np.cumsum(gaps)[:-1]])
        records, _ = simulate(engines, [SimRequest(str(i), float(t[i]), inp, out, contents[i])
                                        for i in range(n)])
    else:
        # As the tools that publish closed-loop numbers run them: clients ramped up over one
        # request's time, measured in the steady state past every client's first request.
        assert case.concurrency is not None
        ramp = single_request_s(engines[0], inp, out)
        records, _ = closed_loop(engines, [SimRequest(str(i), 0.0, inp, out, contents[i]) for i in range(n)],
                                 case.concurrency, ramp_s=ramp)
        warmup = max(ramp, closed_loop_warmup_s(records, case.concurrency))
    if "itl_mean_ms" not in case.measured:
        records = [_first_and_last(r) for r in records]
    return _named(compute_metrics(records, gpus=layout.gpus, warmup_s=warmup))


def _first_and_last(r: RequestRecord) -> RequestRecord:
    """The record with its chunks merged into the first token and the rest: TTFT, TPOT, E2E and the
    throughputs are unchanged (only ITL needs every chunk), and the metrics of 6M-token offline
    cases take a second instead of most of the run."""
    if len(r.chunk_times_s) <= 2:
        return r
    n = sum(r.chunk_tokens)
    return replace(r, chunk_times_s=(r.chunk_times_s[0], r.chunk_times_s[-1]),
                   chunk_tokens=(r.chunk_tokens[0], n - r.chunk_tokens[0]))


def _named(m: Metrics) -> dict[str, float]:
    values = {"output_tokens_per_s": m.output_throughput, "ttft_mean_ms": m.ttft_ms.mean,
              "tpot_mean_ms": m.tpot_ms.mean, "itl_mean_ms": m.itl_chunk_ms.mean,
              "latency_mean_ms": m.e2e_ms.mean}
    return {k: float(v) for k, v in values.items() if v is not None}


def rel_error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


def summary(errors: list[float]) -> dict[str, Any]:
    absolute = [abs(e) for e in errors]
    return {
        "n": len(errors),
        "median_abs_error": statistics.median(absolute) if absolute else math.nan,
        "within_10pct": sum(a <= 0.10 for a in absolute),
        "within_25pct": sum(a <= 0.25 for a in absolute),
    }


# A column: label -> how to predict a case, as (calibration, overrides), or None for "no prediction".
Column = Callable[[Case, dict[str, Any]], tuple[str, dict[str, float]] | None]


def table_hash(cases: list[Case], sources: dict[str, dict[str, Any]]) -> str:
    """What the held-out cache was fitted from: the cases and their sources."""
    # a case of one whole deployment (no `pool`) hashes as before pools were known
    fields = [{k: v for k, v in c.__dict__.items() if k != "pool" or v is not None} for c in cases]
    blob = json.dumps([[f, sources[c.source]] for c, f in sorted(zip(cases, fields, strict=True),
                                                                 key=lambda cf: cf[0].id)],
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def group_key(case: Case, source: dict[str, Any]) -> str:
    """Cases share a profile when they share GPU and engine family."""
    return f"{case.gpu}/{source['engine_family']}"


def heldout_column(cases: list[Case], sources: dict[str, dict[str, Any]],
                   path: Path = HELDOUT) -> tuple[Column | None, list[str]]:
    """The held-out column from the cached folds, and notes (a group whose cases changed since the
    fit is stale and gets no held-out prediction)."""
    if not path.is_file():
        return None, [f"held-out: no {path.name}; run bench/fit_profiles.py --folds 3"]
    doc = json.loads(path.read_text())
    notes: list[str] = []
    by_case: dict[str, dict[str, float]] = {}
    for key, group in doc.get("groups", {}).items():
        members = [c for c in cases if group_key(c, sources[c.source]) == key]
        if not members:
            continue
        if group.get("table_hash") != table_hash(members, sources):
            notes.append(f"held-out: {key} is stale (its cases changed); "
                         "rerun bench/fit_profiles.py --folds 3")
            continue
        for fold in group["folds"]:
            for cid in fold["held_out"]:
                by_case[cid] = fold["constants"]
    for key in sorted({group_key(c, sources[c.source]) for c in cases}):
        group = doc.get("groups", {}).get(key)
        if group is None:
            notes.append(f"held-out: {key} not cross-validated")
        elif group.get("note"):
            notes.append(f"held-out: {key}: {group['note']}")

    def column(case: Case, source: dict[str, Any]) -> tuple[str, dict[str, float]] | None:
        got = by_case.get(case.id)
        return None if got is None else (NO_PROFILE, got)

    return column, notes


def by_source_column(cases: list[Case], sources: dict[str, dict[str, Any]],
                     path: Path = HELDOUT) -> tuple[Column | None, list[str]]:
    """Each case predicted with its group's constants fitted on the other sources only
    (bench/fit_profiles.py --by-source); notes for groups with one source or a stale fit."""
    if not path.is_file():
        return None, []
    doc = json.loads(path.read_text()).get("by_source", {})
    if not doc:
        return None, ["by-source: not fitted; run bench/fit_profiles.py --by-source"]
    notes: list[str] = []
    by_case: dict[str, dict[str, float]] = {}
    for key, group in doc.items():
        members = [c for c in cases if group_key(c, sources[c.source]) == key]
        if not members:
            continue
        if group.get("table_hash") != table_hash(members, sources):
            notes.append(f"by-source: {key} is stale (its cases changed); "
                         "rerun bench/fit_profiles.py --by-source")
            continue
        for fit in group.get("sources", {}).values():
            for cid in fit["held_out"]:
                by_case[cid] = fit["constants"]
        if group.get("note"):
            notes.append(f"by-source: {key}: {group['note']}")

    def column(case: Case, source: dict[str, Any]) -> tuple[str, dict[str, float]] | None:
        got = by_case.get(case.id)
        return None if got is None else (NO_PROFILE, got)

    return column, notes


def standard_columns(cases: list[Case], sources: dict[str, dict[str, Any]],
                     calibration: str | None) -> tuple[dict[str, Column], list[str]]:
    columns: dict[str, Column] = {
        "preset": lambda case, source: (NO_PROFILE, {}),
        "default": lambda case, source: (default_calibration(case, source), {}),
    }
    heldout, notes = heldout_column(cases, sources)
    notes.insert(0, "default: the bundled profiles were fitted to these cases (bench/fit_profiles.py "
                 "--write), so that column is in-sample; held-out is the estimate for cases not fitted")
    if heldout is not None:
        columns["held-out"] = heldout
    by_source, source_notes = by_source_column(cases, sources)
    notes += source_notes
    if by_source is not None:
        columns["by-source"] = by_source
    if calibration is not None:
        columns["after"] = lambda case, source: (calibration, {})
    return columns, notes


def evaluate(cases: list[Case], sources: dict[str, dict[str, Any]],
             columns: dict[str, Column]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for case in cases:
        source = sources[case.source]
        runs: dict[str, dict[str, float] | str] = {}
        profiles: dict[str, str] = {}
        for label, how in columns.items():
            chosen = how(case, source)
            if chosen is None:
                continue
            calibration, overrides = chosen
            profiles[label] = calibration if not overrides else "fold constants"
            try:
                runs[label] = run_case(case, source, calibration, overrides)
            except OrchError as exc:  # e.g. the layout does not fit: a failed prediction, shown as such
                runs[label] = str(exc)
        for metric, measured in case.measured.items():
            row: dict[str, Any] = {"case": case.id, "source": case.source, "mode": case.mode, "gpu": case.gpu,
                                   "metric": metric,
                                   "measured": measured, "engine": source.get("engine"),
                                   "engine_family": source.get("engine_family"), "profiles": profiles}
            for label, got in runs.items():
                if isinstance(got, str):
                    row[f"{label}_error_message"] = got
                    continue
                if metric in got:
                    row[label] = got[metric]
                    row[f"{label}_error"] = rel_error(got[metric], measured)
            rows.append(row)
    return rows


def per_source(rows: list[dict[str, Any]], labels: list[str]) -> dict[str, dict[str, Any]]:
    """Median |error| per source and column, TTFT apart from the rest."""
    out: dict[str, dict[str, Any]] = {}
    for src in sorted({r["source"] for r in rows}):
        mine = [r for r in rows if r["source"] == src]
        out[src] = {label: summaries(mine, label) for label in labels}
    return out


def summaries(rows: list[dict[str, Any]], label: str) -> dict[str, dict[str, Any]]:
    key = f"{label}_error"
    ttft = [r[key] for r in rows if key in r and r["metric"].startswith("ttft")]
    rest = [r[key] for r in rows if key in r and not r["metric"].startswith("ttft")]
    failed = sum(1 for r in rows if f"{label}_error_message" in r)
    return {"ttft": summary(ttft), "rest": summary(rest), "failed_predictions": {"n": failed}}


def _print(rows: list[dict[str, Any]], labels: list[str], wall_s: float, cpu_s: float, n_cases: int,
           notes: list[str]) -> None:
    head = f"{'case':42} {'mode':8} {'metric':20} {'measured':>10}"
    for label in labels:
        head += f" {label:>10} {'err':>7}"
    print(head)
    for r in rows:
        line = f"{r['case']:42} {r['mode']:8} {r['metric']:20} {r['measured']:10.1f}"
        for label in labels:
            if label in r:
                line += f" {r[label]:10.1f} {r[label + '_error'] * 100:+6.0f}%"
            elif f"{label}_error_message" in r:
                line += f" {'failed':>10} {'':>7}"
            else:  # no prediction in this column (a case no fold held out)
                line += f" {'-':>10} {'':>7}"
        print(line)
    for r in rows:
        for label in labels:
            if f"{label}_error_message" in r and r["metric"] == "output_tokens_per_s":
                print(f"  {r['case']} ({label}): {r[label + '_error_message']}")
    defaults = sorted({(r["gpu"], r["engine_family"], r["profiles"].get("default", "-")) for r in rows})
    print("\ndefault profile per GPU + engine: "
          + "; ".join(f"{g} + {e} -> {p}" for g, e, p in defaults))
    for note in notes:
        print(note)
    print(f"\n{n_cases} cases, {len(rows)} measured numbers, {cpu_s:.0f} CPU s, {wall_s:.0f} wall s "
          f"(goal < {GOAL_S:.0f} s on one core)")
    for label in labels:
        s = summaries(rows, label)
        for part, name in (("ttft", "TTFT"), ("rest", "throughput/TPOT/ITL")):
            p = s[part]
            print(f"{label:8} {name:20} n={p['n']:3}  median |error| {p['median_abs_error'] * 100:5.1f}%  "
                  f"within 10%: {p['within_10pct']:3}  within 25%: {p['within_25pct']:3}")
        if s["failed_predictions"]["n"]:
            print(f"{label:8} failed predictions: {s['failed_predictions']['n']}")
    print("\nper source, median |error| (n) TTFT / throughput-TPOT-ITL:")
    for src, by_label in per_source(rows, labels).items():
        cells = []
        for label in labels:
            t, r = by_label[label]["ttft"], by_label[label]["rest"]
            cell = " / ".join("-" if x["n"] == 0 else f"{x['median_abs_error'] * 100:.0f}% ({x['n']})"
                              for x in (t, r))
            cells.append(f"{label} {cell}")
        print(f"  {src}: " + "; ".join(cells))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--cases", type=Path, default=CASES, help="case table (YAML)")
    ap.add_argument("--only", help="run only cases whose id contains this")
    ap.add_argument("--calibration", metavar="PROFILE", help="also predict with this calibration profile")
    ap.add_argument("--json", action="store_true", help="print rows and summaries as JSON")
    args = ap.parse_args(argv)
    try:
        sources, cases = load_cases(args.cases)
        if args.calibration is not None:
            calibration_fields(args.calibration)  # fail before running anything
    except CaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.only:
        cases = [c for c in cases if args.only in c.id]
    start, cpu = time.perf_counter(), time.process_time()
    columns, notes = standard_columns(cases, sources, args.calibration)
    rows = evaluate(cases, sources, columns)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    labels = list(columns)
    if args.json:
        print(json.dumps({"rows": rows, "summary": {lb: summaries(rows, lb) for lb in labels},
                          "per_source": per_source(rows, labels),
                          "notes": notes, "wall_s": wall, "cpu_s": cpu}, indent=2))
    else:
        _print(rows, labels, wall, cpu, len(cases), notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
