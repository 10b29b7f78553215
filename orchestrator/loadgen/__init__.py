"""Load generator behind `orch bench`: workloads (requests, sessions, traces), arrivals, the streaming
client, routing over replicas, records, metrics, the load-point runner and the rate search."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.faces import lazy_face

if TYPE_CHECKING:
    from orchestrator.loadgen.balance import BALANCE_KINDS as BALANCE_KINDS
    from orchestrator.loadgen.balance import Balance as Balance
    from orchestrator.loadgen.balance import Balancer as Balancer
    from orchestrator.loadgen.bench import CLOSED_LOOP_SPECS as CLOSED_LOOP_SPECS
    from orchestrator.loadgen.bench import BenchConfig as BenchConfig
    from orchestrator.loadgen.bench import BenchRun as BenchRun
    from orchestrator.loadgen.bench import LoadPoint as LoadPoint
    from orchestrator.loadgen.bench import PointResult as PointResult
    from orchestrator.loadgen.bench import WorkloadFactory as WorkloadFactory
    from orchestrator.loadgen.bench import run_bench as run_bench
    from orchestrator.loadgen.bench import run_point as run_point
    from orchestrator.loadgen.bench import save_records as save_records
    from orchestrator.loadgen.client import Arrival as Arrival
    from orchestrator.loadgen.client import ClientConfig as ClientConfig
    from orchestrator.loadgen.client import Endpoint as Endpoint
    from orchestrator.loadgen.client import RequestSpec as RequestSpec
    from orchestrator.loadgen.client import arrival_offsets as arrival_offsets
    from orchestrator.loadgen.client import run_closed_loop as run_closed_loop
    from orchestrator.loadgen.client import run_open_loop as run_open_loop
    from orchestrator.loadgen.client import send_request as send_request
    from orchestrator.loadgen.columns import GapSet as GapSet
    from orchestrator.loadgen.columns import RequestColumns as RequestColumns
    from orchestrator.loadgen.columns import columns_from_records as columns_from_records
    from orchestrator.loadgen.content import ROOT_HASH as ROOT_HASH
    from orchestrator.loadgen.content import Content as Content
    from orchestrator.loadgen.content import sim_answer_key as sim_answer_key
    from orchestrator.loadgen.content import sim_answer_text as sim_answer_text
    from orchestrator.loadgen.content import text_key as text_key
    from orchestrator.loadgen.delivery import Delivery as Delivery
    from orchestrator.loadgen.delivery import check_delivery as check_delivery
    from orchestrator.loadgen.delivery import delivered_label as delivered_label
    from orchestrator.loadgen.delivery import undelivered as undelivered
    from orchestrator.loadgen.engine_metrics import DEFAULT_INTERVAL_S as DEFAULT_INTERVAL_S
    from orchestrator.loadgen.engine_metrics import EngineSample as EngineSample
    from orchestrator.loadgen.engine_metrics import metrics_url as metrics_url
    from orchestrator.loadgen.engine_metrics import series_to_dict as series_to_dict
    from orchestrator.loadgen.engine_metrics import summarize_pools as summarize_pools
    from orchestrator.loadgen.engine_metrics import summarize_series as summarize_series
    from orchestrator.loadgen.engine_metrics import with_engine_metrics as with_engine_metrics
    from orchestrator.loadgen.intervals import MIN_REQUESTS_TO_SEPARATE as MIN_REQUESTS_TO_SEPARATE
    from orchestrator.loadgen.intervals import point_intervals as point_intervals
    from orchestrator.loadgen.intervals import slo_margin as slo_margin
    from orchestrator.loadgen.intervals import straddled_bounds as straddled_bounds
    from orchestrator.loadgen.metrics import Distribution as Distribution
    from orchestrator.loadgen.metrics import Metrics as Metrics
    from orchestrator.loadgen.metrics import compute_metrics as compute_metrics
    from orchestrator.loadgen.metrics import finite as finite
    from orchestrator.loadgen.metrics import metrics_of as metrics_of
    from orchestrator.loadgen.metrics import slo_met as slo_met
    from orchestrator.loadgen.records import RequestRecord as RequestRecord
    from orchestrator.loadgen.search import SearchResult as SearchResult
    from orchestrator.loadgen.search import bracket as bracket
    from orchestrator.loadgen.search import check_bounds as check_bounds
    from orchestrator.loadgen.search import next_concurrency as next_concurrency
    from orchestrator.loadgen.search import next_rate as next_rate
    from orchestrator.loadgen.search import search_rate as search_rate
    from orchestrator.loadgen.search import verdict as verdict
    from orchestrator.loadgen.session_runner import SessionsResult as SessionsResult
    from orchestrator.loadgen.session_runner import run_sessions as run_sessions
    from orchestrator.loadgen.sessions import SessionPlan as SessionPlan
    from orchestrator.loadgen.sessions import SessionSet as SessionSet
    from orchestrator.loadgen.sessions import SessionState as SessionState
    from orchestrator.loadgen.sessions import agentic_sessions as agentic_sessions
    from orchestrator.loadgen.sessions import conversation_sessions as conversation_sessions
    from orchestrator.loadgen.sessions import sharegpt_sessions as sharegpt_sessions
    from orchestrator.loadgen.slo import meets_slo as meets_slo
    from orchestrator.loadgen.slo import parse_slo as parse_slo
    from orchestrator.loadgen.spec_decode_metrics import MeasuredAcceptance as MeasuredAcceptance
    from orchestrator.loadgen.spec_decode_metrics import acceptance_record as acceptance_record
    from orchestrator.loadgen.spec_decode_metrics import combined_acceptance as combined_acceptance
    from orchestrator.loadgen.spec_decode_metrics import scrape_counters as scrape_counters
    from orchestrator.loadgen.spec_workload import CallShape as CallShape
    from orchestrator.loadgen.spec_workload import call_shape as call_shape
    from orchestrator.loadgen.spec_workload import session_factory as session_factory
    from orchestrator.loadgen.spec_workload import slo_bounds as slo_bounds
    from orchestrator.loadgen.spec_workload import spec_workload_factory as spec_workload_factory
    from orchestrator.loadgen.spec_workload import workload_factory as workload_factory
    from orchestrator.loadgen.texts import PromptMaker as PromptMaker
    from orchestrator.loadgen.texts import Tokenizer as Tokenizer
    from orchestrator.loadgen.texts import load_tokenizer as load_tokenizer
    from orchestrator.loadgen.traces import TRACE_FORMATS as TRACE_FORMATS
    from orchestrator.loadgen.traces import TraceFormat as TraceFormat
    from orchestrator.loadgen.traces import read_trace as read_trace
    from orchestrator.loadgen.vllm_format import vllm_result as vllm_result
    from orchestrator.loadgen.window import Window as Window
    from orchestrator.loadgen.window import closed_loop_warmup_s as closed_loop_warmup_s
    from orchestrator.loadgen.window import in_window as in_window
    from orchestrator.loadgen.window import measurement_window as measurement_window
    from orchestrator.loadgen.window import point_warmup_s as point_warmup_s
    from orchestrator.loadgen.workloads import Workload as Workload
    from orchestrator.loadgen.workloads import parse_length as parse_length
    from orchestrator.loadgen.workloads import prefix_workload as prefix_workload
    from orchestrator.loadgen.workloads import random_workload as random_workload
    from orchestrator.loadgen.workloads import sharegpt_workload as sharegpt_workload
    from orchestrator.loadgen.workloads import trace_workload as trace_workload

__getattr__, __all__ = lazy_face(__name__, {
    "balance": ("BALANCE_KINDS", "Balance", "Balancer",),
    "bench": (
        "BenchConfig", "BenchRun", "CLOSED_LOOP_SPECS", "LoadPoint", "PointResult", "WorkloadFactory",
        "run_bench", "run_point", "save_records",
    ),
    "client": (
        "Arrival", "ClientConfig", "Endpoint", "RequestSpec", "arrival_offsets", "run_closed_loop",
        "run_open_loop", "send_request",
    ),
    "columns": ("GapSet", "RequestColumns", "columns_from_records",),
    "content": ("Content", "ROOT_HASH", "sim_answer_key", "sim_answer_text", "text_key",),
    "engine_metrics": (
        "DEFAULT_INTERVAL_S", "EngineSample", "metrics_url", "series_to_dict", "summarize_pools",
        "summarize_series", "with_engine_metrics",
    ),
    "delivery": ("Delivery", "check_delivery", "delivered_label", "undelivered",),
    "intervals": (
        "MIN_REQUESTS_TO_SEPARATE", "point_intervals", "slo_margin",
        "straddled_bounds",
    ),
    "metrics": ("Distribution", "Metrics", "compute_metrics", "finite", "metrics_of", "slo_met",),
    "slo": ("meets_slo", "parse_slo",),
    "records": ("RequestRecord",),
    "search": (
        "SearchResult", "bracket", "check_bounds", "next_concurrency", "next_rate", "search_rate", "verdict",
    ),
    "session_runner": ("SessionsResult", "run_sessions",),
    "sessions": (
        "SessionPlan", "SessionSet", "SessionState", "agentic_sessions", "conversation_sessions",
        "sharegpt_sessions",
    ),
    "spec_workload": (
        "CallShape", "call_shape", "session_factory", "slo_bounds", "spec_workload_factory",
        "workload_factory",
    ),
    "texts": ("PromptMaker", "Tokenizer", "load_tokenizer",),
    "traces": ("TRACE_FORMATS", "TraceFormat", "read_trace",),
    "vllm_format": ("vllm_result",),
    "window": ("Window", "closed_loop_warmup_s", "in_window", "measurement_window", "point_warmup_s",),
    "workloads": (
        "Workload", "parse_length", "prefix_workload", "random_workload", "sharegpt_workload",
        "trace_workload",
    ),
    "spec_decode_metrics": (
        "MeasuredAcceptance", "acceptance_record", "combined_acceptance", "scrape_counters",
    ),
})  # fmt: skip
