"""Load generator behind `orch bench`: workloads, arrivals, the streaming client, records, metrics,
the load-point runner and the rate search. Heavy parts (numpy, orjson) load with this package."""

from orchestrator.loadgen.balance import Balancer
from orchestrator.loadgen.bench import BenchConfig, BenchRun, LoadPoint, PointResult, run_bench, run_point
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
from orchestrator.loadgen.search import SearchResult, search_rate
from orchestrator.loadgen.workloads import Workload

__all__ = [
    "Balancer",
    "BenchConfig",
    "BenchRun",
    "ClientConfig",
    "Distribution",
    "LoadPoint",
    "Metrics",
    "PointResult",
    "RequestRecord",
    "RequestSpec",
    "SearchResult",
    "Workload",
    "arrival_offsets",
    "compute_metrics",
    "meets_slo",
    "run_bench",
    "run_closed_loop",
    "run_open_loop",
    "run_point",
    "search_rate",
    "send_request",
    "slo_met",
]
