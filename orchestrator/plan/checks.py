"""Layout checks that reject a layout or warn about it, each with a reason a user can act on.

Rejections are the engines' own rules, refused at plan time instead of at load (vLLM 0.32/0.33 and
SGLang 0.5.23 source):
- attention heads: q heads split over TP (`divide(num_heads, tp)`); KV heads divide TP's share below
  TP and are replicated above it, so TP must then be a multiple of them (QKVParallelLinear, both engines:
  `divide(total_num_kv_heads, tp)` below, `divide(tp, total_num_kv_heads)` above);
- linear and Mamba state heads split over TP (mamba_utils state shapes: `divide(num_v_heads, tp)`,
  `divide(intermediate_size, tp)`);
- column/row-parallel matrices split evenly (linear.py `divide(output_size, tp)`, `divide(input_size, tp)`);
  routed experts without EP split their width over TP (FusedMoE: intermediate_size // tp);
- experts over EP ranks: SGLang requires an even split (`_num_global_routed % ep_size == 0`, fused_moe
  layer.py); vLLM spreads the remainder one expert each over the first ranks (expert_map_manager.py
  `determine_expert_map`), so an uneven split is a warning there;
- quantized weights: int4 groups divide each row-parallel shard (marlin_utils
  `verify_group_size_divides_partition`), NVFP4 shards are multiples of 16 (modelopt.py), FP8 block-wise
  shards are multiples of the block (fp8_utils `validate_fp8_block_shape`, `validate_fp8_block_shape_moe`);
  MXFP4 experts are padded to the kernel's multiple (mxfp4.py `maybe_roundup_sizes`), never refused;
- vocabulary: padded to a multiple of 64, then split evenly over TP (vocab_parallel_embedding.py
  `pad_vocab_size`, `vocab_range_from_global_vocab_size`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.catalog.types import CheckpointQuant, ModelConfig
from orchestrator.layout import Layout

VOCAB_PADDING = 64  # vLLM DEFAULT_VOCAB_PADDING_SIZE


@dataclass(frozen=True)
class Cluster:
    nodes: int
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


Dim = tuple[str, int, str]  # (matrix, full width, kind: attention / dense / experts)


def _split_dims(cfg: ModelConfig, layout: Layout) -> tuple[list[Dim], list[Dim]]:
    """(row-parallel inputs, column-parallel outputs) TP splits: (name, full width, matrix kind) with kind
    one of attention / dense / experts (which matrices a checkpoint quantizes)."""
    rows: list[Dim] = []
    cols: list[Dim] = []
    attn_out = cfg.num_heads * (cfg.v_head_dim if cfg.is_mla else cfg.head_dim)
    rows.append(("o_proj", attn_out, "attention"))
    if not cfg.is_mla:
        cols.append(("q_proj", cfg.num_heads * cfg.head_dim, "attention"))
    dense = cfg.intermediate_size and (not cfg.is_moe or cfg.moe_layer_indices is None
                                       or len(cfg.moe_layer_indices) < cfg.num_layers
                                       or cfg.first_k_dense_layers)
    if dense:
        rows.append(("down_proj", cfg.intermediate_size, "dense"))
        cols.append(("gate/up_proj", cfg.intermediate_size, "dense"))
    if cfg.is_moe and not layout.ep:
        rows.append(("expert down_proj", cfg.moe_intermediate_size, "experts"))
        cols.append(("expert gate/up_proj", cfg.moe_intermediate_size, "experts"))
    if cfg.is_moe and cfg.shared_expert_intermediate_size:
        rows.append(("shared expert down_proj", cfg.shared_expert_intermediate_size, "dense"))
        cols.append(("shared expert gate/up_proj", cfg.shared_expert_intermediate_size, "dense"))
    return rows, cols


def _quantized(quant: CheckpointQuant | None, kind: str) -> bool:
    if quant is None:
        return True
    return {"attention": quant.attention_quantized, "dense": quant.dense_quantized,
            "experts": quant.experts_quantized}[kind]


def _quant_problems(cfg: ModelConfig, layout: Layout, weight_dtype: str, group_size: int,
                    quant: CheckpointQuant | None) -> list[str]:
    tp = layout.tp
    if tp == 1:
        return []
    rows, cols = _split_dims(cfg, layout)
    out = []
    block = quant.block_shape if quant is not None and weight_dtype == "fp8" else None
    for name, dim, kind in rows:
        if dim % tp or not _quantized(quant, kind):
            continue
        shard = dim // tp
        if weight_dtype == "int4" and group_size and shard % group_size:
            out.append(f"int4 group size {group_size}: {name} input {dim}/{tp} = {shard} is not a multiple "
                       f"of {group_size} (the kernels' groups must not straddle TP shards)")
        elif weight_dtype == "nvfp4" and shard % 16:
            out.append(f"NVFP4: {name} input {dim}/{tp} = {shard} is not a multiple of 16 (vLLM modelopt: "
                       "'in features size is not multiple of 16')")
        elif block is not None and shard % block[1]:
            out.append(f"FP8 block {block[0]}x{block[1]}: {name} input {dim}/{tp} = {shard} is not a "
                       f"multiple of block_k {block[1]}")
    if block is not None:
        for name, dim, kind in cols:
            if dim % tp or not _quantized(quant, kind):
                continue
            shard = dim // tp
            if shard % block[0]:
                out.append(f"FP8 block {block[0]}x{block[1]}: {name} output {dim}/{tp} = {shard} is not a "
                           f"multiple of block_n {block[0]}")
    return out


def _head_problems(cfg: ModelConfig, tp: int) -> list[str]:
    out = []
    if cfg.num_heads % tp:
        out.append(f"TP {tp} does not divide the {cfg.num_heads} attention heads")
    if not cfg.is_mla and cfg.num_kv_heads:
        kv = cfg.num_kv_heads
        if tp < kv and kv % tp:
            out.append(f"TP {tp} does not divide the {kv} KV heads (the engines split them evenly below "
                       f"{kv} ranks)")
        elif tp > kv and tp % kv:
            out.append(f"TP {tp} is not a multiple of the {kv} KV heads (above {kv} ranks the engines "
                       "replicate each KV head on tp/h_kv ranks)")
    la = cfg.linear_attention
    if la is not None:
        for what, n in (("linear-attention key heads", la.num_key_heads),
                        ("linear-attention value heads", la.num_value_heads)):
            if n % tp:
                out.append(f"TP {tp} does not divide the {n} {what} (their state is split by head)")
    if cfg.mamba is not None and cfg.mamba.inner_size % tp:
        out.append(f"TP {tp} does not divide Mamba's inner size {cfg.mamba.inner_size}")
    return out


def layout_problems(cfg: ModelConfig, layout: Layout, cluster: Cluster, *, weight_dtype: str,
                    group_size: int, quant: CheckpointQuant | None = None,
                    engine: str = "vllm", redundant_experts: int = 0) -> tuple[list[str], list[str]]:
    """(rejections, warnings) that need no memory or timing figures. `engine` picks the engine's rule
    where vLLM and SGLang differ (SGLang for `sglang`, vLLM's for vllm and the simulator).
    `redundant_experts`: EPLB slots beside the routed experts (then routed + redundant must divide over
    the EP ranks, on either engine)."""
    reject: list[str] = []
    warn: list[str] = []
    tp, pp = layout.tp, layout.pp
    if layout.gpus > cluster.gpus:
        reject.append(f"needs {layout.gpus} GPUs, the cluster has {cluster.gpus} "
                      f"({cluster.nodes} node(s) x {cluster.gpus_per_node})")
    per_replica = layout.gpus_per_replica
    if per_replica > cluster.gpus_per_node and per_replica % cluster.gpus_per_node:
        reject.append(f"a replica of {per_replica} GPUs spans nodes but is not a whole number of "
                      f"{cluster.gpus_per_node}-GPU nodes")
    if cluster.gpus_per_node % per_replica and per_replica < cluster.gpus_per_node:
        warn.append(f"{per_replica} GPUs per replica leave GPUs idle on each "
                    f"{cluster.gpus_per_node}-GPU node")
    reject += _head_problems(cfg, tp)
    if pp > cfg.num_layers:
        reject.append(f"{pp} pipeline stages for only {cfg.num_layers} layers")
    elif cfg.num_layers % pp:
        warn.append(f"{cfg.num_layers} layers do not split evenly into {pp} stages "
                    "(the largest sets the pace)")
    if layout.ep and not cfg.is_moe:
        reject.append("EP on a dense model: there are no experts to spread")
    if layout.ep and cfg.is_moe and redundant_experts:
        # EPLB (deepseek-ai/EPLB eplb.py, used by vLLM and SGLang) asserts num_physical_experts %
        # num_gpus == 0: DeepSeek-V3's decode unit holds 256 + 64 on 320 ranks, one each
        if (cfg.num_routed_experts + redundant_experts) % layout.ep_size:
            reject.append(f"{cfg.num_routed_experts} + {redundant_experts} redundant experts do not divide "
                          f"over {layout.ep_size} EP ranks (EPLB places routed + redundant slots evenly)")
    elif layout.ep and cfg.is_moe and cfg.num_routed_experts % layout.ep_size:
        experts, ranks = cfg.num_routed_experts, layout.ep_size
        if engine == "sglang":
            reject.append(f"{experts} experts do not divide over {ranks} EP ranks (SGLang requires an even "
                          "split)")
        elif experts < ranks:
            reject.append(f"{experts} experts for {ranks} EP ranks: some ranks would hold none")
        else:
            warn.append(f"{experts} experts over {ranks} EP ranks: vLLM gives the first {experts % ranks} "
                        f"ranks {math.ceil(experts / ranks)} experts, the rest {experts // ranks}")
    rows, cols = _split_dims(cfg, layout)
    for name, dim, _ in (*rows, *cols):
        if tp > 1 and dim % tp:
            reject.append(f"TP {tp} does not divide {name}'s width {dim}")
            break
    reject += _quant_problems(cfg, layout, weight_dtype, group_size, quant)
    padded = math.ceil(cfg.vocab_size / VOCAB_PADDING) * VOCAB_PADDING
    if tp > 1 and padded % tp:
        reject.append(f"vocabulary {cfg.vocab_size}, padded to {padded} (a multiple of {VOCAB_PADDING}), "
                      f"does not split over TP {tp} (the engine divides it evenly)")
    elif tp > 1 and padded != cfg.vocab_size:
        warn.append(f"vocabulary {cfg.vocab_size} is padded to {padded} before the TP split")
    if not cfg.is_mla and tp > cfg.num_kv_heads and tp % cfg.num_kv_heads == 0:
        warn.append(f"TP {tp} > {cfg.num_kv_heads} KV heads: KV heads are replicated, "
                    "KV capacity per GPU stops growing")
    if cfg.is_mla and tp > 1:
        warn.append("MLA's latent KV is replicated on every TP rank; DP attention (dp..ep) avoids that")
    if tp > cluster.gpus_per_node:
        warn.append(f"TP {tp} crosses the node boundary: all-reduces run over the inter-node link")
    if layout.ep and layout.ep_size > cluster.gpus_per_node:
        warn.append(f"EP over {layout.ep_size} ranks crosses nodes: all-to-all runs over the inter-node link")
    return reject, warn
