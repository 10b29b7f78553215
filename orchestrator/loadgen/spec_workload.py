"""A sweep spec's workload and SLO in the load generator's terms (shared by sweep and simulate)."""

from __future__ import annotations

from dataclasses import dataclass
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


#: sessions drawn (from the workload's own seed) to average a session workload's calls over: the means
#: of agentic.yaml and chat-multiturn.yaml move by at most 3% between seeds 0-3 (calls per session;
#: prompt and uncached tokens 2%), at 20-90 ms of CPU per call; a seed needs no more
SHAPE_SESSIONS = 400


@dataclass(frozen=True)
class CallShape:
    """What one load unit (a request, or a session when the rate counts sessions) costs the engines,
    as the planner prices it: calls sent, and per call (means) the whole prompt the engine is sent,
    the part of it expected in the prefix cache, and the answer."""

    calls: float
    prompt_tokens: float  # a session's call: the whole history so far plus its own new text
    cached_tokens: float  # expected prefix-cache hit (whole blocks, never the last prompt token)
    output_tokens: float

    @property
    def uncached_tokens(self) -> float:
        """What the engine prefills: the prompt minus its cached prefix."""
        return self.prompt_tokens - self.cached_tokens


def call_shape(w: WorkloadSpec, *, same_engine: float = 1.0, block_size: int = 16,
               prefix_caching: bool = True, max_model_len: int | None = None) -> CallShape:
    """The workload's mean call. Request workloads: one call of `input_tokens` (a prefix workload's
    shared prefix is not credited: seeds stay as before). Sessions: SHAPE_SESSIONS sessions drawn as
    the load generator draws them (same seed, same cuts at max_model_len), each call's prompt the
    whole history. The shared system prompt (tool definitions) is taken as cached on every engine;
    a session's own history is cached where the engine that served one of its earlier steps serves
    this one: with probability `same_engine` per step (1 for one engine; 1/DP ranks with prefix-aware
    routing, which keeps a session on a replica but not on a rank; 1/engines otherwise), the latest
    such step's history (prompt and answer) counting. Sub-calls of a fanned-out step append in turn,
    so an engine holds the next history up to its own call's part: credited as 1/width of the step.
    Eviction under memory pressure is not modelled: a seed, not a prediction."""
    if w.kind not in ("conversation", "agentic"):
        prompt = _mean(w.input_tokens)
        return CallShape(1.0, prompt, 0.0, _mean(w.output_tokens))
    plans = session_factory(w, max_model_len)(SHAPE_SESSIONS).sessions
    assert plans is not None  # a session workload's factory always makes sessions
    p = min(max(same_engine, 0.0), 1.0)

    def whole_blocks(tokens: float) -> float:
        return (tokens // block_size) * block_size if prefix_caching else 0.0

    calls = prompt = cached = output = 0.0
    for plan in plans.plans:
        system = float(sum(s.tokens for s in plan.system))
        history, reached = system, [whole_blocks(system)]  # reached[j]: cached prefix after step j-1
        for step in plan.steps:
            for call in step.calls:
                tokens = history + call.user.tokens
                # the latest earlier step served on this engine decides the hit (geometric in p)
                hit, miss = 0.0, 1.0
                for reach in reversed(reached[1:]):
                    hit += miss * p * min(reach, whole_blocks(tokens - 1))
                    miss *= 1 - p
                hit += miss * min(reached[0], whole_blocks(tokens - 1))
                calls, prompt, cached = calls + 1, prompt + tokens, cached + hit
                output += call.max_tokens
            grown = sum(c.user.tokens + c.max_tokens for c in step.calls)
            reached.append(whole_blocks(history + grown / len(step.calls)))
            history += grown
    n = max(len(plans.plans), 1)
    per = max(calls, 1.0)
    return CallShape(calls / n, prompt / per, cached / per, output / per)


def slo_bounds(slo: SLOSpec) -> dict[str, float]:
    """{"ttft_p99_ms": 2000.0, ...}: the spec's bounds in loadgen.metrics' SLO keys."""
    return {f"{metric}_{pct}_ms": bound for (metric, pct), bound in slo.bounds_ms().items()}
