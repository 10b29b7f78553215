"""A sweep spec's workload and SLO in the load generator's terms (shared by sweep and simulate)."""

from __future__ import annotations

import threading
from functools import partial

from orchestrator.engines import EngineSettings
from orchestrator.errors import SpecError
from orchestrator.layout import Layout
from orchestrator.loadgen.bench import WorkloadFactory
from orchestrator.loadgen.sessions import (
    SessionSet,
    agentic_sessions,
    conversation_sessions,
    sharegpt_sessions,
)
from orchestrator.loadgen.texts import PromptMaker, Tokenizer
from orchestrator.loadgen.workloads import (
    Workload,
    prefix_workload,
    random_workload,
    sharegpt_workload,
    trace_workload,
)
from orchestrator.plan.calls import SESSION_KINDS, CallPricer, CallShape, request_call
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
    if w.kind in SESSION_KINDS:
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


#: sessions drawn (from the workload's own seed) to average a session workload's calls over: the means
#: of agentic.yaml and chat-multiturn.yaml move by at most 3% between seeds 0-3 (calls per session;
#: prompt and uncached tokens 2%), at 20-90 ms of CPU per call; a seed needs no more
SHAPE_SESSIONS = 400


def call_shape(w: WorkloadSpec, *, same_engine: float = 1.0, block_size: int = 16,
               prefix_caching: bool = True, max_model_len: int | None = None) -> CallShape:
    """The workload's mean call. Request workloads: one call of `input_tokens` (plan/calls.py
    `request_call`). Sessions: SHAPE_SESSIONS sessions drawn as the load generator draws them (same
    seed, same cuts at max_model_len), each call's prompt the whole history (`price_sessions`)."""
    if w.kind not in SESSION_KINDS:
        return request_call(w)
    return price_sessions(draw_sessions(w, max_model_len), same_engine=same_engine, block_size=block_size,
                          prefix_caching=prefix_caching)


def draw_sessions(w: WorkloadSpec, max_model_len: int | None) -> SessionSet:
    """The SHAPE_SESSIONS sessions a session workload's calls are averaged over (the costly part)."""
    plans = session_factory(w, max_model_len)(SHAPE_SESSIONS).sessions
    assert plans is not None  # a session workload's factory always makes sessions
    return plans


def price_sessions(plans: SessionSet, *, same_engine: float, block_size: int,
                   prefix_caching: bool) -> CallShape:
    """The mean call of these sessions. The shared system prompt (tool definitions) is taken as cached
    on every engine; a session's own history is cached where the engine that served one of its earlier
    steps serves this one: with probability `same_engine` per step (`same_engine_share`), the latest
    such step's history (prompt and answer) counting. Sub-calls of a fanned-out step append in turn,
    so an engine holds the next history up to its own call's part: credited as 1/width of the step.
    Eviction under memory pressure is not modelled: a seed, not a prediction."""
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


def same_engine_share(layout: Layout, *, prefix_aware: bool) -> float:
    """How likely a session's call reaches an engine that served one of its earlier steps: 1 for one
    engine; 1/DP ranks with prefix-aware routing, which keeps a session on a replica but not on a rank;
    1/engines otherwise."""
    spread = layout.dp if prefix_aware else layout.replicas * layout.dp
    return 1 / max(spread, 1)


def routes_by_prefix(spec: SweepSpec) -> bool:
    """Whether the spec's (first) routing policy keeps a session on the replica that holds its
    history (a spec comparing policies is split per policy before it is run)."""
    return spec.routing_policies()[0] == "prefix_aware"


class CallShapes:
    """A workload's call shapes, each computed once however often a sweep asks (its plan rows, planner
    seeds and prune predictions ask 2-4 times per candidate, at 35-90 ms each on the example session
    specs): the sessions drawn once per max_model_len, each (share, block size, caching) priced once.
    Shared by a sweep's threads (a side-by-side wave): one computes, the others wait for it."""

    def __init__(self, w: WorkloadSpec) -> None:
        self.workload = w
        self._lock = threading.Lock()
        self._drawn: dict[int | None, SessionSet] = {}
        self._shapes: dict[tuple[float, int, bool, int | None], CallShape] = {}

    def of(self, layout: Layout, settings: EngineSettings, *, prefix_aware: bool) -> CallShape:
        """The mean call on `layout`'s engines with `settings` (block size, prefix caching,
        max_model_len) under the routing policy."""
        if self.workload.kind not in SESSION_KINDS:
            return request_call(self.workload)
        share = same_engine_share(layout, prefix_aware=prefix_aware)
        key = (share, settings.block_size, settings.enable_prefix_caching, settings.max_model_len)
        with self._lock:
            if (shape := self._shapes.get(key)) is None:
                mml = settings.max_model_len
                if (plans := self._drawn.get(mml)) is None:
                    plans = self._drawn[mml] = draw_sessions(self.workload, mml)
                shape = self._shapes[key] = price_sessions(
                    plans, same_engine=share, block_size=settings.block_size,
                    prefix_caching=settings.enable_prefix_caching)
            return shape

    def pricer(self, *, prefix_aware: bool) -> CallPricer:
        """`orch plan`'s pricer (plan/calls.py): each layout's call under this routing."""

        def price(layout: Layout, settings: EngineSettings) -> CallShape:
            return self.of(layout, settings, prefix_aware=prefix_aware)

        return price


def spec_call_pricer(spec: SweepSpec, *, pairs: bool = False) -> CallPricer | None:
    """What `orch plan` prices a session spec's calls with (None: a request workload, which plan/
    prices itself from the spec's token counts). `pairs`: on a pair's prefill pool, which the pair's
    router balances by load (as pipeline/points.py `call_tokens`)."""
    if spec.workload.kind not in SESSION_KINDS:
        return None
    return CallShapes(spec.workload).pricer(prefix_aware=not pairs and routes_by_prefix(spec))


def slo_bounds(slo: SLOSpec) -> dict[str, float]:
    """{"ttft_p99_ms": 2000.0, ...}: the spec's bounds in loadgen.metrics' SLO keys."""
    return {f"{metric}_{pct}_ms": bound for (metric, pct), bound in slo.bounds_ms().items()}
