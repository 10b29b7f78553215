"""MoE formulas: fraction of experts touched per step, EP all-to-all bytes and time, and what the
routed experts cost beside their GEMM FLOPs (padded rows, activation passes).

The last two follow vLLM's Triton fused-MoE path (vllm/model_executor/layers/fused_moe/fused_moe.py,
`fused_experts_impl` / `TritonExperts.apply`), which runs per MoE layer, one kernel after another:
quantize the input (w8a8 only), `moe_align_block_size` (each expert's rows padded to a multiple of
BLOCK_SIZE_M), GEMM 1 gathering each (token, expert) row into intermediate_cache1 (M, topk, 2n),
`silu_and_mul` into intermediate_cache2 (M*topk, n), quantize it (w8a8), GEMM 2 into
intermediate_cache3 (M, topk, d), and `moe_sum` into the output (M, d). Under TP every rank runs all
M*topk rows on its n = f_e/tp slice of each expert, so these passes do not shrink with TP while the
FLOPs do: for DeepSeek-V3 at TP8 (d 7168, n 256, top-8) they move about 40 kB per (token, expert)
pair against 11 MFLOP, below the H200's FP8 ridge point (about 410 FLOP/byte), which is why MoE
prefill with wide TP runs far below the GEMM peak.
"""

from __future__ import annotations

import math

# BLOCK_SIZE_M of vLLM's default fused-MoE config (fused_moe.py get_default_config): 16 when the step
# has no more tokens than experts (M <= E), else 64 (64 also for block-FP8 weights). The tuned tables
# under fused_moe/configs pick 16-64 by M alike.
SMALL_BLOCK_ROWS = 16
BLOCK_ROWS = 64


def touched_fraction(num_experts: int, top_k: int, batch_tokens: float) -> float:
    """Expected fraction of E experts touched when B tokens each pick k uniformly: 1-(1-k/E)^B."""
    return float(1.0 - (1.0 - top_k / num_experts) ** batch_tokens)


def all_to_all_bytes_per_layer(tokens: int, top_k: int, hidden_size: int, bytes_per_value: float) -> float:
    """Bytes one direction (dispatch or combine) moves per MoE layer: k * d * b per token."""
    return tokens * top_k * hidden_size * bytes_per_value


def all_to_all_time_s(bytes_one_way: float, latency_s: float, bandwidth_bytes_per_s: float) -> float:
    """Dispatch + combine, each alpha + bytes/beta."""
    return 2.0 * (latency_s + bytes_one_way / bandwidth_bytes_per_s)


def padded_rows(pairs: float, num_experts: int, step_tokens: float) -> float:
    """Rows the grouped GEMMs compute for `pairs` routed (token, expert) rows spread evenly over
    `num_experts`: each expert's rows rounded up to a multiple of the block (moe_align_block_size).
    With m rows per expert (Poisson), the expected blocks per expert are 1 - e^-m while m is below a
    block and about m/B + 1/2 (a half-empty last block) above it."""
    if pairs <= 0:
        return 0.0
    block = SMALL_BLOCK_ROWS if step_tokens <= num_experts else BLOCK_ROWS
    m = pairs / num_experts
    blocks = max(1.0 - math.exp(-m), m / block + 0.5 * (1.0 - math.exp(-m / block)))
    return max(pairs, num_experts * block * blocks)


def activation_bytes(hidden_size: int, shard_intermediate: int, fp8_inputs: bool) -> tuple[float, float]:
    """(bytes per routed (token, expert) row, bytes per token) the fused-MoE passes beside the GEMMs
    move on one GPU: `shard_intermediate` is the expert width on that GPU (f_e/tp under TP, f_e under
    EP); outputs and intermediates are bf16, the GEMM inputs FP8 for w8a8 weights.

    Per row: GEMM 1 reads the gathered input row (d), writes 2n; silu_and_mul reads 2n and writes n;
    w8a8 quantizes n (read 2n bytes, write n); GEMM 2 reads n and writes d; moe_sum reads d.
    Per token: moe_sum writes d; w8a8 quantizes the input (read 2d bytes, write d)."""
    d, n = hidden_size, shard_intermediate
    a_in = 1.0 if fp8_inputs else 2.0
    per_row = d * a_in + 2 * n * 2 + (2 * n * 2 + n * 2) + n * a_in + d * 2 + d * 2
    per_token = d * 2.0
    if fp8_inputs:
        per_row += n * 2 + n * 1
        per_token += d * 2 + d * 1
    return per_row, per_token
