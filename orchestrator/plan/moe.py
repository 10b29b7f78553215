"""MoE formulas: fraction of experts touched per step, EP all-to-all bytes and time."""

from __future__ import annotations


def touched_fraction(num_experts: int, top_k: int, batch_tokens: float) -> float:
    """Expected fraction of E experts touched when B tokens each pick k uniformly: 1-(1-k/E)^B."""
    return float(1.0 - (1.0 - top_k / num_experts) ** batch_tokens)


def all_to_all_bytes_per_layer(tokens: int, top_k: int, hidden_size: int, bytes_per_value: float) -> float:
    """Bytes one direction (dispatch or combine) moves per MoE layer: k * d * b per token."""
    return tokens * top_k * hidden_size * bytes_per_value


def all_to_all_time_s(bytes_one_way: float, latency_s: float, bandwidth_bytes_per_s: float) -> float:
    """Dispatch + combine, each alpha + bytes/beta."""
    return 2.0 * (latency_s + bytes_one_way / bandwidth_bytes_per_s)
