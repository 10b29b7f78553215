"""Layout checks that reject a layout or warn about it, each with a reason a user can act on."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.catalog.types import ModelConfig
from orchestrator.layout import Layout


@dataclass(frozen=True)
class Cluster:
    nodes: int
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def _row_parallel_inputs(cfg: ModelConfig, layout: Layout) -> list[tuple[str, int]]:
    """Input dimensions of the matrices TP splits along their input (row-parallel): each shard's
    width must be a whole number of quantization groups."""
    tp = layout.tp
    out = []
    attn_out = cfg.num_heads * (cfg.v_head_dim if cfg.is_mla else cfg.head_dim)
    out.append(("o_proj", attn_out))
    if cfg.intermediate_size and (not cfg.is_moe or cfg.first_k_dense_layers):
        out.append(("down_proj", cfg.intermediate_size))
    if cfg.is_moe and not layout.ep:
        out.append(("expert down_proj", cfg.moe_intermediate_size))
    if cfg.is_moe and cfg.shared_expert_intermediate_size:
        out.append(("shared expert down_proj", cfg.shared_expert_intermediate_size))
    return [(name, dim) for name, dim in out if tp > 1 and dim > 0]


def layout_problems(cfg: ModelConfig, layout: Layout, cluster: Cluster, *, weight_dtype: str,
                    group_size: int, redundant_experts: int = 0) -> tuple[list[str], list[str]]:
    """(rejections, warnings) that need no memory or timing figures. `redundant_experts`: EPLB slots
    beside the routed experts (routed + redundant must divide over the EP ranks)."""
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
    if cfg.num_heads % tp:
        reject.append(f"TP {tp} does not divide the {cfg.num_heads} attention heads")
    if pp > cfg.num_layers:
        reject.append(f"{pp} pipeline stages for only {cfg.num_layers} layers")
    elif cfg.num_layers % pp:
        warn.append(f"{cfg.num_layers} layers do not split evenly into {pp} stages "
                    "(the largest sets the pace)")
    if layout.ep and not cfg.is_moe:
        reject.append("EP on a dense model: there are no experts to spread")
    if layout.ep and cfg.is_moe and (cfg.num_routed_experts + redundant_experts) % layout.ep_size:
        slots = f" + {redundant_experts} redundant" if redundant_experts else ""
        reject.append(f"{cfg.num_routed_experts}{slots} experts do not divide over {layout.ep_size} EP ranks")
    if weight_dtype == "int4":
        for name, dim in _row_parallel_inputs(cfg, layout):
            shard = dim / tp
            if dim % tp or int(shard) % group_size:
                reject.append(f"int4 group size {group_size}: {name} input {dim}/{tp} = {shard:g} "
                              f"is not a multiple of {group_size}")
    if cfg.vocab_size % tp:
        warn.append(f"vocabulary {cfg.vocab_size} is not divisible by TP {tp}; the engine pads it")
    if not cfg.is_mla and tp > cfg.num_kv_heads:
        warn.append(f"TP {tp} > {cfg.num_kv_heads} KV heads: KV heads are replicated, "
                    "KV capacity per GPU stops growing")
    if cfg.is_mla and tp > 1:
        warn.append("MLA's latent KV is replicated on every TP rank; DP attention (dp..ep) avoids that")
    if tp > cluster.gpus_per_node:
        warn.append(f"TP {tp} crosses the node boundary: all-reduces run over the inter-node link")
    if layout.ep and layout.ep_size > cluster.gpus_per_node:
        warn.append(f"EP over {layout.ep_size} ranks crosses nodes: all-to-all runs over the inter-node link")
    return reject, warn
