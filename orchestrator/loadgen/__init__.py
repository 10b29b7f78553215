"""Load generator behind `orch bench`: records, metrics, SSE parsing and the streaming client."""

from orchestrator.loadgen.metrics import Distribution, Metrics, compute_metrics, meets_slo, slo_met
from orchestrator.loadgen.records import RequestRecord

__all__ = ["Distribution", "Metrics", "RequestRecord", "compute_metrics", "meets_slo", "slo_met"]
