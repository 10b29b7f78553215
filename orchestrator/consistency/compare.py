"""Compare two layouts' greedy outputs: collect generations and teacher-forced logprobs from each
endpoint, then turn them into one ConsistencyResult with the estimators."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.consistency import estimators as est
from orchestrator.consistency.client import Generation, NoLogprobs, generate, score
from orchestrator.errors import OrchError

METHOD_TF = (
    "teacher-forced: layout A's greedy output scored under both layouts with prompt_logprobs (top-{k}); "
    "KL(A||B) and TV per token on buckets = tokens in both top-k lists + one tail bucket (lower bounds)"
)
METHOD_GEN = (
    "generation logprobs (top-{k}) before the first divergence only (the engine has no prompt_logprobs); "
    "KL(A||B) and TV per token on buckets = tokens in both top-k lists + one tail bucket (lower bounds)"
)


@dataclass(frozen=True)
class Side:
    """What one layout produced: its greedy generations and, per prompt, its teacher-forced top-k
    logprobs over the reference (layout A's) generation; `scored` is empty without prompt_logprobs."""

    label: str
    model_root: str
    generations: tuple[Generation, ...]
    scored: tuple[tuple[est.TopK, ...], ...] = ()


@dataclass(frozen=True)
class PromptResult:
    index: int
    len_a: int
    len_b: int
    first_divergence: int | None
    margin_at_divergence: float | None  # A's top-1 minus top-2 logprob where B first differs
    kl_mean: float | None
    tv_mean: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ConsistencyResult:
    layout_a: str
    layout_b: str
    model: str
    n_prompts: int
    max_tokens: int
    top_k: int
    method: str
    exact_match_rate: float
    first_divergence: est.Summary
    divergence_histogram: tuple[dict[str, int], ...]
    argmax_agreement_before_divergence: float | None
    argmax_agreement_teacher_forced: float | None
    kl_per_token: est.Summary
    tv_per_token: est.Summary
    margin_at_divergence: est.Summary
    prompts: tuple[PromptResult, ...] = field(default=())

    @property
    def divergence_rate(self) -> float:
        return 1.0 - self.exact_match_rate

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout_a": self.layout_a,
            "layout_b": self.layout_b,
            "model": self.model,
            "n_prompts": self.n_prompts,
            "max_tokens": self.max_tokens,
            "top_k": self.top_k,
            "method": self.method,
            "exact_match_rate": self.exact_match_rate,
            "divergence_rate": self.divergence_rate,
            "first_divergence": self.first_divergence.to_dict(),
            "divergence_histogram": list(self.divergence_histogram),
            "argmax_agreement_before_divergence": self.argmax_agreement_before_divergence,
            "argmax_agreement_teacher_forced": self.argmax_agreement_teacher_forced,
            "kl_per_token": self.kl_per_token.to_dict(),
            "tv_per_token": self.tv_per_token.to_dict(),
            "margin_at_divergence": self.margin_at_divergence.to_dict(),
            "prompts": [p.to_dict() for p in self.prompts],
        }


def check_same_model(a: Side, b: Side) -> None:
    if a.model_root != b.model_root:
        raise OrchError(
            f"layouts serve different models: {a.label} serves {a.model_root!r}, {b.label} serves "
            f"{b.model_root!r}; compare layouts of one model"
        )
    for i, (ga, gb) in enumerate(zip(a.generations, b.generations, strict=False)):
        if ga.prompt_ids != gb.prompt_ids:
            raise OrchError(
                f"layouts tokenize prompt {i} differently ({len(ga.prompt_ids)} vs {len(gb.prompt_ids)} "
                f"tokens): {a.label} and {b.label} do not share a tokenizer"
            )


def collect(
    base_url: str,
    model: str,
    label: str,
    model_root: str,
    prompts: Sequence[str],
    max_tokens: int,
    top_k: int,
    reference: Sequence[Generation] | None = None,
) -> Side:
    """Greedy generations for every prompt, then the teacher-forced top-k over the reference
    generations (this side's own when reference is None). Sequential, so batching cannot reorder sums."""
    gens = tuple(generate(base_url, model, p, max_tokens, top_k) for p in prompts)
    ref = gens if reference is None else tuple(reference)
    try:
        scored = tuple(
            tuple(score(base_url, model, list(g.prompt_ids), list(g.token_ids), top_k)) for g in ref
        )
    except NoLogprobs:
        scored = ()
    return Side(label, model_root, gens, scored)


def compare(a: Side, b: Side, *, max_tokens: int, top_k: int) -> ConsistencyResult:
    """The estimators over both sides; A is the reference whose output B is scored on."""
    check_same_model(a, b)
    n = min(len(a.generations), len(b.generations))
    teacher = bool(a.scored) and bool(b.scored)
    per_prompt: list[PromptResult] = []
    kls: list[float] = []
    tvs: list[float] = []
    margins: list[float] = []
    agree_pre = total_pre = agree_tf = total_tf = 0
    for i in range(n):
        ga, gb = a.generations[i], b.generations[i]
        div = est.first_divergence(ga.token_ids, gb.token_ids)
        upto = len(ga.token_ids) if div is None else div
        if teacher:
            pa, pb = a.scored[i], b.scored[i]
        else:  # free-running logprobs agree in context only up to the first divergence
            pa, pb = ga.topk[:upto], gb.topk[:upto]
        ag, tot = est.argmax_agreement(pa, pb, upto)
        agree_pre, total_pre = agree_pre + ag, total_pre + tot
        if teacher:
            ag, tot = est.argmax_agreement(pa, pb)
            agree_tf, total_tf = agree_tf + ag, total_tf + tot
        kl_i = [est.kl_divergence(p, q) for p, q in zip(pa, pb, strict=False)]
        tv_i = [est.total_variation(p, q) for p, q in zip(pa, pb, strict=False)]
        kls += kl_i
        tvs += tv_i
        margin = None
        if div is not None and div < len(ga.topk):
            margin = est.top2_margin(ga.topk[div])
            if margin is not None:
                margins.append(margin)
        per_prompt.append(
            PromptResult(
                i,
                len(ga.token_ids),
                len(gb.token_ids),
                div,
                margin,
                sum(kl_i) / len(kl_i) if kl_i else None,
                sum(tv_i) / len(tv_i) if tv_i else None,
            )
        )
    positions = [p.first_divergence for p in per_prompt]
    pairs = [(a.generations[i].token_ids, b.generations[i].token_ids) for i in range(n)]
    return ConsistencyResult(
        layout_a=a.label,
        layout_b=b.label,
        model=a.model_root,
        n_prompts=n,
        max_tokens=max_tokens,
        top_k=top_k,
        method=(METHOD_TF if teacher else METHOD_GEN).format(k=top_k),
        exact_match_rate=est.exact_match_rate(pairs),
        first_divergence=est.summarize([float(p) for p in positions if p is not None]),
        divergence_histogram=tuple(est.divergence_histogram(positions, max_tokens)),
        argmax_agreement_before_divergence=agree_pre / total_pre if total_pre else None,
        argmax_agreement_teacher_forced=agree_tf / total_tf if total_tf else None,
        kl_per_token=est.summarize(kls),
        tv_per_token=est.summarize(tvs),
        margin_at_divergence=est.summarize(margins),
        prompts=tuple(per_prompt),
    )
