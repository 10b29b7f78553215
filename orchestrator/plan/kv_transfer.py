"""KV transfer between a prefill engine and a decode engine: bytes per GPU and time over the link.

A request's prompt KV moves once, from the prefill engine (one DP rank: `tp` GPUs per PP stage) to
the decode engine, every GPU over its own link in parallel (each GPU has its NVLink ports and, in
H100/H200 nodes, its own 400 Gb/s NIC). The transfer ends when the busiest GPU is done:

- a decode GPU receives what it will hold: its share of the KV heads for the layers of its stage
  (MLA: the whole latent, which every TP rank keeps);
- a prefill GPU sends its heads to every decode rank that reads them: with decode TP above prefill
  TP, each prefill rank serves d_tp / p_tp decode ranks (vLLM NIXL: "multiple local ranks read
  different chunks from one remote rank"; MLA: each reads the whole latent); with decode TP below
  prefill TP, a decode rank gathers from p_tp / d_tp prefill ranks, each sending its own heads once.

Time = alpha + busiest GPU's bytes / beta: the point-to-point formula of plan/comm.py, over the
intra-node link when both pools share a node and the inter-node link otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from orchestrator.catalog.types import LinkSpec, ModelConfig
from orchestrator.layout import Layout
from orchestrator.plan.comm import p2p_time_s
from orchestrator.plan.memory import kv_values_per_token_per_layer, stage_layer_counts


def kv_transfer_bytes_per_token(cfg: ModelConfig, kv_bytes_per_value: float, prefill: Layout,
                                decode: Layout) -> float:
    """Bytes per prompt token that the busiest GPU of the pair sends or receives."""
    p_tp, d_tp = prefill.tp, decode.tp
    d_layers = max(stage_layer_counts(cfg.num_layers, decode.pp))
    p_layers = max(stage_layer_counts(cfg.num_layers, prefill.pp))
    received = kv_values_per_token_per_layer(cfg, d_tp)
    if cfg.is_mla:
        sent = received * max(1.0, d_tp / p_tp)
    elif d_tp >= p_tp:
        sent = received * d_tp / p_tp
    else:
        sent = float(kv_values_per_token_per_layer(cfg, p_tp))
    return max(received * d_layers, sent * p_layers) * kv_bytes_per_value


def kv_transfer_time_s(cfg: ModelConfig, kv_bytes_per_value: float, prefill: Layout, decode: Layout,
                       prompt_tokens: int, link: LinkSpec) -> float:
    """Seconds to move one prompt's KV from its prefill engine to its decode engine over `link`."""
    return transfer_time_fn(cfg, kv_bytes_per_value, prefill, decode, link)(prompt_tokens)


def transfer_time_fn(cfg: ModelConfig, kv_bytes_per_value: float, prefill: Layout, decode: Layout,
                     link: LinkSpec) -> Callable[[int], float]:
    """kv_transfer_time_s with the pair fixed: prompt tokens -> seconds (the simulator asks per request)."""
    per_token = kv_transfer_bytes_per_token(cfg, kv_bytes_per_value, prefill, decode)

    def seconds(prompt_tokens: int) -> float:
        return p2p_time_s(per_token * max(prompt_tokens, 0), link)

    return seconds


def transfer_link(gpu_intra: LinkSpec, gpu_inter: LinkSpec, *, same_node: bool) -> LinkSpec:
    """NVLink (or the GPU's intra-node link) when both pools share one node, else the network."""
    return gpu_intra if same_node else gpu_inter


def transfers_per_s(transfer_s: float, prefill_engines: int, decode_engines: int) -> float:
    """How many transfers per second the pools' links carry: each engine's GPUs move one request's
    KV at a time, so the side with fewer engines bounds the rate."""
    if transfer_s <= 0:
        return math.inf
    return min(prefill_engines, decode_engines) / transfer_s
