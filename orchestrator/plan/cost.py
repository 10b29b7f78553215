"""Step-time model of one replica of a layout: weight and KV reads, compute, TP/EP/PP communication.

`LayoutCost` precomputes per-stage coefficients once, so a step costs a few float operations: the
planner evaluates thousands of layouts and the simulator calls `step` once per engine iteration.
A step's time on a stage is the sum of two rooflines, max(weights read, GEMM FLOPs) for the
weight-streaming GEMMs (dense and routed experts) and max(KV read, attention FLOPs) for attention, each
at the effective HBM bandwidth and FLOP/s, plus the communication of that stage; a token visits every
stage. Two sums, not one max over all bytes and all FLOPs: on one CUDA stream a layer's GEMMs and its
attention kernel run one after another, so a large decode batch's GEMM math does not hide its KV
stream. The coefficients (`StageCost`) and a step's parts (`StepParts`) are defined in
plan/stage_cost.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.catalog.types import LINEAR, MAMBA, GPUSpec, LinkSpec, ModelConfig
from orchestrator.errors import SpecError
from orchestrator.layout import Layout
from orchestrator.plan.assumptions import Assumptions
from orchestrator.plan.comm import allreduce_time_s, p2p_time_s
from orchestrator.plan.kv import kv_cache_shape
from orchestrator.plan.memory import (
    EMBEDDING_BYTES_PER_VALUE,
    WeightFormat,
    split_stages,
    weight_bytes_per_gpu,
)
from orchestrator.plan.moe import (
    activation_bytes,
    all_to_all_bytes_per_layer,
    all_to_all_time_s,
    padded_rows,
    touched_fraction,
)
from orchestrator.plan.params import ParamCounts
from orchestrator.plan.stage_cost import StageCost, StepParts


def _link_for(group: int, gpus_per_node: int, gpu: GPUSpec) -> LinkSpec:
    """A group that spans more than one node pays the inter-node link."""
    return gpu.intra_node if group <= gpus_per_node else gpu.inter_node


# (weight read, token GEMMs, routed experts, tp comm, ep comm) seconds: LayoutCost._token_part
TokenPart = tuple[float, float, float, float, float]
# Token counts whose parts are kept whatever they are: the planner prices a few dozen per layout
# (decode batches, prefill chunks, prompts); the simulator's many prefill-chunk counts stop here.
KEEP_ANY_TOKENS = 64

@dataclass(frozen=True)
class LayoutCost:
    cfg: ModelConfig
    layout: Layout
    gpu: GPUSpec
    stages: tuple[StageCost, ...]
    hbm_bytes_per_s: float  # effective: datasheet x efficiency
    flops_per_s: float  # effective, dense GEMMs (fp8 peak for fp8 weights)
    tp_link: LinkSpec
    ep_link: LinkSpec
    pp_link: LinkSpec
    activation_bytes: float
    expert_imbalance: float  # busiest EP rank's load / mean (1.0 without EP)
    # Each stage's `_token_part` by the step's new tokens, filled as steps are priced: the simulator
    # prices a step per engine iteration, and a busy engine's batch size repeats while its context grows.
    _by_tokens: dict[float, tuple[TokenPart, ...]] = field(default_factory=dict, init=False, repr=False,
                                                           compare=False)
    _decode_pricers: dict[int, Callable[[float, float], float]] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    attn_flops_per_s: float = 0.0  # effective, attention (bf16 peak unless FP8 attention); 0: flops_per_s
    expert_flops_per_s: float = 0.0  # effective, routed-expert grouped GEMMs; 0: flops_per_s
    step_overhead_s: float = 0.0  # fixed per step (once per round under PP)
    layer_overhead_s: float = 0.0  # fixed per layer of a stage, every step (GPUSpec.layer_overhead_s)
    # Fixed per request before it reaches the scheduler (HTTP, tokenisation): TTFT, not step time.
    request_overhead_s: float = 0.0

    # -- one stage ---------------------------------------------------------------------------------
    def touched_fraction(self, moe_tokens: float) -> float:
        """Expected fraction of routed experts a step touches: 1 - (1 - k/E)^B."""
        cfg = self.cfg
        if not cfg.is_moe or moe_tokens <= 0:
            return 0.0
        return touched_fraction(cfg.num_routed_experts, cfg.num_experts_per_token, moe_tokens)

    def _token_parts(self, tokens: float, *, keep: bool = False) -> tuple[TokenPart, ...]:
        """Each stage's `_token_part`; kept (keep=True) for a decode step's token count, a batch size: few
        values that repeat. A prefill chunk's token counts are many, and thousands of small kept tuples
        scattered over the heap held 25 MB more of a 100,000-request simulation at its peak: other
        counts are kept only while fewer than KEEP_ANY_TOKENS are."""
        parts = self._by_tokens.get(tokens)
        if parts is None:
            moe_tokens, per_rank = self._moe_tokens(tokens)
            touched = self.touched_fraction(moe_tokens)
            parts = tuple([self._token_part(st, tokens, touched, per_rank) for st in self.stages])
            if keep or len(self._by_tokens) < KEEP_ANY_TOKENS:
                self._by_tokens[tokens] = parts
        return parts

    def _token_part(self, st: StageCost, tokens: float, touched: float,
                    moe_tokens_per_rank: float) -> TokenPart:
        """(weight read, token GEMMs, routed experts, tp comm, ep comm) seconds of one stage: the parts
        that depend on the step's new tokens alone. The routed experts' compute is 0 where the stage
        has none. `_stage` adds the parts that depend on the context."""
        lookup = min(st.lookup_bytes, tokens * st.lookup_row_bytes)
        w = (st.dense_weight_bytes - st.lookup_bytes + lookup
             + st.expert_weight_bytes * touched) / self.hbm_bytes_per_s
        gemms = (st.dense_flops_per_token + st.state_flops_per_token) * tokens / self.flops_per_s
        experts = 0.0
        if st.moe_layers and moe_tokens_per_rank > 0:
            rows = padded_rows(moe_tokens_per_rank, self.cfg.num_routed_experts, tokens)
            experts = (st.expert_flops_per_routed_token * rows * self.expert_imbalance
                       / (self.expert_flops_per_s or self.flops_per_s)
                       + (st.expert_act_bytes_per_routed_token * moe_tokens_per_rank * self.expert_imbalance
                          + st.expert_act_bytes_per_token * tokens) / self.hbm_bytes_per_s)
        tp = st.allreduces * allreduce_time_s(tokens * self.cfg.hidden_size * self.activation_bytes,
                                              self.layout.tp, self.tp_link)
        ep = 0.0
        if self.layout.ep and st.moe_layers:
            one_way = all_to_all_bytes_per_layer(math.ceil(tokens), self.cfg.num_experts_per_token,
                                                 self.cfg.hidden_size, self.activation_bytes)
            ep = st.moe_layers * all_to_all_time_s(one_way * self.expert_imbalance, self.ep_link.latency_s,
                                                   self.ep_link.bandwidth_bytes_per_s)
        return w, gemms, experts, tp, ep

    def _stage(self, st: StageCost, part: TokenPart, tokens: float,
               kv_tokens: float, attn_pairs: float, prefill_pairs: float, sequences: float,
               prefix_tokens: float = 0.0) -> tuple[float, float, float, float, float, float]:
        """(weight read, kv read, compute, tp comm, ep comm, busy) seconds of one stage; `part` is its
        `_token_part` for `tokens`. Compute is every kernel beside the weight and KV stream: GEMMs and
        attention at their FLOP rate, and the fused-MoE activation passes at the HBM rate (they run
        between the GEMMs, not under them). `busy` is the stage's time before communication:
        max(weight read, GEMM compute) + max(KV read, attention compute), the GEMMs and the attention
        kernel one after another on the stream."""
        w, gemms, experts, tp, ep = part
        kv_bytes = st.kv_bytes_per_token * kv_tokens
        if st.has_side_kv:
            kv_bytes += st.side_read_bytes(kv_tokens, sequences)
        kv = kv_bytes / self.hbm_bytes_per_s
        decode_pairs = max(attn_pairs - prefill_pairs, 0.0)
        attn = (st.attn_flops_per_pair * min(prefill_pairs, attn_pairs)
                + (st.decode_attn_flops_per_pair or st.attn_flops_per_pair) * decode_pairs)
        if st.window_attn_flops_per_pair:
            attn += st.window_attn_flops(tokens, attn_pairs)
        attn_s = attn / (self.attn_flops_per_s or self.flops_per_s)
        lin = gemms  # the weight-streaming kernels' compute: dense GEMMs, routed experts, MLA's expansion
        if experts:
            lin += experts
        if prefix_tokens and st.mla_expand_flops_per_prefix_token:
            lin += st.mla_expand_flops_per_prefix_token * prefix_tokens / self.flops_per_s
        busy = (w if w > lin else lin) + (kv if kv > attn_s else attn_s) + st.layers * self.layer_overhead_s
        return w, kv, lin + attn_s, tp, ep, busy

    def stage_times_s(self, tokens: float, kv_tokens: float, attn_pairs: float, *,
                      prefill_pairs: float = 0.0, sequences: float | None = None,
                      prefix_tokens: float = 0.0) -> tuple[float, ...]:
        """Time of each stage for one step of `tokens` new tokens (used by the simulator for PP)."""
        seqs = tokens if sequences is None else sequences
        out = []
        for st, part in zip(self.stages, self._token_parts(tokens), strict=True):
            *_, tp, ep, busy = self._stage(st, part, tokens, kv_tokens, attn_pairs, prefill_pairs, seqs,
                                           prefix_tokens)
            out.append(busy + tp + ep)
        return tuple(out)

    def _moe_tokens(self, tokens: float) -> tuple[float, float]:
        """(tokens the EP group routes, routed tokens per rank-share). With EP, every DP rank's tokens
        meet at the experts (the other ranks are taken to be as busy); without EP each DP rank routes
        its own tokens to its own full set of experts."""
        if self.layout.ep:
            group_tokens = tokens * self.layout.dp
            return group_tokens, group_tokens * self.cfg.num_experts_per_token
        return tokens, tokens * self.cfg.num_experts_per_token

    # -- whole replica -----------------------------------------------------------------------------
    def step(self, tokens: float, kv_tokens: float, attn_pairs: float, *,
             prefill_pairs: float = 0.0, sequences: float | None = None,
             prefix_tokens: float = 0.0) -> StepParts:
        """One step of one micro-batch through all stages, plus the fixed step overhead.

        tokens: new tokens computed (decodes + prefill chunk); kv_tokens: context tokens whose KV is
        read; attn_pairs: sum over new tokens of the context each attends to; prefill_pairs: the part of
        attn_pairs that belongs to prefill chunks (MLA runs those in the cheaper non-absorbed form);
        sequences: how many sequences the tokens belong to (default: one token each, a decode step);
        prefix_tokens: the prompt tokens computed before this step's prefill chunks (MLA re-expands them).
        """
        seqs = tokens if sequences is None else sequences
        sw = skv = sc = stp = sep = total = 0.0
        slowest, bound = -1.0, "memory"
        for st, part in zip(self.stages, self._token_parts(tokens), strict=True):
            w, kv, comp, tp, ep, busy = self._stage(st, part, tokens, kv_tokens, attn_pairs, prefill_pairs,
                                                    seqs, prefix_tokens)
            t = busy + tp + ep
            sw, skv, sc, stp, sep, total = sw + w, skv + kv, sc + comp, stp + tp, sep + ep, total + t
            if t > slowest:
                slowest, bound = t, ("compute" if comp > w + kv else "memory")
        pp = (len(self.stages) - 1) * p2p_time_s(tokens * self.cfg.hidden_size * self.activation_bytes,
                                                 self.pp_link)
        over = self.step_overhead_s
        # reported with the stages' layer floors (inside `total` already): the step's fixed costs together
        fixed = over + sum(st.layers for st in self.stages) * self.layer_overhead_s
        return StepParts(sw, skv, sc, stp, sep, pp, total + pp + over, bound, fixed)

    def decode_round_s(self, batch: int, context_tokens: int) -> tuple[StepParts, float, int]:
        """Per-token latency of `batch` sequences decoding with `context_tokens` each.

        Under PP the batch is split into m = min(p, batch) micro-batches that keep every stage busy;
        one round (every sequence gets a token) takes m times the slowest stage's micro-batch time
        plus the p-1 transfers, and at least one micro-batch's trip through all stages.
        Returns (parts of one micro-batch, round seconds, m).
        """
        p = len(self.stages)
        m = max(1, min(p, batch))
        mb = math.ceil(batch / m)
        parts = self.step(mb, mb * context_tokens, mb * context_tokens)
        return parts, self.round_s(m * mb, m * mb * context_tokens, m * mb * context_tokens, batch), m

    def round_s(self, tokens: float, kv_tokens: float, attn_pairs: float, sequences: int, *,
                prefill_pairs: float | None = None, prefix_tokens: float = 0.0) -> float:
        """Time until every sequence of a batch has had its step (the simulator's step time).

        Under PP the batch is split into m = min(p, sequences) equal micro-batches that keep every
        stage busy: m times the slowest stage plus the p-1 transfers, and no less than one
        micro-batch's trip through all stages. Without PP it is `step(...).total_s`, computed lean
        (no parts) because the simulator calls it once per engine step. The fixed step overhead is
        paid once per round. Without `prefill_pairs`, a step with more tokens than sequences counts
        its pairs as prefill (they dominate: a chunk attends to its whole prefix), else as decode.
        """
        if prefill_pairs is None:
            prefill_pairs = attn_pairs if tokens > sequences else 0.0
        p = len(self.stages)
        m = max(1, min(p, sequences))
        t, kv, pairs, pf = tokens / m, kv_tokens / m, attn_pairs / m, prefill_pairs / m
        pre = prefix_tokens / m
        total = slowest = 0.0
        seqs = sequences / m
        for st, part in zip(self.stages, self._token_parts(t, keep=tokens == sequences), strict=True):
            *_, tp, ep, busy = self._stage(st, part, t, kv, pairs, pf, seqs, pre)
            s = busy + tp + ep
            total += s
            if s > slowest:
                slowest = s
        if p == 1:
            return total + self.step_overhead_s
        pp = (p - 1) * p2p_time_s(t * self.cfg.hidden_size * self.activation_bytes, self.pp_link)
        # A round can be no shorter than one token's trip through every stage.
        return max(m * slowest + pp, total + pp) + self.step_overhead_s

    def decode_pricer(self, decodes: int) -> Callable[[float, float], float] | None:
        """`round_s` of a plain decode step of `decodes` sequences (one token each, no prefill), as a
        function of (kv_tokens, attn_pairs), or None where the layout needs the general `round_s` (PP,
        window or state layers). Kept per batch size: a busy engine decodes many steps at one batch size
        while its context grows, and this skips the per-stage calls. The same operations in the same
        order as `round_s` with one stage (m = 1, no prefill pairs: attention at the decode rate), so
        bit-identical to it."""
        pricer = self._decode_pricers.get(decodes)
        if pricer is not None or len(self.stages) != 1:
            return pricer
        st = self.stages[0]
        if st.has_side_kv or st.window_attn_flops_per_pair:
            return None
        # a float count, as round_s passes it: the parts are computed from the same value (bit-identical)
        w, gemms, experts, tp, ep = self._token_parts(decodes / 1, keep=True)[0]
        kv_per_token, hbm = st.kv_bytes_per_token, self.hbm_bytes_per_s
        per_pair = st.decode_attn_flops_per_pair or st.attn_flops_per_pair
        attn_rate = self.attn_flops_per_s or self.flops_per_s
        layers = st.layers * self.layer_overhead_s
        over = self.step_overhead_s

        def price(kv_tokens: float, attn_pairs: float) -> float:
            kv = kv_per_token * kv_tokens / hbm
            attn = per_pair * attn_pairs / attn_rate
            lin = gemms
            if experts:
                lin += experts
            return (w if w > lin else lin) + (kv if kv > attn else attn) + layers + tp + ep + over

        self._decode_pricers[decodes] = price
        return price

    def prefill(self, prompt_tokens: int) -> StepParts:
        """One prompt prefilled alone (TTFT without queueing): causal attention over T(T+1)/2 pairs."""
        pairs = prompt_tokens * (prompt_tokens + 1) / 2
        return self.step(prompt_tokens, 0, pairs, prefill_pairs=pairs, sequences=1)


def build_layout_cost(cfg: ModelConfig, counts: ParamCounts, gpu: GPUSpec, layout: Layout, *,
                      gpus_per_node: int, weight_bytes_per_value: float, kv_bytes_per_value: float,
                      fp8_compute: bool, assumptions: Assumptions, expert_imbalance: float = 1.0,
                      fp4_compute: bool = False,
                      fp8_attention: bool = False, weight_format: WeightFormat | None = None,
                      max_model_len: int | None = None, expert_copies: float = 1.0) -> LayoutCost:
    """`expert_copies`: physical / routed experts under EP with redundant slots (EPLB), the factor on
    the routed expert weights every rank holds."""
    if layout.pp > counts.num_layers:
        raise SpecError(f"layout {layout}: {layout.pp} pipeline stages for {counts.num_layers} layers")
    tp = layout.tp
    expert_ranks = layout.ep_size if layout.ep else tp
    d_qk = (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim) if cfg.is_mla else cfg.head_dim
    d_v = cfg.v_head_dim if cfg.is_mla else cfg.head_dim
    # MLA decode in the absorbed form (what vLLM/SGLang run): per head, scores against the latent and
    # rope key (kv_lora_rank + rope dims) and values from the latent (kv_lora_rank): 2(2r + rope) FLOPs
    # per pair instead of prefill's 2(d_qk + d_v). DeepSeek-V3: 2*1088 vs 2*320, 3.4x.
    decode_dims = (2 * cfg.kv_lora_rank + cfg.qk_rope_head_dim) if cfg.is_mla else 0
    # kv_b_proj on one cached latent: r -> heads x (nope + v), the heads split over TP.
    expand_flops = (2.0 * cfg.kv_lora_rank * cfg.num_heads * (cfg.qk_nope_head_dim + cfg.v_head_dim) / tp
                    if cfg.is_mla else 0.0)
    has_fp8 = gpu.fp8_flops_per_s > 0
    # Under EP each rank holds whole experts; under TP a 1/tp slice of every expert's width.
    shard = cfg.moe_intermediate_size // (1 if layout.ep else tp)
    act_row, act_token = (activation_bytes(cfg.hidden_size, shard, (fp8_compute or fp4_compute) and has_fp8)
                          if cfg.is_moe else (0.0, 0.0))
    rows_share = layout.ep_size if layout.ep else 1
    stages = []
    split = split_stages(cfg, counts, layout.pp)
    fmt = weight_format or WeightFormat.uniform(weight_bytes_per_value)
    for i, sp in enumerate(split):
        dense_b, expert_b = weight_bytes_per_gpu(sp, weight_format=fmt, tp=tp, expert_ranks=expert_ranks)
        if layout.ep and cfg.num_routed_experts % expert_ranks:
            # vLLM's uneven expert split: the busiest rank holds ceil(E / ranks) experts.
            per_rank = math.ceil(cfg.num_routed_experts / expert_ranks)
            expert_b *= per_rank * expert_ranks / cfg.num_routed_experts
        shape = kv_cache_shape(cfg, sp.layer_range, kv_bytes_per_value=kv_bytes_per_value, tp=tp,
                               max_model_len=max_model_len)
        full_layers = sum(1 for g in shape.groups if g.kind == "full" for _ in range(g.layers))
        pair_flops = 2.0 * cfg.num_heads * (d_qk + d_v) / tp  # one attention layer
        window_counts: dict[int, int] = {}
        for g in shape.groups:
            if g.kind in ("sliding", "chunked"):
                window_counts[g.window_tokens] = window_counts.get(g.window_tokens, 0) + g.layers
        routed_active = sp.moe_layers * counts.top_k * counts.routed_expert
        first, last = i == 0, i == len(split) - 1
        # The input embedding is a lookup of B rows, unless the same matrix is the LM head here.
        lookup_only = first and not (last and counts.lm_head == 0)
        lookup = counts.embedding * EMBEDDING_BYTES_PER_VALUE / tp if lookup_only else 0.0
        stages.append(StageCost(
            dense_weight_bytes=dense_b,
            expert_weight_bytes=expert_b * (expert_copies if layout.ep else 1.0),
            kv_bytes_per_token=shape.full_bytes_per_token,
            dense_flops_per_token=2.0 * (sp.flop_params - routed_active) / tp,
            expert_flops_per_routed_token=2.0 * counts.routed_expert * sp.moe_layers / expert_ranks,
            attn_flops_per_pair=pair_flops * full_layers,
            allreduces=2 * sp.layers if tp > 1 else 0,
            moe_layers=sp.moe_layers,
            layers=sp.layers,
            lookup_bytes=lookup,
            lookup_row_bytes=cfg.hidden_size * EMBEDDING_BYTES_PER_VALUE / tp if lookup_only else 0.0,
            decode_attn_flops_per_pair=2.0 * cfg.num_heads * decode_dims * full_layers / tp,
            kv_shape=shape,
            has_side_kv=bool(shape.window_bytes_per_token or shape.state_bytes_per_sequence),
            window_attn_flops_per_pair=tuple((pair_flops * n, w) for w, n in sorted(window_counts.items())),
            state_flops_per_token=sum(state_flops_per_token(cfg, cfg.layer_kind(j), tp)
                                      for j in sp.layer_range),
            expert_act_bytes_per_routed_token=act_row * sp.moe_layers / rows_share,
            expert_act_bytes_per_token=act_token * sp.moe_layers,
            mla_expand_flops_per_prefix_token=expand_flops * full_layers,
        ))
    # FP8 weights run FP8 GEMMs where the part has FP8 tensor cores; NVFP4 weights FP4 GEMMs where it
    # has FP4 ones (TensorRT-LLM and vLLM on Blackwell quantize activations to NVFP4 too), else bf16.
    if fp4_compute and gpu.fp4_flops_per_s > 0:
        peak = gpu.fp4_flops_per_s
    elif fp8_compute and has_fp8:
        peak = gpu.fp8_flops_per_s
    else:
        peak = gpu.bf16_flops_per_s
    # Attention runs at the bf16 peak even with fp8 weights, unless FP8 attention (FP8 KV) is on.
    attn_peak = gpu.fp8_flops_per_s if fp8_attention and has_fp8 else gpu.bf16_flops_per_s
    # PP stages sit on different nodes once a replica spans nodes; its neighbours then talk over IB.
    pp_link = _link_for(layout.gpus_per_replica, gpus_per_node, gpu)
    return LayoutCost(
        cfg=cfg, layout=layout, gpu=gpu, stages=tuple(stages),
        hbm_bytes_per_s=gpu.hbm_bytes_per_s * gpu.hbm_efficiency,
        flops_per_s=peak * gpu.compute_efficiency,
        tp_link=_link_for(tp, gpus_per_node, gpu),
        ep_link=_link_for(layout.ep_size, gpus_per_node, gpu),
        pp_link=pp_link,
        activation_bytes=assumptions.activation_bytes_per_value,
        expert_imbalance=expert_imbalance if layout.ep else 1.0,
        attn_flops_per_s=attn_peak * gpu.compute_efficiency,
        expert_flops_per_s=peak * gpu.moe_compute_efficiency,
        step_overhead_s=gpu.step_overhead_s,
        layer_overhead_s=gpu.layer_overhead_s,
        request_overhead_s=gpu.request_overhead_s,
    )


def state_flops_per_token(cfg: ModelConfig, kind: str, tp: int) -> float:
    """FLOPs a state layer spends per token beside its projections (counted in the parameters):
    Gated DeltaNet reads and updates a d_k x d_v state per value head and reads it out (about 6 d_k
    d_v); a Mamba-1 selective scan about 6 d_inner d_state. Split over TP like the heads."""
    if kind == LINEAR and cfg.linear_attention is not None:
        la = cfg.linear_attention
        return 6.0 * la.num_value_heads * la.key_head_dim * la.value_head_dim / tp
    if kind == MAMBA and cfg.mamba is not None:
        return 6.0 * cfg.mamba.inner_size * cfg.mamba.state_size / tp
    return 0.0


# StageCost and StepParts live in plan/stage_cost.py; importers of plan.cost keep finding them here.
__all__ = ["LayoutCost", "StageCost", "StepParts", "build_layout_cost", "state_flops_per_token"]
