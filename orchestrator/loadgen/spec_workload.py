"""A sweep spec's workload and SLO in the load generator's terms (shared by sweep and simulate)."""

from __future__ import annotations

from functools import partial

from orchestrator.errors import SpecError
from orchestrator.loadgen.bench import WorkloadFactory
from orchestrator.loadgen.sessions import agentic_sessions, conversation_sessions, sharegpt_sessions
from orchestrator.loadgen.texts import PromptMaker, Tokenizer
from orchestrator.loadgen.workloads import (
    Workload,
    prefix_workload,
    random_workload,
    sharegpt_workload,
    trace_workload,
)
from orchestrator.spec.models import SLOSpec, SweepSpec
from orchestrator.spec.workload import TokenDistribution, WorkloadSpec


def spec_workload_factory(spec: SweepSpec, max_model_len: int | None) -> WorkloadFactory:
    """The spec's workload, with sessions cut at the engines' max_model_len (their resolved settings)."""
    return workload_factory(spec.workload, max_model_len)


def workload_factory(w: WorkloadSpec, max_model_len: int | None = None, *,
                     text: bool = True) -> WorkloadFactory:
    """text=False: token counts without prompt text, for the simulator in virtual time (the same
    lengths; a served run sends text). Traces and sessions build their text either way."""
    if w.kind == "random":
        return partial(random_workload, input_len=w.input_tokens, output_len=w.output_tokens, seed=w.seed,
                       text=text)
    if w.kind == "prefix":
        return partial(prefix_workload, prefix_len=w.prefix_tokens or 512, input_len=w.input_tokens,
                       output_len=w.output_tokens, seed=w.seed, text=text)
    if w.kind in ("conversation", "agentic"):
        return session_factory(w, max_model_len)
    assert w.dataset_path is not None  # WorkloadSpec guarantees it for sharegpt and trace
    if w.kind == "sharegpt":
        return partial(sharegpt_workload, w.dataset_path, seed=w.seed)
    # streamed: a load point reads only the requests it sends (num_requests, or those before duration_s)
    return partial(_trace, w)


def _trace(w: WorkloadSpec, n: int) -> Workload:
    assert w.dataset_path is not None
    return trace_workload(w.dataset_path, n=n or w.num_requests, duration_s=w.duration_s, fmt=w.trace_format,
                          time_scale=w.time_scale, seed=w.seed)


def session_factory(w: WorkloadSpec, max_model_len: int | None, *, tokenizer: Tokenizer | None = None,
                    reencodable_answers: bool = False,
                    dataset_output_len: int | TokenDistribution | None = None) -> WorkloadFactory:
    """Conversation or agentic sessions (with dataset_path: ShareGPT conversations, every turn, answers
    as long as the file's unless `dataset_output_len`). With a tokenizer, prompts of exact token counts;
    `reencodable_answers` restricts answers to tokens that read back as themselves (vLLM's
    allowed_token_ids), so a quoted answer re-encodes to the tokens the engine cached."""
    maker = PromptMaker(tokenizer) if tokenizer is not None else None
    if reencodable_answers and maker is None:
        raise SpecError("--reencodable-answers needs --tokenizer (the tokens answers are made of)")
    extra = {"allowed_token_ids": maker.word_token_ids} if reencodable_answers and maker else None

    def build(n: int) -> Workload:
        if w.kind == "agentic":
            made = agentic_sessions(n, w.agentic_or_default(), w.input_tokens, w.output_tokens, seed=w.seed,
                                    max_model_len=max_model_len)
        elif w.dataset_path is not None:
            made = sharegpt_sessions(w.dataset_path, n, output_len=dataset_output_len, seed=w.seed,
                                     max_model_len=max_model_len,
                                     think_time_s=w.conversation_or_default().think_time_s)
        else:
            made = conversation_sessions(n, w.conversation_or_default(), w.input_tokens, w.output_tokens,
                                         seed=w.seed, max_model_len=max_model_len)
        return Workload(w.kind, (), sessions=made, texts=maker, note=made.note(), extra_body=extra)

    return build


def _mean(value: int | TokenDistribution) -> float:
    return float(value.mean) if isinstance(value, TokenDistribution) else float(value)


def session_shape(w: WorkloadSpec) -> tuple[float, float]:
    """(mean calls a load unit sends, mean output tokens per call): (1, output_tokens) for request
    workloads; a session's calls for conversation and agentic ones, whose rate counts sessions."""
    out = _mean(w.output_tokens)
    if w.kind == "conversation":
        return _mean(w.conversation_or_default().turns), out
    if w.kind == "agentic":
        a = w.agentic_or_default()
        rounds, fan = _mean(a.rounds), _mean(a.parallel_calls)
        calls = 1 + max(rounds - 1, 0) * fan
        return calls, ((calls - 1) * _mean(a.tool_call_tokens) + out) / calls
    return 1.0, out


def slo_bounds(slo: SLOSpec) -> dict[str, float]:
    """{"ttft_p99_ms": 2000.0, ...}: the spec's bounds in loadgen.metrics' SLO keys."""
    return {f"{metric}_{pct}_ms": bound for (metric, pct), bound in slo.bounds_ms().items()}
