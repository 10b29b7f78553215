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


def startup_peak_bytes(forward_bytes: float, sampler_bytes: float) -> float:
    """The start-up profile run's peak on one GPU, counted out of the KV pool: vLLM's profile_run
    (v1/worker/gpu_model_runner.py) runs the forward on max_num_batched_tokens, which frees its
    activations when it returns (only the last hidden states stay), and then `_dummy_sampler_run`; the
    pool is sized from torch's peak over both (gpu_worker.py determine_available_memory: weights +
    torch_peak_increase + non_torch_increase), so the peak is the larger of the two runs, not their sum."""
    return max(forward_bytes, sampler_bytes)


def forward_profile_bytes(cfg: ModelConfig, *, tp: int, expert_tp: int, tokens: int,
                          bytes_per_value: float) -> float:
    """Activations alive at the peak of the profile forward on `tokens` tokens, per GPU: the residual
    stream and the layer input (2 H) beside the widest block's outputs: attention's fused QKV and its
    output; a dense MLP's fused gate_up (2 I) and activation (I); a routed MoE's fused_experts caches
    (fused_moe.py fused_experts_impl: intermediate_cache1 top_k x 2 I_shard, cache2 top_k x I_shard,
    cache3 top_k x H) and its router logits. Attention's own workspace (flash-attention keeps no
    tokens x tokens scores) and the allocator's slack are not counted."""
    h = cfg.hidden_size
    if cfg.is_mla:
        d_qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
        attn = cfg.num_heads * (2 * d_qk + 2 * cfg.v_head_dim) / tp  # q, expanded k and v, output
    else:
        attn = (2 * cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim / tp  # q, k, v, output
    dense = 3 * cfg.intermediate_size / tp if cfg.intermediate_size else 0.0
    moe = 0.0
    if cfg.is_moe:
        shard = cfg.moe_intermediate_size / expert_tp
        moe = cfg.num_experts_per_token * (3 * shard + h) + cfg.num_routed_experts
    return float(tokens) * (2 * h + max(attn, dense, moe)) * bytes_per_value


# vLLM's MXFP4 MoE backends and how each lays out the routed experts (read in vllm-project/vllm at
# commit 007d50058a06dec0f82472d63c819244d460c40d, model_executor/layers/quantization/mxfp4.py):
# (multiple the expert width's shard is rounded up to, multiple the hidden size is rounded up to,
# copies of the E8M0 scales kept). `Mxfp4MoEMethod.create_weights` pads per backend: Marlin needs
# n % 256 and k % 128 (shard to 128, hidden to 256); FlashInfer's SM100 TRT-LLM kernels pad both to
# 256; FlashInfer's CUTLASS (SM90 BF16, SM100 MXFP8) both to 128; Triton (CUDA) the shard to 64 and
# not the hidden size. Triton's `process_weights_after_loading` swizzles the weights and scales into
# triton_kernels' layout (HopperMXValueLayout: a permutation, same size), deletes the original
# weights but keeps the original `w13_weight_scale` / `w2_weight_scale` on the layer beside the
# swizzled ones in its PrecisionConfig: the scales are held twice. ROCm pads by
# `get_padding_alignment()` (not read here): counted unpadded.
MXFP4_LAYOUTS: dict[str, tuple[int, int, int]] = {
    "marlin": (128, 256, 1),
    "flashinfer-trtllm": (256, 256, 1),
    "flashinfer-cutlass": (128, 128, 1),
    "triton": (64, 1, 2),
    "unpadded": (1, 1, 1),
}


def mxfp4_moe_backend(engine: str, sim_scheduler: str, compute_capability: str, *, weight_dtype: str) -> str:
    """The layout of the routed experts: "unpadded" (as the checkpoint stores them) unless the weights
    are MXFP4; for MXFP4, the MoE backend vLLM picks for a GPU (mxfp4.py `get_mxfp4_backend`, no
    LoRA, environment defaults): FlashInfer's SM90 BF16 path only with
    VLLM_USE_FLASHINFER_MOE_MXFP4_BF16 (off), so Hopper (9.0) runs Triton (`triton_kernels`, vendored
    in the vLLM wheel we target, torch >= 2.8, 9.0 <= capability < 11.0); the SM100 family (10.x) with
    FlashInfer installed (a dependency of the CUDA wheel) runs FlashInfer's BF16 TRT-LLM kernels;
    every other CUDA GPU (Ampere 8.0, Ada 8.9, Blackwell workstation 12.0) Marlin. SGLang's MXFP4
    path, the simulator standing in for TensorRT-LLM and GPUs with no capability in the catalog (ROCm,
    CPU) count the checkpoint as stored ("unpadded")."""
    if (weight_dtype != "mxfp4" or engine == "sglang" or sim_scheduler == "guaranteed-no-evict"
            or not compute_capability):
        return "unpadded"
    major = int(compute_capability.split(".")[0])
    if major == 10:
        return "flashinfer-trtllm"
    if major == 9:
        return "triton"
    return "marlin"


def mxfp4_padded_dims(backend: str, hidden_size: int, shard_width: int) -> tuple[int, int]:
    """(expert width shard, hidden size) as the backend allocates them: each rounded up to its
    multiple in MXFP4_LAYOUTS."""
    shard_multiple, hidden_multiple, _ = MXFP4_LAYOUTS[backend]
    return (-(-shard_width // shard_multiple) * shard_multiple,
            -(-hidden_size // hidden_multiple) * hidden_multiple)


def mxfp4_expert_factor(backend: str, hidden_size: int, shard_width: int) -> float:
    """Bytes the backend holds for MXFP4 routed experts over the checkpoint's count (0.5 byte a weight
    + one E8M0 scale per 32): both matrices of an expert (gate_up: 2 x shard x hidden, down:
    hidden x shard) scale with padded shard x padded hidden; the scales with their copies."""
    padded_shard, padded_hidden = mxfp4_padded_dims(backend, hidden_size, shard_width)
    scale_copies = MXFP4_LAYOUTS[backend][2]
    per_weight = 0.5 + 1.0 / 32
    return padded_shard * padded_hidden / (shard_width * hidden_size) * (0.5 + scale_copies / 32) / per_weight
