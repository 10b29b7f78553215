"""The cost of a speculative-decoding step: the drafter's passes plus the model verifying k+1 tokens per
decoding sequence, both priced by plan/cost.py's step function (one formula, here; the planner and the
simulator call it).

A step of a batch with D decoding sequences (and maybe prompt chunks):
- verify: the model runs D(k+1) new tokens plus the chunks; each sequence's k+1 query tokens attend to
  its context and the ones before them, and read its KV once;
- draft (vLLM 0.33, `SpecDecodeBaseProposer.propose`): a first pass over every verified position and
  the chunks (the drafter keeps KV for the whole sequence), then k-1 passes of one token per decoding
  sequence; n-gram lookup runs on the CPU and is taken as free;
- on average each decoding sequence gets `tokens_per_step` tokens (plan/speculative.py), so
  TPOT = step / tokens_per_step, and the tokens of a step arrive together (ITL = the step).
The drafter's passes ride in the engine's step: they pay no step overhead of their own; what
speculation adds beside them (the proposer call, the rejection sampler, n-gram lookups, preparing k+1
positions per sequence) is the GPU preset's `spec_step_overhead_s` per step plus
`spec_sequence_overhead_s` per decoding sequence (0 unless measured: docs/speculative.md). Its weights sit
on the GPUs of the last PP stage (vLLM builds the drafter with pipeline_parallel_size=1, TP as the
model's), and its KV shares the model's cache: every cached token holds both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from orchestrator.catalog.types import GPUSpec
from orchestrator.layout import Layout
from orchestrator.plan.assumptions import Assumptions
from orchestrator.plan.cost import LayoutCost, build_layout_cost
from orchestrator.plan.dtypes import weight_bytes_per_value
from orchestrator.plan.memory import EMBEDDING_BYTES_PER_VALUE
from orchestrator.plan.params import count_params
from orchestrator.plan.speculative import SpeculativeSettings


@dataclass(frozen=True)
class SpeculativeCost:
    settings: SpeculativeSettings
    target: LayoutCost
    draft: LayoutCost | None  # one draft pass; None for ngram
    draft_weight_bytes_per_gpu: float = 0.0  # on each GPU of the last PP stage
    draft_kv_bytes_per_token_per_gpu: float = 0.0

    @property
    def k(self) -> int:
        return self.settings.num_speculative_tokens

    @property
    def tokens_per_step(self) -> float:
        return self.settings.tokens_per_step

    def round_s(self, tokens: float, kv_tokens: float, attn_pairs: float, sequences: int, *,
                decodes: int, prefill_pairs: float = 0.0, prefix_tokens: float = 0.0) -> float:
        """One engine step with speculation, in the terms of `LayoutCost.round_s`.

        tokens: decodes (one each, as without speculation) + prompt-chunk tokens; attn_pairs: each decode
        attending to its context (+1), plus `prefill_pairs` for the chunks.
        """
        k = self.k
        decode_pairs = max(attn_pairs - prefill_pairs, 0.0)
        verify_tokens = tokens + decodes * k
        verify_pairs = prefill_pairs + (k + 1) * decode_pairs + decodes * k * (k + 1) / 2
        step = self.target.round_s(verify_tokens, kv_tokens, verify_pairs, sequences,
                                   prefill_pairs=prefill_pairs, prefix_tokens=prefix_tokens)
        gpu = self.target.gpu
        step += gpu.spec_step_overhead_s + decodes * gpu.spec_sequence_overhead_s
        draft = self.draft
        if draft is None or verify_tokens <= 0:
            return step
        step += draft.round_s(verify_tokens, kv_tokens, verify_pairs, sequences, prefill_pairs=prefill_pairs,
                              prefix_tokens=prefix_tokens)
        if decodes and k > 1:
            context = max(decode_pairs - decodes, 0.0)
            step += (k - 1) * draft.round_s(decodes, context, decode_pairs, decodes, prefill_pairs=0.0)
        return step

    def decode_step_s(self, batch: int, context_tokens: int) -> float:
        """A decode-only step of `batch` sequences at `context_tokens` each (the planner's view)."""
        pairs = float(batch * (context_tokens + 1))
        return self.round_s(batch, batch * context_tokens, pairs, batch, decodes=batch)

    def tpot_s(self, batch: int, context_tokens: int) -> float:
        return self.decode_step_s(batch, context_tokens) / self.tokens_per_step


def build_speculative_cost(settings: SpeculativeSettings, target: LayoutCost, *, gpus_per_node: int,
                           model_bytes_per_value: float, kv_bytes_per_value: float, fp8_compute: bool,
                           assumptions: Assumptions,
                           quant_group_size: int = 128) -> SpeculativeCost:
    """The drafter of `settings` on the layout of `target`: one pass's cost, its weights and KV per GPU.

    model_bytes_per_value is the model's weight bytes per value; a drafter with a dtype of its own
    (EAGLE heads, draft models) uses that instead.
    """
    drafter = settings.drafter
    if drafter is None:
        return SpeculativeCost(settings, target, None)
    layout = target.layout
    draft_layout = Layout(tp=layout.tp, dp=layout.dp, ep=layout.ep and drafter.is_moe)
    own_dtype = settings.draft_weight_dtype
    bpv = weight_bytes_per_value(own_dtype, quant_group_size) if own_dtype else model_bytes_per_value
    gpu: GPUSpec = target.gpu
    draft = build_layout_cost(
        drafter, count_params(drafter), gpu, draft_layout, gpus_per_node=gpus_per_node,
        weight_bytes_per_value=bpv, kv_bytes_per_value=kv_bytes_per_value,
        fp8_compute=fp8_compute and own_dtype in (None, "fp8"), assumptions=assumptions,
        expert_imbalance=target.expert_imbalance if draft_layout.ep else 1.0,
    )
    draft = replace(draft, step_overhead_s=0.0, request_overhead_s=0.0)
    stage = draft.stages[0]
    counts = count_params(drafter)
    embedding = counts.embedding * EMBEDDING_BYTES_PER_VALUE / layout.tp
    head = counts.lm_head * EMBEDDING_BYTES_PER_VALUE / layout.tp  # 0 when tied to the embedding
    layers = stage.dense_weight_bytes + stage.expert_weight_bytes - embedding - head
    own = (0.0 if settings.shares_embedding else embedding) + (0.0 if settings.shares_lm_head else head)
    if settings.shares_embedding and not settings.shares_lm_head and counts.lm_head == 0:
        own += embedding  # a tied head is the embedding matrix: sharing the input side keeps the head
    return SpeculativeCost(
        settings, target, draft,
        draft_weight_bytes_per_gpu=layers * settings.drafter_copies + own,
        draft_kv_bytes_per_token_per_gpu=stage.kv_bytes_per_token * settings.drafter_copies,
    )
