"""Load generator behind `orch bench`: records, metrics, SSE parsing and the streaming client."""

from orchestrator.loadgen.client import (
    ClientConfig,
    RequestSpec,
    arrival_offsets,
    run_closed_loop,
    run_open_loop,
    send_request,
)
from orchestrator.loadgen.metrics import Distribution, Metrics, compute_metrics, meets_slo, slo_met
from orchestrator.loadgen.records import RequestRecord

__all__ = [
    "ClientConfig",
    "Distribution",
    "Metrics",
    "RequestRecord",
    "RequestSpec",
    "arrival_offsets",
    "compute_metrics",
    "meets_slo",
    "run_closed_loop",
    "run_open_loop",
    "send_request",
    "slo_met",
]
