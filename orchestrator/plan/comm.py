"""Collective-communication times: ring all-reduce for TP, point-to-point for PP. Alpha-beta model."""

from __future__ import annotations

from orchestrator.catalog.types import LinkSpec


def allreduce_time_s(size_bytes: float, ranks: int, link: LinkSpec) -> float:
    """Ring all-reduce of `size_bytes` over `ranks`: 2(n-1) alpha + 2(n-1)/n * S / beta.

    A link with a measured per-collective latency (`allreduce_latency_s`) pays that once instead of
    the 2(n-1) hop latencies.
    """
    if ranks <= 1:
        return 0.0
    hops = 2 * (ranks - 1)
    fixed = link.allreduce_latency_s if link.allreduce_latency_s is not None else hops * link.latency_s
    return fixed + hops / ranks * size_bytes / link.bandwidth_bytes_per_s


def p2p_time_s(size_bytes: float, link: LinkSpec) -> float:
    """One send/recv between neighbouring pipeline stages: alpha + S / beta."""
    return link.latency_s + size_bytes / link.bandwidth_bytes_per_s
