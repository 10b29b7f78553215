"""Memory formulas: PP stage split, weight bytes per GPU, KV bytes per token.

Symbols as in DESIGN.md: L layers, h_kv KV heads, d_head head dim, b bytes per value, n TP degree.
KV per layer kind and the hybrid allocator's layout are in plan/kv.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.catalog.types import CheckpointQuant, ModelConfig
from orchestrator.plan import kv
from orchestrator.plan.params import ParamCounts, stage_params

# Embedding, LM head, norms and routers stay in 16-bit in every checkpoint format orch reads (vLLM and
# the common quantizers leave them unquantized).
EMBEDDING_BYTES_PER_VALUE = 2.0


@dataclass(frozen=True)
class WeightFormat:
    """Bytes per weight for the three kinds of matrices a checkpoint may quantize differently (gpt-oss:
    MXFP4 routed experts, bf16 attention)."""

    attention: float
    dense: float  # dense MLPs and shared experts
    experts: float  # routed experts

    @classmethod
    def uniform(cls, bytes_per_value: float) -> WeightFormat:
        return cls(bytes_per_value, bytes_per_value, bytes_per_value)

    @classmethod
    def of_checkpoint(cls, quantized_bytes: float, quant: CheckpointQuant | None) -> WeightFormat:
        """`quantized_bytes` for the matrices the checkpoint quantizes, 16-bit for the ones it keeps."""
        if quant is None:
            return cls.uniform(quantized_bytes)
        keep = EMBEDDING_BYTES_PER_VALUE
        return cls(attention=quantized_bytes if quant.attention_quantized else keep,
                   dense=quantized_bytes if quant.dense_quantized else keep,
                   experts=quantized_bytes if quant.experts_quantized else keep)


def stage_layer_counts(num_layers: int, stages: int) -> tuple[int, ...]:
    """Layers per PP stage as vLLM splits them (vllm/distributed/utils.py get_pp_indices): an even
    split, the r extra layers one each on the stages before the last, from the second-to-last
    backwards (the last stage carries the final norm and LM head). 61 layers in 4: (15, 15, 16, 15).
    """
    base, extra = divmod(num_layers, stages)
    counts = [base] * stages
    for i in range(2, extra + 2):
        counts[-i] += 1
    return tuple(counts)


def stage_ranges(num_layers: int, stages: int) -> tuple[range, ...]:
    out, start = [], 0
    for count in stage_layer_counts(num_layers, stages):
        out.append(range(start, start + count))
        start += count
    return tuple(out)


@dataclass(frozen=True)
class StageParams:
    """Parameters one PP stage holds, before any TP/EP split."""

    layers: int
    moe_layers: int
    total: int  # everything the stage holds (vision tower not included)
    embedding: int  # the part that is embedding / LM head (kept in 16 bit)
    routed_experts: int  # the part that is routed experts (what EP shards)
    flop_params: int  # parameters each token multiplies by (no input embedding; top-k experts only)
    mixer: int = 0  # attention / linear-attention / Mamba mixers
    small: int = 0  # norms and routers (16 bit)
    vision: int = 0  # the vision tower, on the first stage (16 bit)
    layer_range: range = range(0)


def split_stages(cfg: ModelConfig, counts: ParamCounts, stages: int) -> tuple[StageParams, ...]:
    out = []
    ranges = stage_ranges(counts.num_layers, stages)
    for i, layers in enumerate(ranges):
        first, last = i == 0, i == len(ranges) - 1
        total = stage_params(counts, layers, first=first, last=last, cfg=cfg)
        lps = [counts.layers[j] for j in layers]
        emb = (counts.embedding if first else 0)
        if last:
            emb += counts.lm_head if counts.lm_head else (0 if first else counts.embedding)
        flop = sum(lp.active for lp in lps) + ((counts.lm_head or counts.embedding) if last else 0)
        out.append(StageParams(
            layers=len(layers), moe_layers=sum(1 for lp in lps if lp.moe), total=total, embedding=emb,
            routed_experts=sum(lp.routed for lp in lps), flop_params=flop,
            mixer=sum(lp.mixer for lp in lps),
            small=sum(lp.small for lp in lps) + (counts.final_norm if last else 0),
            vision=counts.vision if first else 0, layer_range=layers))
    return tuple(out)


def weight_bytes_per_gpu(stage: StageParams, *, weight_format: WeightFormat, tp: int,
                         expert_ranks: int) -> tuple[float, float]:
    """(non-expert bytes, routed-expert bytes) one GPU of the stage holds.

    Non-expert weights (and the vision tower) are split over TP; routed experts over the EP ranks
    (tp*dp) with EP, over TP without it (each DP rank then holds every expert, sharded by TP).
    """
    sixteen = stage.embedding + stage.small + stage.vision
    dense = stage.total - stage.embedding - stage.routed_experts - stage.mixer - stage.small
    nonexpert = (stage.mixer * weight_format.attention + dense * weight_format.dense
                 + sixteen * EMBEDDING_BYTES_PER_VALUE) / tp
    experts = stage.routed_experts * weight_format.experts / expert_ranks
    return nonexpert, experts


def kv_values_per_token_per_layer(cfg: ModelConfig, tp: int) -> int:
    """Values one GPU stores per token per attention layer: 2 ceil(h_kv/n) d_head, or MLA's latent."""
    return round(kv.attention_bytes_per_token(cfg, 1.0, tp))


def kv_bytes_per_token(cfg: ModelConfig, kv_bytes_per_value: float) -> float:
    """kappa for the whole model on one GPU, full-attention layers only (plan/kv.py)."""
    return kv.kv_bytes_per_token(cfg, kv_bytes_per_value)



# vLLM sizes its KV pool after a start-up profile run and counts that run's peak out of it (read in
# vllm-project/vllm at commit 000fc94b754f66aeb60ef5acf1ea2e94cdc65164): v1/worker/gpu_worker.py
# determine_available_memory runs GPUModelRunner.profile_run and keeps total memory x
# gpu_memory_utilization less the weights, the run's peak and the memory outside torch for KV.
# profile_run (v1/worker/gpu_model_runner.py) runs the model on max_num_batched_tokens tokens split into
# min(tokens, max_num_seqs) requests, then `_dummy_sampler_run` on the last token of each: one row of
# logits per request over the whole vocabulary (V1 gathers the logits to every TP rank, and every rank
# samples), with top-k and top-p on. Bytes per row x vocabulary entry alive at that run's peak, by
# how the engine applies top-k/top-p:
# - "no-sort" (the vLLM we target, 0.33, and vLLM up to 0.11.0): compute_logits' rows in the model
#   dtype (2, alive until the run ends) and Sampler.forward's float32 copy (4), then two float32
#   tensors of the same size (4 + 4). In 0.33 the top-k/top-p mask is applied in place by Triton
#   (v1/sample/ops/topk_topp_triton.py, PR #33538) and the second, seeded call takes forward_native:
#   a float32 softmax feeding random_sample's exponential draw (divided in place). Up to 0.11.0 the
#   FlashInfer sampler was on by default (VLLM_USE_FLASHINFER_SAMPLER unset means on in V1, until PR
#   #26859 of 2025-10-15) and top_k_top_p_sampling_from_logits holds the masked logits and their
#   softmax; PR #40376 turned it on by default again, with the same peak;
# - "sort" (vLLM built between PR #26859 and PR #33538 of Feb 2026, or without FlashInfer before it):
#   apply_top_k_top_p sorts the float32 rows, so beside the 2 + 4 it holds the sorted values (4),
#   their int64 indices (8), the float32 probabilities of the top-p cumsum (4), the top-k and top-p
#   boolean masks (1 + 1) and the rows scattered back into a new tensor (4);
# - "none": an engine that sizes its pool without a sampler run (SGLang's mem_fraction_static; the
#   simulator standing in for TensorRT-LLM, whose KV fraction is of the memory left after its own).
SAMPLER_BYTES_PER_LOGIT = {"no-sort": 2.0 + 4.0 + 4.0 + 4.0,
                           "sort": 2.0 + 4.0 + 4.0 + 8.0 + 4.0 + 1.0 + 1.0 + 4.0,
                           "none": 0.0}


def sampler_profile_bytes(vocab_size: int, max_num_seqs: int, max_num_batched_tokens: int,
                          sampler_profile: str = "no-sort") -> float:
    """Peak bytes of the engine's start-up sampler run on each GPU of the last PP stage, counted out
    of its KV pool; see SAMPLER_BYTES_PER_LOGIT."""
    rows = min(max_num_seqs, max_num_batched_tokens)
    return float(rows) * vocab_size * SAMPLER_BYTES_PER_LOGIT[sampler_profile]


def engine_sampler_profile(engine: str, sim_scheduler: str = "vllm") -> str:
    """The SAMPLER_BYTES_PER_LOGIT key of an engine orch runs: SGLang sizes its pool from
    mem_fraction_static without a sampler run; the simulator under TensorRT-LLM's scheduler
    (guaranteed-no-evict) stands in for an engine whose KV fraction is of the memory left; vLLM and
    the simulator under vLLM's scheduler run the vLLM we target."""
    return "none" if engine == "sglang" or sim_scheduler == "guaranteed-no-evict" else "no-sort"
